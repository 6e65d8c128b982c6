"""The lookup tables as a planner reads them: where a position no round reached starts (the longer match's first
position), and how one request's own outcomes scale the session's estimates (`planning.core.RequestLookup`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from plans import LookupCandidate, Plan, Planning

from hf_dynaspec.drafting.planning import core
from hf_dynaspec.drafting.planning.core import (
    MAX_MATCH_KEY,
    LatticeCosts,
    LookupTable,
    PlannerMemory,
    RequestLookup,
    RoundCosts,
)
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.lattice import lattice_memory

SOURCE = "prompt-lookup"


def test_an_unreached_position_starts_from_the_longer_matchs_first_position():
    """Position j of a copy matched m ids is reached once positions 1..j-1 were accepted: the copy then continues a
    match m + j - 1 ids long, whose position 1 (learnt in every round that offers a copy) is where it starts. A
    table pooled over match lengths would start it near the average of every match."""
    table = LookupTable()
    for _ in range(40):
        table.record((SOURCE, 5, 1), True)  # copies matched 5 ids go on
        table.record((SOURCE, 2, 1), False)  # copies matched 2 ids do not start
        table.record((SOURCE, MAX_MATCH_KEY, 1), True)
    assert table.estimate((SOURCE, 2, 1)) < 0.1
    assert table.estimate((SOURCE, 2, 4)) == table.estimate((SOURCE, 5, 1)) > 0.9
    assert table.estimate((SOURCE, 3, 3)) == table.estimate((SOURCE, 5, 1))
    # Past MAX_MATCH_KEY ids every match shares one key.
    assert table.estimate((SOURCE, 6, 9)) == table.estimate((SOURCE, MAX_MATCH_KEY, 1))
    # A position learns its own rate from there.
    for _ in range(40):
        table.record((SOURCE, 2, 4), False)
    assert table.estimate((SOURCE, 2, 4)) < 0.1 and table.estimate((SOURCE, 5, 1)) > 0.9


def _session_table() -> LookupTable:
    table = LookupTable()
    for _ in range(30):
        for match in (1, 2, 3):
            table.record((SOURCE, match, 1), True)
            table.record((SOURCE, match, 1), False)
        table.record((SOURCE, 2, 2), True)
    return table


def test_a_fresh_request_reads_the_sessions_estimates():
    table = _session_table()
    request = RequestLookup(table)
    for key in ((SOURCE, 1, 1), (SOURCE, 2, 1), (SOURCE, 2, 2), (SOURCE, 3, 5), ("suffix-request", 2, 1)):
        assert request.estimate(key) == table.estimate(key)


def test_a_requests_outcomes_scale_the_odds_of_its_source_and_part_of_the_copy():
    """Odds scaled by (A + w) / (E + w) * (n - E + w) / (n - A + w), A accepted of n outcomes where the session's
    estimates summed to E (read before each outcome is learnt), kept apart for a copy's first position and the rest,
    and per source."""
    table = _session_table()
    request = RequestLookup(table)
    expected = 0.0
    for match in (1, 2, 3, 1):  # four first tokens rejected in this request
        expected += table.estimate((SOURCE, match, 1))
        request.record((SOURCE, match, 1), False)
    w = core.REQUEST_WEIGHT
    factor = w / (expected + w) * (4 - expected + w) / (4 + w)
    for match in (1, 2, 3, 7):
        p = table.estimate((SOURCE, match, 1))
        odds = p / (1 - p) * factor
        assert request.estimate((SOURCE, match, 1)) == pytest.approx(odds / (1 + odds), rel=1e-12)
        assert request.estimate((SOURCE, match, 1)) < p
    # The continuation, and the other sources, are as the session has them.
    assert request.estimate((SOURCE, 2, 2)) == table.estimate((SOURCE, 2, 2))
    assert request.estimate(("suffix-request", 2, 1)) == table.estimate(("suffix-request", 2, 1))
    # The session learnt the outcomes too, and the next request starts from it.
    assert table.counts[(SOURCE, 1, 1)] == [30, 62]
    assert RequestLookup(table).estimate((SOURCE, 1, 1)) == table.estimate((SOURCE, 1, 1))


def test_copies_that_go_on_in_a_request_raise_its_continuation():
    table = _session_table()
    request = RequestLookup(table)
    for position in (2, 3, 4, 5, 6, 7):
        request.record((SOURCE, 2, position), True)
    for position in (2, 3, 8):
        assert request.estimate((SOURCE, 2, position)) > table.estimate((SOURCE, 2, position))
    assert request.estimate((SOURCE, 2, 1)) == table.estimate((SOURCE, 2, 1))


def _steep_costs() -> RoundCosts:
    """fp32 on a CPU (MKL's small-M path): verifying 2 tokens costs two steps, each further one little."""
    return RoundCosts([0.0, 1.0] + [2.0 + 0.05 * (n - 2) for n in range(2, 22)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03)


def _taught(memory: PlannerMemory, key: tuple) -> None:
    """A session where copies matched 2 ids start right half the time and then go on 80% of the time."""
    for _ in range(12):
        for outcome in (True,) * 5 + (False,) * 5:
            memory.lookup.record((*key, 2, 1), outcome)
        for position in range(2, 12):
            for outcome in (True,) * 8 + (False,) * 2:
                memory.lookup.record((*key, 2, position), outcome)


def _request_of_failing_copies(session_only: bool) -> tuple[list[int], int]:
    memory = PlannerMemory()
    _taught(memory, (SOURCE,))
    candidate = LookupCandidate(SOURCE, match_length=2, num_tokens=10)
    request = Planning(_steep_costs(), memory, 4, drafter=False)
    if session_only:  # the session's tables alone, as before the request's view
        request.planner.lookup = memory.lookup
    drafted = []
    for _ in range(12):  # every copy's first token is wrong in this request
        chosen = request.plan_round([candidate], 50)
        drafted.append(chosen.num_tokens if chosen.source == SOURCE else 0)
        if chosen.source == SOURCE:
            request.record(chosen, chosen.num_tokens, 0)
        else:
            request.record_passed_over(candidate, False)
    next_call = Planning(_steep_costs(), memory, 4, drafter=False).plan_round([candidate], 50)
    return drafted, next_call.num_tokens if next_call.source == SOURCE else 0


def test_a_request_whose_copies_fail_stops_drafting_them_and_the_next_request_tries_again():
    """A session taught that 2-gram copies pay (on fp32 CPU costs) drafts one; in a request where they fail at once
    the planner stops after its first four rounds and a probe, where the session's tables alone (no request view) go
    on; the next call's planner, reading the session (which learnt the failures too), drafts it
    again."""
    drafted, next_call = _request_of_failing_copies(session_only=False)
    assert drafted[0] > 0 and drafted[5:] == [0] * 7 and next_call > 0, (drafted, next_call)
    session_only, _ = _request_of_failing_copies(session_only=True)
    assert min(session_only) > 0, session_only


def test_a_lattice_call_reads_copies_through_the_request():
    """The one planner plans a lattice call's copies (on a lattice's tables and costs) through the request's view."""
    memory = lattice_memory(None)
    _taught(memory, (SOURCE,))
    costs = _steep_costs()
    planning = Planning(LatticeCosts(costs.verify_seconds, lattice_seconds=0.02, tree_seconds=0.01), memory, 4,
                        drafter=False)
    assert isinstance(planning.planner, SpeculationPlanner)
    copy = planning.copy(LookupCandidate(SOURCE, match_length=2, num_tokens=10))

    def priors():  # what the planner prices the copy by (SpeculationPlanner.rate)
        table = copy.proposer.table(planning.planner, copy)
        return [table.estimate(copy.proposer.key(copy, j)) for j in range(1, 11)]

    before = priors()
    for _ in range(4):
        planning.planner.record_passed_over(copy, False)
    after = priors()
    assert after[0] < memory.lookup.estimate((SOURCE, 2, 1)) < before[0]
    assert after[1:] == [memory.lookup.estimate((SOURCE, 2, j)) for j in range(2, 11)]  # the continuation: the session's


def test_the_request_calibration_learns_whatever_the_plan():
    """A round's outcomes reach the request's view through the planner's record calls: drafted, past the draft and
    passed over all count."""
    memory = PlannerMemory()
    planner = Planning(_steep_costs(), memory, 4, drafter=False)
    plan = Plan(SOURCE, 3, 2)
    planner.record(plan, 3, 3)
    plan = replace(plan, next_offered=5)
    planner.record_past_the_draft(plan, 3, False)
    planner.record_passed_over(LookupCandidate(SOURCE, 4, 6), True)
    assert planner.lookup.sums[(SOURCE, 1)][::2] == [2, 2]
    assert planner.lookup.sums[(SOURCE, 2)][::2] == [2, 3]
