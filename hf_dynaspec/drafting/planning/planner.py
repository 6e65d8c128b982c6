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

from dataclasses import replace
from functools import partial

from hf_dynaspec.drafting.planning.core import (
    DRAFTER,
    AcceptanceTable,
    Offer,
    PlannerMemory,
    RequestLookup,
    RoundPlan,
    best_length,
    lookup_probe,
)


class SpeculationPlanner:
    """Picks each round's draft among the proposers' offers (hf_dynaspec.drafting.proposers) from `costs` (a
    `RoundCosts` or `LatticeCosts`) and the acceptance tables in `memory`. Each proposer prices its own offer
    (`priors`, `seconds`) and teaches its own tables (`record`); the planner compares rates, probes, and keeps the
    request's view of the copies' tables (`lookup`). A batched round prices a row's tokens as its share of the
    batch's verify forward (`choose(..., rows=)`)."""

    def __init__(self, costs, memory: PlannerMemory):
        self.costs, self.memory = costs, memory
        self.lookup = RequestLookup(memory.lookup)  # a planner plans one call (one batch row): its request
        self.rows = 1

    def verify(self, num_tokens: int) -> float:
        """This row's share of the target's forward over `num_tokens` new tokens per row (`rows` rows verify about
        as many each; the measured table is extrapolated linearly past its end)."""
        return self.costs.verify(self.rows * num_tokens) / self.rows

    def rate(self, offer: Offer, room: int) -> tuple[int, float]:
        """(tokens, expected committed tokens per second) of the best length of `offer`, at most `room`: each
        position's acceptance from the proposer's table (`table`, `key`), its seconds from the proposer."""
        proposer = offer.proposer
        table, priors = proposer.table(self, offer), []
        for j in range(1, min(offer.num_tokens, room) + 1):
            priors.append(table.estimate(proposer.key(offer, j)))
        return best_length(priors, partial(proposer.seconds, self, offer), smallest=proposer.smallest)

    def best(self, offers: list[Offer], room: int) -> RoundPlan:
        """The best of every offer and no draft at all, at most `room` tokens (no probe)."""
        best, best_rate = RoundPlan(None, 0), 1.0 / self.verify(1)
        for offer in offers:
            k, rate = self.rate(offer, room)
            if k and rate > best_rate:
                best, best_rate = RoundPlan(offer, k), rate
        return best

    def choose(self, offers: list[Offer], context, rows: int = 1) -> RoundPlan:
        """The round's draft: the best offer (`best`) at most `context.room` tokens, or a probe (the drafter's,
        else a copy's)."""
        self.rows, room = rows, context.room
        copies = [offer for offer in offers if not offer.proposer.reads_features]
        best = self.best(offers, room)
        probe = self._drafter_probe([offer for offer in offers if offer.proposer.reads_features], room)
        probe = probe or lookup_probe(self.memory.probe_schedule, copies, best, room)
        return replace(probe or best, copies=tuple(copies))

    def _drafter_probe(self, drafted: list[Offer], room: int) -> RoundPlan | None:
        """A probe when the drafter's is due (`ProbeSchedule`) (see the module docstring): a chain, or with trees every
        other probe a tree, of the length an optimistic drafter would be given (each position's estimate raised by
        its uncertainty, `_optimistic`: an untried table probes as an always-right drafter, one that has seen many
        rejections probes short or not at all). Where the kind whose turn it is would not pay even so (trees on an
        AVX2 CPU), the other is probed: a refused tree probe must not stop the chain's probes.
        `memory.measuring`: every round probes, whole, whatever the costs."""
        memory = self.memory
        if not memory.probe_schedule.due(DRAFTER) and not memory.measuring:
            return None
        if memory.probe_schedule.count(DRAFTER) % 2:
            drafted = drafted[::-1]
        for offer in drafted:
            proposer, longest = offer.proposer, min(room, offer.num_tokens)
            table, optimistic = proposer.table(self, offer), []
            for j in range(1, longest + 1):
                optimistic.append(_optimistic(table, proposer.key(offer, j)))
            probe_tokens, rate = best_length(optimistic, partial(proposer.seconds, self, offer), smallest=1)
            if memory.measuring:
                probe_tokens = longest
            elif rate <= 1.0 / self.verify(1):  # not even an optimistic drafter would pay here
                continue
            memory.probe_schedule.probed(DRAFTER)
            return RoundPlan(offer, probe_tokens, probe=True)
        return None

    plans_lengths = True  # a drafter's chain is cut by the planner's rule (ConfidenceRule), a probe's is not

    def record(self, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None, accepted_nodes=None) -> None:
        """Learn from a verified round: positions 1..min(num_accepted + 1, reached) were reached, the first
        num_accepted accepted (the plan's proposer keeps the tables; a tree's reads what the chain inside it would
        have done from `draft` and `accepted_nodes`, DraftTree.greedy_chain_outcome)."""
        memory = self.memory
        if memory.log is not None:
            memory.log.append({"source": plan.source, "depth": plan.num_tokens, "drafted": num_drafted,
                               "accepted": num_accepted, "confidences": [round(float(c), 4) for c in plan.confidences],
                               "probe": plan.probe})
        if not plan.probe:
            memory.probe_schedule.passed(DRAFTER)
        if plan.offer is not None:
            plan.proposer.record(self, plan, num_drafted, num_accepted, draft, accepted_nodes)

    def record_past_the_draft(self, plan: RoundPlan, num_drafted: int, matched: bool) -> None:
        """A copy drafted `num_drafted` of the tokens its source offered, and the target accepted them all: the
        target's own token after them is what the next offered token faced. `matched` (it equals that token) is
        learnt as the acceptance of position num_drafted + 1. Exact in greedy decoding (acceptance of a lookup token
        is equality with the target's choice) and unbiased in sampling (a point-mass draft x is accepted with p(x),
        and the target's own token after an all-accepted draft is drawn from p: it is x with p(x)). Without it a
        lookup drafted short learns its later positions only from probes: on costs where a 1-token draft is nearly
        free (the rows kernel's bf16 verify), `auto` kept drafting lookups 1 token long where 5 paid."""
        self.lookup.record(plan.proposer.key(plan.offer, num_drafted + 1), matched)

    def record_passed_over(self, offer: Offer, matched: bool) -> None:
        """A copy offered and not drafted: `matched` (its first token equals the token the round committed at that
        position) is learnt as its position 1. Exact in greedy decoding and unbiased in sampling (the committed
        token is drawn from the target's distribution p whatever was drafted, so it equals a point-mass draft x with
        probability p(x), the chance x is accepted), as for `record_past_the_draft`. A source the plan passes over
        keeps learning at no cost: otherwise only probes teach it, and a request that copies (or stops copying) is
        noticed late."""
        self.lookup.record(offer.proposer.key(offer, 1), matched)


def record_reached(table: AcceptanceTable, key, num_reached: int, num_accepted: int) -> None:
    """Positions 1..`num_reached` (their keys `key(j)`) were reached, the first `num_accepted` accepted."""
    for j in range(1, num_reached + 1):
        table.record(key(j), j <= num_accepted)


def _optimistic(table: AcceptanceTable, key) -> float:
    """The estimate at `key` plus one standard error of a rate seen on (reached + prior weight) rounds, at most 1:
    what a probe assumes, so that a position is probed while its evidence could still make drafting it pay."""
    reached = table.counts.get(key, (0, 0))[1]
    return min(1.0, table.estimate(key) + (reached + table.prior_weight) ** -0.5)
