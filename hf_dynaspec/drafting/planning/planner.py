"""Speculation planned from measured costs (`draft_plan="auto"`): each round, the draft that maximises expected
committed tokens per second.

A drafter round costs the drafter's pass over the verified positions, the drafting (k drafter steps) and the
target's forward over k + 1 tokens; a lookup or suffix-cache round, and a round with no draft, cost the forward
only (the drafter's pass waits for the next drafter round, which absorbs every waiting position at once:
ChainDraftSession.defer_verified); it commits 1 + (accepted drafts)
tokens. With a_j the probability that draft position j is accepted once every earlier one was, the expected
tokens of a k-token draft are E(k) = 1 + sum_{j<=k} prod_{i<=j} a_i and its rate E(k) / T(k). The costs T come
from the machine (hf_dynaspec.generation.costs); the a_j are learnt online, during generation:

- the drafter by position (planning before a round) and by the confidence of the drafted position (its most
  likely token's probability, read before the token is drawn: EAGLE-2's observation that this tracks
  acceptance), so a round stops as soon as one more position does not pay for its drafter step and its extra
  verified row;
- each lookup source (prompt lookup, the suffix cache's request part and its shared part) by the length of the
  match that produced the draft and the position in it.

Estimates are Beta-smoothed counts (`AcceptanceTable`) kept across generate() calls of one assistant, so a
planner learns the user's workload. A table learns only the positions that are drafted, so a planner that drafts
nothing (or short drafts) because the prior (or a bad stretch of text) says so never learns otherwise. Hence probe
rounds: after `PROBE_FIRST` rounds, then after twice as many each time up to every `PROBE_LONGEST` rounds, the
round drafts the length a drafter that is always right would be given, none of it cut (nothing where not even
such a drafter pays). A good drafter behind a pessimistic prior is found within a few rounds, and probing one that
truly does not pay costs at most its extra rows once in 256 rounds. (A fresh fp32 0.5B pairing on this project's
CPU sits on that edge: without probes, measuring noise decided whether the shipped assistant ever drafted.)

Trees (`speculative_generate(trees=True)` with `draft_plan="auto"`): an EAGLE-2 tree of the assistant's shape (`tree_top_k`,
`tree_total_tokens`) cut to depth d joins the candidates. Its nodes grow with d (top_k at depth 1, then up to
top_k^2 per depth, at most `tree_total_tokens`), so it is priced by the measured verify cost of its node count plus
its drafting (the first token, then one frontier step of top_k rows per further depth); its expected tokens come
from a per-depth table of how often the accepted path reached and passed each depth, learnt from tree rounds and
started from the chain's estimate at that position (a tree holds about the chain's path and more). Probe rounds
alternate between a chain and a tree, so both tables learn.

On a machine where verifying 8 tokens costs ~1.2 steps (AVX-512 BF16 CPUs, GPUs) this drafts long chains; where
it costs ~k steps (AVX2 CPUs) short ones or none. Output is unchanged: the
plan decides only how many tokens are verified, from the context and the distributions (never from a drawn
token), so greedy output is identical and sampling exact (tests/test_planner.py).
"""

from __future__ import annotations

from hf_dynaspec.drafting.planning.core import (
    DRAFTER,
    AcceptanceTable,
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


class SpeculationPlanner:
    """Picks each round's draft from `costs` (a `RoundCosts`) and the acceptance tables in `memory`; `tree` (a
    `TreeShape`, needs `costs.tree_step_seconds`) adds trees to the candidates; `drafter=False` (a drafter-free
    assistant) leaves only the lookup sources and no draft."""

    def __init__(self, costs, memory: PlannerMemory, max_draft_tokens: int, tree: TreeShape | None = None,
                 drafter: bool = True):
        if tree is not None and costs.tree_step_seconds is None:
            raise ValueError("planning trees needs the measured cost of a tree depth (RoundCosts.tree_step_seconds)")
        if tree is not None and not drafter:
            raise ValueError("trees are grown by the drafter: a drafter-free planner plans none")
        self.costs, self.memory, self.max_draft_tokens, self.tree, self.drafter = costs, memory, max_draft_tokens, tree, drafter
        self.lookup = RequestLookup(memory.lookup)  # a planner plans one call (one batch row): its request

    # -- expected tokens and rates ---------------------------------------------------------------------------
    def _drafter_seconds(self, k: int) -> float:
        return self.costs.consume_seconds + self.costs.drafting(k) + self.costs.verify(k + 1)

    def _lookup_seconds(self, k: int) -> float:
        # A lookup round (or none, k = 0) defers the drafter's pass to the next drafter round
        # (ChainDraftSession.defer_verified), which absorbs every deferred position in one pass: not paid here.
        return self.costs.verify(k + 1)

    def _tree_seconds(self, depth: int) -> float:
        costs = self.costs
        drafting = costs.first_draft_seconds + (depth - 1) * costs.tree_step_seconds
        return costs.consume_seconds + drafting + costs.verify(self.tree.nodes(depth) + 1)

    def _tree_key(self, depth: int) -> tuple[int, int, int]:
        return (self.tree.top_k, self.tree.total_tokens, position_key(depth))

    def tree_priors(self, count: int) -> list[float]:
        """a_d for tree depths 1..count: P(the accepted path passes depth d | it reached depth d - 1)."""
        return [self.memory.tree_depth.estimate(self._tree_key(d)) for d in range(1, count + 1)]

    def drafter_priors(self, start: int, count: int) -> list[float]:
        """a_j for draft positions start+1 .. start+count, by position only."""
        table = self.memory.position
        return [table.estimate(position_key(j)) for j in range(start + 1, start + count + 1)]

    def lookup_probabilities(self, candidate: LookupCandidate) -> list[float]:
        table = self.lookup
        match = match_key(candidate.match_length)
        return [table.estimate((candidate.source, match, position_key(j)))
                for j in range(1, candidate.num_tokens + 1)]

    # -- decisions ------------------------------------------------------------------------------------------
    def plan_round(self, lookups: list[LookupCandidate], room: int) -> RoundPlan:
        """The round's draft: the best of the drafter (planned from position estimates), each lookup candidate,
        and no draft at all; at most `room` tokens."""
        best, best_rate = RoundPlan("none", 0), 1.0 / self._lookup_seconds(0)
        if self.drafter:
            drafter_k, drafter_rate = best_length(self.drafter_priors(0, min(self.max_draft_tokens, room)),
                                                 self._drafter_seconds, smallest=1)
            if drafter_rate > best_rate:
                best, best_rate = RoundPlan("drafter", drafter_k), drafter_rate
        if self.tree is not None:
            depth, tree_rate = best_length(self.tree_priors(min(self.tree.max_depth, room)), self._tree_seconds,
                                          smallest=1)
            if tree_rate > best_rate:
                best, best_rate = RoundPlan("tree", depth), tree_rate
        for candidate in lookups:
            probabilities = self.lookup_probabilities(candidate)[:room]
            k, rate = best_length(probabilities, self._lookup_seconds)
            if k and rate > best_rate:
                best, best_rate = RoundPlan(candidate.source, k, candidate.match_length), rate
        probe = self._probe_or(best, room)
        if probe.probe:
            return probe
        return lookup_probe(self.memory.probe_schedule, lookups, best, room) or best

    def _probe_or(self, plan: RoundPlan, room: int) -> RoundPlan:
        """`plan`, or a probe when the drafter's is due (`ProbeSchedule`) (see the module docstring): a chain, or
        with trees every other probe a tree, of the length an optimistic drafter would be given (each position's
        estimate raised by its uncertainty, `_optimistic`: an untried table probes as an always-right drafter,
        one that has seen many rejections probes short or not at all). Where the kind whose turn it is would not
        pay even so (trees on an AVX2 CPU), the other is probed: a refused tree probe must not stop the chain's
        probes. `memory.measuring`: every round probes, whole, whatever the costs."""
        memory = self.memory
        if not memory.probe_schedule.due(DRAFTER) and not memory.measuring:
            return plan
        kinds = (["drafter", "tree"] if self.tree is not None else ["drafter"]) if self.drafter else []
        if memory.probe_schedule.count(DRAFTER) % 2:
            kinds.reverse()
        for source in kinds:
            if source == "tree":
                longest, seconds = min(room, self.tree.max_depth), self._tree_seconds
                optimistic = [_optimistic(memory.tree_depth, self._tree_key(d)) for d in range(1, longest + 1)]
            else:
                longest, seconds = min(room, self.max_draft_tokens), self._drafter_seconds
                optimistic = [_optimistic(memory.position, position_key(j)) for j in range(1, longest + 1)]
            probe_tokens, rate = best_length(optimistic, seconds, smallest=1)
            if memory.measuring:
                probe_tokens = longest
            elif rate <= 1.0 / self._lookup_seconds(0):  # not even an optimistic drafter would pay here
                continue
            memory.probe_schedule.probed(DRAFTER)
            return RoundPlan(source, probe_tokens, probe=True)
        return plan

    def drafted_probabilities(self, confidences: list[float]) -> list[float]:
        table = self.memory.confidence
        return [table.estimate(confidence_bin(c)) for c in confidences]

    def keep_position(self, confidences: list[float]) -> bool:
        """With the drafter's confidence at every position so far (the last one not drawn yet): does including
        the last position raise the round's rate, counting the best continuation past it (positions beyond priced
        from the position table, each with its drafter step)? Its own drafter step is already paid in both cases.
        Looking past it matters where verification is not monotone in tokens (fp32 on MKL: 2 tokens cost twice 1,
        5 cost less than 2): position 1 alone would not pay there, positions 1-4 do."""
        j = len(confidences)
        costs = self.costs
        probabilities = self.drafted_probabilities(confidences)
        sunk = costs.consume_seconds + costs.drafting(j)
        without = _expected(probabilities[: j - 1]) / (sunk + costs.verify(j))
        future = self.drafter_priors(j, max(self.max_draft_tokens - j, 0))
        _, with_it = best_length(probabilities + future,
                                 lambda k: costs.consume_seconds + costs.drafting(max(k, j)) + costs.verify(k + 1),
                                 smallest=j)
        return with_it > without

    def draft_more(self, confidences: list[float], room: int) -> bool:
        """After drafting positions 1..j (their confidences known): is another drafter step expected to pay?"""
        j = len(confidences)
        if j >= min(self.max_draft_tokens, room):
            return False
        known = self.drafted_probabilities(confidences)
        future = self.drafter_priors(j, min(self.max_draft_tokens, room) - j)
        k, _ = best_length(known + future, self._drafter_seconds, smallest=j)
        return k > j

    def cut(self, confidences: list[float]) -> int:
        """Deferred form (accelerators read a round's confidences once, at its end): how many of the drafted
        positions to keep: the prefix length with the best rate, every drafter step already paid."""
        probabilities = self.drafted_probabilities(confidences)
        sunk = self.costs.consume_seconds + self.costs.drafting(len(confidences))
        k, _ = best_length(probabilities, lambda k: sunk + self.costs.verify(k + 1))
        return k

    def record(self, plan: RoundPlan, num_drafted: int, num_accepted: int) -> None:
        """Learn from a verified round: positions 1..min(num_accepted + 1, num_drafted) were reached, the first
        num_accepted accepted (a tree: depths 1..min(num_accepted + 1, its depth))."""
        memory = self.memory
        if memory.log is not None:
            memory.log.append({"source": plan.source, "depth": plan.num_tokens, "drafted": num_drafted,
                               "accepted": num_accepted, "confidences": [round(float(c), 4) for c in plan.confidences],
                               "probe": plan.probe})
        if not plan.probe:
            memory.probe_schedule.passed(DRAFTER)
        reachable = plan.num_tokens if plan.source == "tree" else num_drafted
        for j in range(1, min(num_accepted + 1, reachable) + 1):
            accepted = j <= num_accepted
            if plan.source == "tree":
                memory.tree_depth.record(self._tree_key(j), accepted)
            elif plan.source == "drafter":
                memory.position.record(position_key(j), accepted)
                if j <= len(plan.confidences):
                    memory.confidence.record(confidence_bin(plan.confidences[j - 1]), accepted)
            elif plan.source != "none":
                self.lookup.record((plan.source, match_key(plan.match_length), position_key(j)), accepted)

    def record_past_the_draft(self, plan: RoundPlan, num_drafted: int, matched: bool) -> None:
        """A lookup round drafted `num_drafted` of the tokens its source offered, and the target accepted them all:
        the target's own token after them is what the next offered token faced. `matched` (it equals that token)
        is learnt as the acceptance of position num_drafted + 1. Exact in greedy decoding (acceptance of a lookup
        token is equality with the target's choice) and unbiased in sampling (a point-mass draft x is accepted with
        p(x), and the target's own token after an all-accepted draft is drawn from p: it is x with p(x)). Without
        it a lookup drafted short learns its later positions only from probes: on costs where a 1-token draft is
        nearly free (the rows kernel's bf16 verify), `auto` kept drafting lookups 1 token long where 5 paid."""
        if plan.source in ("drafter", "tree", "none") or plan.next_offered is None:
            return
        key = (plan.source, match_key(plan.match_length), position_key(num_drafted + 1))
        self.lookup.record(key, matched)

    def record_passed_over(self, candidate: LookupCandidate, matched: bool) -> None:
        """A lookup source offered `candidate` and the round drafted none of it: `matched` (its first token equals
        the token the round committed at that position) is learnt as its position 1. Exact in greedy decoding and
        unbiased in sampling (the committed token is drawn from the target's distribution p whatever was drafted,
        so it equals a point-mass draft x with probability p(x), the chance x is accepted), as for
        `record_past_the_draft`. A source the plan passes over keeps learning at no cost: otherwise only probes
        teach it, and a request that copies (or stops copying) is noticed late."""
        self.lookup.record((candidate.source, match_key(candidate.match_length), position_key(1)), matched)

    def record_chain_outcome(self, num_accepted: int, num_reached: int) -> None:
        """Learn the chain's position table from what a chain would have done in a tree round (the tree's first
        children: DraftTree.greedy_chain_outcome): positions 1..num_reached verified, the first num_accepted
        accepted. Keeps the chain's estimates current while trees are drafted: otherwise a chain that had a bad
        stretch would stay priced low (and trees drafted where chains pay more) until the next chain probe."""
        for j in range(1, num_reached + 1):
            self.memory.position.record(position_key(j), j <= num_accepted)


class ProbeDrafting:
    """Stands in for the planner in a probe round: every position up to the probe's length is kept, and the
    session still reports their confidences, so the confidence table learns too."""

    @staticmethod
    def keep_position(confidences: list[float]) -> bool:
        return True

    @staticmethod
    def draft_more(confidences: list[float], room: int) -> bool:
        return len(confidences) < room

    @staticmethod
    def cut(confidences: list[float]) -> int:
        return len(confidences)


class BatchShare:
    """One row's share of a batched round's costs (hf_dynaspec.generation.batched_loop): the verify forward is
    shared by `rows` rows that each verify about as many tokens, so a row's n tokens cost `verify(rows * n) / rows`
    (the measured table, extrapolated linearly past it); everything else (its drafting, its lattice) the row pays
    alone. `rows = 1` is the cost itself."""

    def __init__(self, costs, rows: int):
        self.base, self.rows = costs, rows

    def verify(self, num_tokens: int) -> float:
        return self.base.verify(self.rows * num_tokens) / self.rows

    def __getattr__(self, name):
        return getattr(self.base, name)


def share_costs(planner, rows: int) -> None:
    """Price `planner`'s rounds (a `SpeculationPlanner` or a lattice planner; None: nothing) as one row of `rows`."""
    if planner is None:
        return
    base = planner.costs.base if isinstance(planner.costs, BatchShare) else planner.costs
    planner.costs = base if rows == 1 else BatchShare(base, rows)


def _optimistic(table: AcceptanceTable, key) -> float:
    """The estimate at `key` plus one standard error of a rate seen on (reached + prior weight) rounds, at most 1:
    what a probe assumes, so that a position is probed while its evidence could still make drafting it pay."""
    reached = table.counts.get(key, (0, 0))[1]
    return min(1.0, table.estimate(key) + (reached + table.prior_weight) ** -0.5)


def _expected(probabilities: list[float]) -> float:
    expected, reach = 1.0, 1.0
    for a in probabilities:
        reach *= a
        expected += reach
    return expected
