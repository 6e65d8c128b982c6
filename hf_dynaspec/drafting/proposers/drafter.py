"""An EAGLE drafter's proposers: its chain (`ChainProposer`) and its EAGLE-2 trees (`TreeProposer`), both on one
`ChainDraftSession` (the tree session grows on it), and the length rules of a planned chain.

A drafter's round costs its pass over the verified positions (`consume_seconds`), the drafting (k drafter steps; a
tree's first step, then one frontier step of top_k rows per further depth) and the target's forward over the draft;
a round that drafts a copy or nothing defers the drafter's pass (`absorb`: the next drafter round absorbs every
waiting position at once). A chain is priced by position before the round and cut by the drafted positions'
confidence (their most likely token's probability, read before the token is drawn: EAGLE-2's observation that this
tracks acceptance); a tree by a per-depth table of how often the accepted path reached and passed each depth,
started from the chain's estimate at that position (a tree holds about the chain's path and more).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial

import torch

from hf_dynaspec.drafting.contract import Draft, RoundContext
from hf_dynaspec.drafting.planning.core import (
    Offer,
    RoundPlan,
    TreeShape,
    best_length,
    confidence_bin,
    expected_tokens,
    position_key,
)
from hf_dynaspec.drafting.planning.planner import record_reached


class ChainProposer:
    """The drafter's chain of up to `max_tokens` tokens, drafted by `session` (a `ChainDraftSession`)."""

    reads_features = True
    smallest = 1  # a drafter offer is priced from one token: no draft is the planner's own candidate

    def __init__(self, session, max_tokens: int):
        self.session, self.max_tokens = session, max_tokens

    def offer(self, context: RoundContext) -> list[Offer]:
        return [Offer(self, "drafter", self.max_tokens)]

    def absorb(self, context: RoundContext) -> None:
        """The round drafts no model tokens: the verified positions wait for the next drafter round (unless the
        veto's check ran the drafter over them this round)."""
        if self.session.num_verified_pairs < context.input_ids.shape[1] - 1:
            self.session.defer_verified(context.input_ids, context.hidden)

    def first_offer(self, context: RoundContext) -> Offer:
        """The chain's offer with its first position scored: the drafter's most likely token there (a vocabulary id)
        and its probability over the rows scored, read on the host for a rule that weighs a copy against it (the
        veto); drafted, the chain continues from that position."""
        hidden, clusters, scores = self.session.first_position(context.input_ids, context.hidden)
        # One read for both (float64 holds any vocabulary id exactly).
        token, top = torch.stack((scores.argmax_token_ids[0].double(), scores.top_probability[0].double())).tolist()
        return Offer(self, "drafter", self.max_tokens, tokens=(int(token),), confidences=(top,),
                     read=(hidden, clusters, scores))

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        """`plan.num_tokens` tokens, or under a planner up to the chain's cap, each position kept while the
        planner's `ConfidenceRule` says it pays (a probe: exactly its length)."""
        rule = ConfidenceRule(policy, self.max_tokens, plan.probe) if policy.plans_lengths else None
        capped = rule is None or plan.probe or self.session.defer_host_decisions
        cap = plan.num_tokens if capped else min(self.max_tokens, context.room)
        draft = self.session.draft(context.input_ids, context.hidden, cap, rule=rule, first=plan.offer.read)
        return replace(draft, plan=replace(plan, confidences=tuple(draft.confidences)))

    # -- pricing and learning (hf_dynaspec.drafting.planning.planner) -------------------------------------------
    @staticmethod
    def table(planner, offer: Offer):
        return planner.memory.position

    @staticmethod
    def key(offer: Offer, position: int):
        return position_key(position)

    @staticmethod
    def seconds(planner, offer: Offer, k: int) -> float:
        costs = planner.costs
        return costs.consume_seconds + costs.drafting(k) + planner.verify(k + 1)

    @staticmethod
    def record(planner, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None,
               accepted_nodes=None) -> None:
        """Positions 1..min(accepted + 1, drafted) were reached: by position, and by the confidence drafted."""
        memory = planner.memory
        for j in range(1, min(num_accepted + 1, num_drafted) + 1):
            memory.position.record(position_key(j), j <= num_accepted)
            if j <= len(plan.confidences):
                memory.confidence.record(confidence_bin(plan.confidences[j - 1]), j <= num_accepted)


class TreeProposer:
    """EAGLE-2 trees of `shape` (a `TreeShape`), grown by `trees` (a `TreeDraftSession` on the chain's session):
    a plan's depth is a cap (EAGLE-2 keeps the best-scored nodes, which may stop short of it)."""

    reads_features = True
    smallest = 1

    def __init__(self, trees, shape: TreeShape):
        self.trees, self.shape = trees, shape

    def offer(self, context: RoundContext) -> list[Offer]:
        return [Offer(self, "tree", self.shape.max_depth)]

    def absorb(self, context: RoundContext) -> None:
        """Nothing: the chain's session, which the trees grow on, keeps the verified positions waiting."""

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        tree = self.trees.draft_tree(context.input_ids, context.hidden, max_depth=plan.num_tokens)
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree,
                     shortlists=self.trees.shortlists_of_last_draft, plan=plan)

    # -- pricing and learning ---------------------------------------------------------------------------------
    @staticmethod
    def table(planner, offer: Offer):
        return planner.memory.tree_depth

    def key(self, offer: Offer, depth: int) -> tuple[int, int, int]:
        return self.shape.top_k, self.shape.total_tokens, position_key(depth)

    def seconds(self, planner, offer: Offer, depth: int) -> float:
        costs = planner.costs
        if costs.tree_step_seconds is None:
            raise ValueError("planning trees needs the measured cost of a tree depth (RoundCosts.tree_step_seconds)")
        drafting = costs.first_draft_seconds + (depth - 1) * costs.tree_step_seconds
        return costs.consume_seconds + drafting + planner.verify(self.shape.nodes(depth) + 1)

    def record(self, planner, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None,
               accepted_nodes=None) -> None:
        """Depths 1..min(accepted + 1, the plan's depth) were reached. The chain's position table learns what the
        chain inside the tree would have done (its first children, DraftTree.greedy_chain_outcome): otherwise a chain that had a bad
        stretch would stay priced low (and trees drafted where chains pay more) until the next chain probe."""
        reached = min(num_accepted + 1, plan.num_tokens)
        record_reached(planner.memory.tree_depth, partial(self.key, plan.offer), reached, num_accepted)
        if draft is not None and accepted_nodes is not None:
            chain_accepted, chain_reached = draft.tree.greedy_chain_outcome(accepted_nodes)
            record_reached(planner.memory.position, position_key, chain_reached, chain_accepted)


@dataclass
class ConfidenceRule:
    """A planned chain's length rule, read by the session at each drafted position (before its token is drawn) or
    once at the round's end (accelerators): keep a position while it raises the round's rate. `planner`: a
    `SpeculationPlanner`; `max_tokens`: the chain's cap. A probe round (`probe`) keeps every position up to its
    length, and still reports their confidences, so the confidence table learns too."""

    planner: object
    max_tokens: int
    probe: bool = False

    def _estimates(self, confidences: list[float], longest: int = 0) -> list[float]:
        """Acceptance of the drafted positions (by their confidence), then of the positions up to `longest` (by
        position)."""
        memory, known = self.planner.memory, []
        for j in range(1, max(len(confidences), longest) + 1):
            known.append(memory.confidence.estimate(confidence_bin(confidences[j - 1])) if j <= len(confidences)
                         else memory.position.estimate(position_key(j)))
        return known

    def _seconds(self, k: int, drafted: int) -> float:
        """A round's seconds verifying `k` of its drafts when `drafted` drafter steps are paid for (at least k)."""
        costs = self.planner.costs
        return costs.consume_seconds + costs.drafting(max(k, drafted)) + self.planner.verify(k + 1)

    def keep_position(self, confidences: list[float]) -> bool:
        """With the drafter's confidence at every position so far (the last one not drawn yet): does including
        the last position raise the round's rate, counting the best continuation past it (positions beyond priced
        from the position table, each with its drafter step)? Its own drafter step is already paid in both cases.
        Looking past it matters where verification is not monotone in tokens (fp32 on MKL: 2 tokens cost twice 1,
        5 cost less than 2): position 1 alone would not pay there, positions 1-4 do."""
        if self.probe:
            return True
        j = len(confidences)
        known = self._estimates(confidences, self.max_tokens)
        without = expected_tokens(known[: j - 1])[-1] / self._seconds(j - 1, j)
        _, with_it = best_length(known, partial(self._seconds, drafted=j), smallest=j)
        return with_it > without

    def draft_more(self, confidences: list[float], room: int) -> bool:
        """After drafting positions 1..j (their confidences known): is another drafter step expected to pay?"""
        j, longest = len(confidences), min(self.max_tokens, room)
        if self.probe or j >= longest:
            return self.probe and j < room
        k, _ = best_length(self._estimates(confidences, longest), partial(self._seconds, drafted=j), smallest=j)
        return k > j

    def cut(self, confidences: list[float]) -> int:
        """Deferred form (accelerators read a round's confidences once, at its end): how many of the drafted
        positions to keep: the prefix length with the best rate, every drafter step already paid."""
        if self.probe:
            return len(confidences)
        k, _ = best_length(self._estimates(confidences), partial(self._seconds, drafted=len(confidences)))
        return k
