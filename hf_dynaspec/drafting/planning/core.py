"""The planning core the policies share (hf_dynaspec.drafting.planning.planner, .fixed): Beta-smoothed acceptance
tables, the rate-maximising draft length, what a proposer offers and what a round plans, the tree shape, the probe
schedules that keep every source learning, and the cost tables offers are priced by (`RoundCosts` for an EAGLE
drafter, `LatticeCosts` for a lattice source; seconds on this machine, measured by hf_dynaspec.generation.costs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hf_dynaspec.modeling.acceptance_prior import CONFIDENCE_BINS, AcceptancePrior

MAX_POSITION_KEY = 16  # positions past this share one estimate
MAX_MATCH_KEY = 8  # lookup matches longer than this share one estimate
# The longest copy a lookup source offers a planner (its costs and learnt acceptance cut it): the widest chain a
# static verify round reads (generation.static_round.MAX_WIDTH, 64 nodes) halved, so a copy always fits.
LONGEST_COPY = 32
PROBE_FIRST = 4  # rounds before the first probe round
PROBE_LONGEST = 256  # the probe interval doubles up to this


class AcceptanceTable:
    """P(accepted | reached) per key, from counts smoothed by a Beta prior of mean `prior(key)` (or `prior`, one
    mean for every key) and weight `prior_weight` (pseudo-observations)."""

    def __init__(self, prior, prior_weight: float = 2.0):
        self.prior = prior
        self.prior_weight = prior_weight
        self.counts: dict = {}  # key -> [accepted, reached]

    def estimate(self, key) -> float:
        accepted, reached = self.counts.get(key, (0, 0))
        prior = self.prior(key) if callable(self.prior) else self.prior
        return (accepted + self.prior_weight * prior) / (reached + self.prior_weight)

    def record(self, key, accepted: bool) -> None:
        entry = self.counts.setdefault(key, [0, 0])
        entry[0] += int(accepted)
        entry[1] += 1


UNINFORMED_WEIGHT = 2.0  # pseudo-rounds of the 0.5 prior of a table no measured acceptance informs


def position_table(prior: AcceptancePrior | None) -> AcceptanceTable:
    """Acceptance by draft position, starting at the measured `prior` (with its weight), else at 0.5."""
    if prior is None:
        return AcceptanceTable(0.5, UNINFORMED_WEIGHT)
    return AcceptanceTable(prior.at_position, prior.weight)


def confidence_table(prior: AcceptancePrior | None, bin_at: int | None = None) -> AcceptanceTable:
    """Acceptance by the drafted position's top probability, keyed by its confidence bin (or by tuples holding it
    at index `bin_at`), starting at the measured bins of `prior` (with its weight), else at each bin's middle."""
    if prior is None or not prior.confidence:
        at_bin, weight = (lambda b: (b + 0.5) / CONFIDENCE_BINS), UNINFORMED_WEIGHT
    else:
        at_bin, weight = (lambda b: prior.confidence[b]), prior.weight
    return AcceptanceTable(at_bin if bin_at is None else lambda key: at_bin(key[bin_at]), weight)


class LookupTable(AcceptanceTable):
    """Acceptance of lookup drafts, keyed (..., match length, position) (the EAGLE planner's keys start with the
    source); each key learns its own rate, from a prior of 2 pseudo-rounds at:
    - position 1: its source's first positions pooled over every match length (from 0.5). Keyed by match length
      alone, prompt lookup's few rounds per call spread over keys that each stayed near 0.5, and `auto` fell to 0.83x
      of a fixed plan on one CPU table in the first version of tests/test_plan_simulation.py;
    - position j > 1 of a match m ids long: position 1 of a match m + j - 1 ids long. Reached, the copy continues
      a match that long, and position 1 learns in every round that offers a copy (most rounds draft few positions,
      so later ones are rarely reached). Before, it was every match's estimate at that position pooled.
    """

    def __init__(self):
        self.pooled = AcceptanceTable(0.5)  # keyed (..., 1): each source's first positions, every match length
        super().__init__(self._key_prior)

    def _key_prior(self, key) -> float:
        *source, match, position = key
        if position <= 1:
            return self.pooled.estimate((*source, 1))
        return self.estimate((*source, match_key(match + position - 1), 1))

    def record(self, key, accepted: bool) -> None:
        super().record(key, accepted)
        if key[-1] == 1:
            self.pooled.record((*key[:-2], 1), accepted)


# Pseudo-outcomes behind a request's view (RequestLookup): 0.5-8 swept in the plan simulation, 4 best over every
# trace and cost table (benchmarks/results/lookup_76f/request_weight_sweep.txt).
REQUEST_WEIGHT = 4.0


class RequestLookup:
    """A lookup table as one generate() call (one batch row; a lattice call's rows together) sees it: the session's
    `LookupTable` estimates, their odds scaled by how this request's outcomes compared with them so far, per source
    and apart for a copy's first position and the rest. The session's tables pool every request, and copies pay in
    some (summaries copy whole sentences) and not in others (translation): a session taught by the first drafts
    copies into the second round after round, and cuts the long copies of a summary short. With A accepted of n
    outcomes where the session's estimates (read before each was learnt) summed to E, the odds are scaled by
    (A + w) / (E + w) * (n - E + w) / (n - A + w), w = `REQUEST_WEIGHT`: 1 where the request goes as the session
    predicts. Outcomes are learnt by the session's table too. The plan still reads only what earlier rounds
    committed, so output stays exact (tests/test_request_lookup.py)."""

    def __init__(self, table: LookupTable):
        self.table = table
        self.sums: dict = {}  # (source, 1 or 2: the first position or the rest) -> [accepted, expected, outcomes]

    def estimate(self, key) -> float:
        p = self.table.estimate(key)
        # A copy's first token (is this a copy at all?) and its continuation (how far does it go?) fare apart: a
        # request may start copies right and leave them at once (numbers in math), or the reverse.
        accepted, expected, outcomes = self.sums.get((*key[:-2], min(key[-1], 2)), (0, 0.0, 0))
        if not outcomes or not 0.0 < p < 1.0:
            return p
        w = REQUEST_WEIGHT
        odds = p / (1.0 - p) * (accepted + w) / (expected + w) * (outcomes - expected + w) / (outcomes - accepted + w)
        return odds / (1.0 + odds)

    def record(self, key, accepted: bool) -> None:
        entry = self.sums.setdefault((*key[:-2], min(key[-1], 2)), [0, 0.0, 0])
        entry[0], entry[1], entry[2] = entry[0] + int(accepted), entry[1] + self.table.estimate(key), entry[2] + 1
        self.table.record(key, accepted)


def confidence_bin(confidence: float) -> int:
    return min(int(confidence * CONFIDENCE_BINS), CONFIDENCE_BINS - 1)


def position_key(position: int) -> int:
    return min(position, MAX_POSITION_KEY)


def match_key(match_length: int) -> int:
    return min(match_length, MAX_MATCH_KEY)


def expected_tokens(probabilities: list[float]) -> list[float]:
    """E(k) for k = 0..len(probabilities): a round's expected committed tokens with k drafts, `probabilities[j-1]`
    being a_j, the chance position j is accepted once every earlier one was (1 + sum_{j<=k} prod_{i<=j} a_i)."""
    totals, reach = [1.0], 1.0
    for a in probabilities:
        reach *= a
        totals.append(totals[-1] + reach)
    return totals


def best_length(probabilities: list[float], seconds, smallest: int = 0) -> tuple[int, float]:
    """(k, rate) maximising E(k) / seconds(k) over smallest <= k <= len(probabilities) (`expected_tokens`). (A
    call's length is fixed, so its time is least when each round's seconds per committed token is.)"""
    totals = expected_tokens(probabilities)
    best_k, best_rate = smallest, totals[smallest] / seconds(smallest)
    for k in range(smallest + 1, len(probabilities) + 1):
        rate = totals[k] / seconds(k)
        if rate > best_rate:
            best_k, best_rate = k, rate
    return best_k, best_rate


@dataclass(frozen=True)
class Offer:
    """What a proposer (hf_dynaspec.drafting.proposers) offers a round: up to `num_tokens` tokens, labelled `source` in
    the statistics and the lookup tables' keys. A copy (prompt lookup, the suffix cache) carries its host `tokens`,
    the length of the match it continues and `at`, the context's length when it was offered (what it is checked
    against once committed); a lattice read carries the lattice and each position's top probability
    (`confidences`)."""

    proposer: Any
    source: str
    num_tokens: int
    match_length: int = 0
    tokens: tuple[int, ...] = ()
    at: int = 0
    confidences: tuple[float, ...] = ()
    read: Any = None  # what the proposer read for it (a lattice), else None


@dataclass(frozen=True)
class RoundPlan:
    """What a round drafts: `num_tokens` of `offer` (None: no draft) (a drafter's chain is cut further by the
    confidence table, a tree is grown to that depth). Frozen: a round hands its plan along inside its `Draft`
    (hf_dynaspec.drafting.contract), and what drafting adds to it (the drafted positions' confidences, the next
    offered token) makes a new plan (`dataclasses.replace`); `copies`: the copies on offer (a planner's rounds),
    which `learn` checks against what was committed where they were not drafted."""

    offer: Offer | None
    num_tokens: int
    confidences: tuple[float, ...] = ()  # drafter: per drafted position, for the tables
    probe: bool = False  # a round that keeps the tables learning: exactly `num_tokens`, whatever the confidence
    # A copy drafted shorter than its source offered: the offered token after the drafted ones (see
    # SpeculationPlanner.record_past_the_draft), else None.
    next_offered: int | None = None
    copies: tuple[Offer, ...] = ()

    @property
    def proposer(self):
        return self.offer.proposer if self.offer is not None else None

    @property
    def source(self) -> str:
        """The statistics' label ("none": no draft)."""
        return self.offer.source if self.offer is not None else "none"


NO_PLAN = RoundPlan(None, 0)

DRAFTER = "drafter"  # the probe schedule's key for the drafter's chains and trees (an EAGLE drafter or a lattice source)


class ProbeSchedule:
    """When each source is next probed, keyed by source: `DRAFTER` (the drafter's chains and trees, drafted whole
    past the confidence cut) and each lookup source ("prompt-lookup", "suffix-request", "suffix-shared"), drafted
    whole once when it has gone `interval` rounds without it. The interval starts at `PROBE_FIRST` and doubles at
    each probe up to `PROBE_LONGEST`. So no source stays unlearnt because the prior (or a bad stretch) ruled it
    out, and a source that truly does not pay costs its extra rows once in 256 of its rounds."""

    def __init__(self):
        self.state: dict[str, list[int]] = {}  # source -> [rounds since probed or drafted whole, interval, probes]

    def due(self, source: str) -> bool:
        rounds, interval, _ = self.state.setdefault(source, [0, PROBE_FIRST, 0])
        return rounds >= interval

    def passed(self, source: str, drafted_whole: bool = False) -> None:
        """A round went by without probing `source`; `drafted_whole`: the plan drafted all it offered (its table
        learns as from a probe)."""
        entry = self.state.setdefault(source, [0, PROBE_FIRST, 0])
        entry[0] = 0 if drafted_whole else entry[0] + 1

    def probed(self, source: str) -> None:
        entry = self.state.setdefault(source, [0, PROBE_FIRST, 0])
        entry[0], entry[1], entry[2] = 0, min(2 * entry[1], PROBE_LONGEST), entry[2] + 1

    def interval(self, source: str) -> int:
        return self.state.get(source, [0, PROBE_FIRST, 0])[1]

    def count(self, source: str) -> int:
        """Probes of `source` so far (the drafter's alternate chains and trees: even ones one kind, odd the other)."""
        return self.state.get(source, [0, PROBE_FIRST, 0])[2]


class PlannerMemory:
    """The acceptance tables of one drafter, and the lookup sources beside it, kept across generate() calls (one
    per greedy / sampled decoding, whose acceptance differs), and their probe schedule. `prior`: the drafter's
    measured acceptance (`AcceptancePrior`, stored with the artifact), where the tables start with its weight;
    None: 0.5 at every position, the confidence bin's middle. `confidence_bin_at`: where a confidence key holds its
    bin (None: the key is the bin, as the EAGLE planner keys; the lattice planner's keys are (position, bin): 1)."""

    def __init__(self, prior: AcceptancePrior | None = None, confidence_bin_at: int | None = None):
        self.prior = prior
        self.position = position_table(prior)
        self.confidence = confidence_table(prior, bin_at=confidence_bin_at)
        # keyed by (top_k, total_tokens, depth): a tree's acceptance depends on its shape
        self.tree_depth = AcceptanceTable(self._tree_prior, self.position.prior_weight)
        self.lookup = LookupTable()  # keyed (..., match length, position): see each planner
        self.probe_schedule = ProbeSchedule()
        self.log: list[dict] | None = None  # a list: every recorded round is appended (acceptance measurement)
        self.measuring = False  # every round a probe, drafted whole, whatever the costs (acceptance measurement)

    def _tree_prior(self, key: tuple[int, int, int]) -> float:
        """The measured tree table where it was measured for this shape, else the chain's estimate at that depth
        (a tree holds about the chain's path and more)."""
        measured = self.prior.at_tree_depth(*key) if self.prior is not None else None
        return measured if measured is not None else self.position.estimate(key[-1])


def lookup_probe(probes: ProbeSchedule, copies: list[Offer], chosen: RoundPlan, room: int) -> RoundPlan | None:
    """The round's copy probe, if one is due: the first offered copy whose schedule says so (not the one the plan
    drafts whole), drafted whole up to MAX_POSITION_KEY tokens; every offered source's schedule moves on. A copy
    drafted shorter than that counts as passed over: its later positions are learnt only when drafted, so they get
    probes too."""
    probe = None
    for offer in copies:
        # Positions past MAX_POSITION_KEY share one estimate: a probe that long learns every one of them.
        whole = min(offer.num_tokens, room, MAX_POSITION_KEY)
        drafted = offer is chosen.offer and chosen.num_tokens >= whole
        if probe is None and not drafted and offer.num_tokens and probes.due(offer.source):
            probe = RoundPlan(offer, whole, probe=True)
            probes.probed(offer.source)
        else:
            probes.passed(offer.source, drafted)
    return probe


@dataclass(frozen=True)
class TreeShape:
    """An EAGLE-2 tree as the planner may draft it: `top_k` children per expanded node, at most `total_tokens`
    nodes, any depth up to `max_depth`."""

    top_k: int
    max_depth: int
    total_tokens: int

    def nodes(self, depth: int) -> int:
        """Draft nodes of a tree of `depth` (candidates: top_k at depth 1, top_k^2 per further depth)."""
        return min(self.total_tokens, self.top_k + (depth - 1) * self.top_k * self.top_k)


@dataclass
class VerifyCosts:
    """What every round pays: `verify_seconds[n]`, the target's forward over n new tokens on this machine (index 0
    unused), measured up to the longest draft planned."""

    verify_seconds: list[float]

    def verify(self, num_tokens: int) -> float:
        """Seconds of a target forward over `num_tokens` new tokens (past the table's end, linear in its last step)."""
        table = self.verify_seconds
        if num_tokens < len(table):
            return table[num_tokens]
        return table[-1] + (table[-1] - table[-2]) * (num_tokens - len(table) + 1)


@dataclass
class RoundCosts(VerifyCosts):
    """Seconds of an EAGLE drafter's round (see the module docstring): the verify table, the drafter's pass over the
    verified positions, its first draft step and each further one, and a tree depth's step."""

    consume_seconds: float
    first_draft_seconds: float
    draft_step_seconds: float
    tree_step_seconds: float | None = None  # None: not measured (trees are then not planned)

    def drafting(self, num_tokens: int) -> float:
        """Seconds to draft `num_tokens` tokens with the drafter, beyond the consume pass."""
        if num_tokens <= 0:
            return 0.0
        return self.first_draft_seconds + (num_tokens - 1) * self.draft_step_seconds


@dataclass
class LatticeCosts(VerifyCosts):
    """Seconds of a lattice round's parts on this machine (hf_dynaspec.generation.costs.lattice_costs measures them):
    the verify table, `lattice_seconds` the source's scores for every position, `tree_seconds` the host search of a
    lattice tree."""

    lattice_seconds: float
    tree_seconds: float
