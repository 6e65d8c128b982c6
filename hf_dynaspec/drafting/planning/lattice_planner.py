"""Planned lattice rounds (Medusa `draft_plan="auto"`): each round, the draft from a lattice source (Medusa heads, a
diffusion LM) that maximises expected committed tokens per second, priced as hf_dynaspec.drafting.planning.planner prices
the EAGLE drafter's.

A lattice round costs the source's scores for every position at once (`lattice_seconds`: K head blocks and
projections, or one diffusion forward), then the target's forward over the draft; a lattice tree adds its host
search (`tree_seconds`). A prompt-lookup round and a round with no draft cost the forward only. So a round is
planned in two steps, as the EAGLE planner plans and then cuts a chain:

1. before the lattice (`plan_round`): the lattice (at its best chain length or tree depth, from the per-position
   tables), a prompt-lookup candidate and no draft are compared with every cost counted; the lattice is scored
   only if it pays;
2. with the lattice read (`choose`): its cost is sunk; each chain length (the per-position argmax path, priced by
   the table of acceptance by position and confidence: the head's top probability there), the lattice tree of
   each depth (its node count from `TreeShape`, its expected tokens from the tree-depth table) and the lookup
   candidate are compared again.

The tables are `AcceptanceTable`s (Beta-smoothed counts) kept per source across generate() calls (one set for
greedy, one for sampled decoding); probe rounds (the planner's schedule: after 4 rounds, then doubling up to 256)
draft the whole chain or, every other probe, the whole tree, so that tables behind a pessimistic start still
learn. A tree round also teaches the chain's tables what the chain would have done (`greedy_chain_outcome`).

Output is unchanged: the plan reads only the context's distributions and past outcomes, never a token drawn in
this round, so greedy output is identical and sampling exact (tests/test_medusa_auto.py enumerates it).
"""

from __future__ import annotations

from dataclasses import replace

from hf_dynaspec.drafting.planning.core import (
    DRAFTER,
    LatticeCosts,
    LookupCandidate,
    PlannerMemory,
    RequestLookup,
    RoundPlan,
    TreeShape,
    best_length,
    confidence_bin,
    lookup_probe,
    match_key,
    position_key,
)
from hf_dynaspec.modeling.acceptance_prior import AcceptancePrior


def lattice_memory(prior: AcceptancePrior | None = None) -> PlannerMemory:
    """A lattice source's tables (`prior`: its measured acceptance, stored with the heads): confidence is keyed
    (position, bin), since a head's top probability means more or less at each position."""
    return PlannerMemory(prior, confidence_bin_of=lambda key: key[1])


class LatticePlanner:
    """Plans lattice rounds from `costs` (`LatticeCosts`) and `memory` (`lattice_memory`); chains of up to
    `depth` tokens and lattice trees of `tree` (a `TreeShape`; None: chains only)."""

    def __init__(self, costs: LatticeCosts, memory: PlannerMemory, depth: int, tree: TreeShape | None):
        self.costs, self.memory, self.depth, self.tree = costs, memory, depth, tree
        self.lookup = RequestLookup(memory.lookup)  # a planner plans one call: its request (SpeculationPlanner's)

    # -- prices -------------------------------------------------------------------------------------------------
    def _chain_seconds(self, sunk: float):
        return lambda k: sunk + self.costs.verify(k + 1)

    def _tree_seconds(self, sunk: float):
        return lambda depth: sunk + self.costs.tree_seconds + self.costs.verify(self.tree.nodes(depth) + 1)

    def _tree_key(self, depth: int) -> tuple[int, int, int]:
        return self.tree.top_k, self.tree.total_tokens, position_key(depth)

    def _tree_priors(self, count: int) -> list[float]:
        return [self.memory.tree_depth.estimate(self._tree_key(d)) for d in range(1, count + 1)]

    def _lookup_priors(self, candidate: LookupCandidate) -> list[float]:
        match = match_key(candidate.match_length)
        return [self.lookup.estimate((match, position_key(j))) for j in range(1, candidate.num_tokens + 1)]

    def _lattice_options(self, chain_priors: list[float], room: int, sunk: float) -> list[tuple[float, RoundPlan]]:
        """(rate, plan) of the best chain (`chain_priors[j-1]`: a_j) and the best tree, the lattice cost `sunk`."""
        options = []
        k, rate = best_length(chain_priors, self._chain_seconds(sunk), smallest=1)
        options.append((rate, RoundPlan("chain", k)))
        if self.tree is not None:
            depth, rate = best_length(self._tree_priors(min(self.depth, room)), self._tree_seconds(sunk), smallest=1)
            options.append((rate, RoundPlan("tree", depth)))
        return options

    def _lookup_option(self, lookup: LookupCandidate | None, room: int) -> list[tuple[float, RoundPlan]]:
        if lookup is None:
            return []
        k, rate = best_length(self._lookup_priors(lookup)[:room], self._chain_seconds(0.0))
        return [(rate, RoundPlan("prompt-lookup", k, lookup.match_length))] if k else []

    # -- decisions ----------------------------------------------------------------------------------------------
    def plan_round(self, lookup: LookupCandidate | None, room: int) -> RoundPlan:
        """Before the lattice: "lattice" (score it, then `choose`), "prompt-lookup" or "none"; or a probe ("chain"
        / "tree" of the whole depth)."""
        depth = min(self.depth, room)
        if depth < 1:
            return RoundPlan("none", 0)
        probe = self._probe(depth)
        if probe is not None:
            return probe
        priors = [self.memory.position.estimate(position_key(j)) for j in range(1, depth + 1)]
        lattice_rate = max(rate for rate, _ in self._lattice_options(priors, room, self.costs.lattice_seconds))
        candidates = [(1.0 / self.costs.verify(1), RoundPlan("none", 0)), (lattice_rate, RoundPlan("lattice", depth))]
        candidates += self._lookup_option(lookup, room)
        best = max(candidates, key=lambda pair: pair[0])[1]
        # A lookup draft the tables have not tried for a while is drafted whole, whatever the lattice promises.
        offered = [lookup] if lookup is not None else []
        return lookup_probe(self.memory.probe_schedule, offered, best, room) or best

    def choose(self, confidences: list[float], lookup: LookupCandidate | None, room: int) -> RoundPlan:
        """With the lattice read (`confidences[j-1]`: position j's top probability): the chain length, tree depth
        or lookup with the best rate, the lattice's cost already paid."""
        depth = min(self.depth, room, len(confidences))
        priors = [self.memory.confidence.estimate((position_key(j), confidence_bin(c)))
                  for j, c in enumerate(confidences[:depth], start=1)]
        candidates = [(1.0 / self.costs.verify(1), RoundPlan("none", 0))]
        candidates += self._lattice_options(priors, room, 0.0) + self._lookup_option(lookup, room)
        plan = max(candidates, key=lambda pair: pair[0])[1]
        return replace(plan, confidences=tuple(confidences[:depth]))

    def _probe(self, depth: int) -> RoundPlan | None:
        schedule = self.memory.probe_schedule
        if not schedule.due(DRAFTER):
            return None
        source = "tree" if self.tree is not None and schedule.count(DRAFTER) % 2 else "chain"
        schedule.probed(DRAFTER)
        return RoundPlan(source, depth, probe=True)

    # -- learning -----------------------------------------------------------------------------------------------
    def record(self, plan: RoundPlan, num_drafted: int, num_accepted: int, chain_outcome: tuple[int, int] | None = None):
        """Learn from a verified round: a chain or lookup reached positions 1..min(accepted + 1, drafted), a tree
        depths 1..min(accepted + 1, its depth); `chain_outcome` (tree rounds): (accepted, reached) of the argmax
        chain inside the tree."""
        memory = self.memory
        if not plan.probe:
            memory.probe_schedule.passed(DRAFTER)
        if plan.source == "tree":
            for d in range(1, min(num_accepted + 1, plan.num_tokens) + 1):
                memory.tree_depth.record(self._tree_key(d), d <= num_accepted)
            if chain_outcome is not None:
                self._record_chain(plan.confidences, *chain_outcome)
        elif plan.source == "chain":
            self._record_chain(plan.confidences, num_accepted, min(num_accepted + 1, num_drafted))
        elif plan.source == "prompt-lookup":
            match = match_key(plan.match_length)
            for j in range(1, min(num_accepted + 1, num_drafted) + 1):
                self.lookup.record((match, position_key(j)), j <= num_accepted)

    def record_past_the_draft(self, plan: RoundPlan, num_drafted: int, matched: bool) -> None:
        """A prompt-lookup round accepted whole, shorter than offered: whether the target's own token after it
        equals the next offered token is position num_drafted + 1's outcome (`SpeculationPlanner`'s rule)."""
        if plan.source == "prompt-lookup" and plan.next_offered is not None:
            self.lookup.record((match_key(plan.match_length), position_key(num_drafted + 1)), matched)

    def record_passed_over(self, candidate: LookupCandidate, matched: bool) -> None:
        """A prompt-lookup draft offered and not drafted: its first token's outcome (`SpeculationPlanner`'s rule)."""
        self.lookup.record((match_key(candidate.match_length), position_key(1)), matched)

    def _record_chain(self, confidences: list[float], num_accepted: int, num_reached: int) -> None:
        for j in range(1, min(num_reached, len(confidences)) + 1):
            accepted = j <= num_accepted
            self.memory.position.record(position_key(j), accepted)
            self.memory.confidence.record((position_key(j), confidence_bin(confidences[j - 1])), accepted)
