"""The fixed order of `draft_plan="fixed"` (and `"adl"`): a copy when one is on offer (the proposers' order: the
suffix cache's, then prompt lookup's), which the drafter may veto; else the drafter's configured length (ADL's, where
it adapts: DiffuSpec's adaptive draft length from smoothed accepted lengths)."""

from __future__ import annotations

from hf_dynaspec.drafting.planning.core import Offer, RoundPlan


class FixedOrder:
    """`veto` < 1: the drafter overrules a copy whose first token is not its own most likely one, when that has a
    probability above `veto` (`prompt_lookup_veto`; counted in `stats.lookup_vetoes`); `adaptive`: an
    `AdaptiveDraftLength` (None: the offer's length)."""

    plans_lengths = False  # a drafter drafts the plan's length, cut only by its own confidence stop

    def __init__(self, stats=None, veto: float = 1.0, adaptive=None):
        self.stats, self.veto, self.adaptive = stats, veto, adaptive

    def choose(self, offers: list[Offer], context, rows: int = 1) -> RoundPlan:
        drafted = [offer for offer in offers if offer.proposer.reads_features]
        copies = [offer for offer in offers if not offer.proposer.reads_features]
        if copies:
            copy = copies[0]
            if not (drafted and self.veto < 1.0):
                return RoundPlan(copy, copy.num_tokens)
            drafted = [drafted[0].proposer.first_offer(context)]  # the chain, its first position scored
            if not vetoes(drafted[0], copy.tokens[0], self.veto):
                return RoundPlan(copy, copy.num_tokens)
            self.stats.lookup_vetoes += 1
        if not drafted:
            return RoundPlan(None, 0)
        length = drafted[0].num_tokens if self.adaptive is None else self.adaptive.length
        length = min(drafted[0].num_tokens, length, context.room)
        return RoundPlan(drafted[0], length) if length >= 1 else RoundPlan(None, 0)

    def record(self, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None, accepted_nodes=None) -> None:
        """ADL learns from the drafter's rounds (a chain's length, a tree's depth)."""
        if self.adaptive is not None and num_drafted and plan.proposer is not None and plan.proposer.reads_features:
            tree = draft.tree if draft is not None else None
            self.adaptive.record(int(tree.max_depth or 0) if tree is not None else num_drafted, num_accepted)

    def record_past_the_draft(self, plan: RoundPlan, num_drafted: int, matched: bool) -> None:
        """A fixed order learns nothing from the copies."""

    def record_passed_over(self, offer: Offer, matched: bool) -> None:
        """A fixed order learns nothing from the copies."""


def vetoes(first: Offer, copy_token: int, veto: float) -> bool:
    """Does the drafter overrule a copy starting with `copy_token`: its own most likely first token (`first`, a
    chain's `first_offer`) differs and has a probability above `veto`? It reads the drafter's argmax, never a
    sample, so the choice between the two drafts is a fixed function of the context and sampling stays exact."""
    return first.tokens[0] != copy_token and (veto <= 0.0 or first.confidences[0] > veto)
