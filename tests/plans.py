"""The planner as the planner tests drive it: a call's `SpeculationPlanner` over the drafter's chain offer (and its
tree's, with a `TreeShape`) and the copies a test offers, with plans written as labels (`Plan`).

The planner itself prices offers through the proposers' own pricing (hf_dynaspec.drafting.proposers); a test names
a round by what it drafts ("drafter", "tree", a copy's source, "none") and `Planning` turns the label into the real
offer, so every decision and table update below is the package's code, not a stand-in."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace

from hf_dynaspec.drafting.contract import RoundContext
from hf_dynaspec.drafting.lookup import CopyProposer
from hf_dynaspec.drafting.planning.core import LONGEST_COPY, Offer, PlannerMemory, RoundPlan, TreeShape
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.drafter import ChainProposer, ConfidenceRule, TreeProposer


@dataclass(frozen=True)
class LookupCandidate:
    """A copy on offer: its source ("prompt-lookup", "suffix-request", "suffix-shared"), match and length."""

    source: str
    match_length: int
    num_tokens: int


@dataclass(frozen=True)
class Plan:
    """A round's plan by label (`RoundPlan` holds the offer itself)."""

    source: str
    num_tokens: int
    match_length: int = 0
    confidences: tuple = ()
    probe: bool = False
    next_offered: int | None = None


def at(room: int) -> RoundContext:
    return RoundContext(None, None, room)


def label(plan: RoundPlan) -> Plan:
    match_length = plan.offer.match_length if plan.offer is not None else 0
    return Plan(plan.source, plan.num_tokens, match_length, tuple(plan.confidences), plan.probe, plan.next_offered)


class Planning:
    """`SpeculationPlanner(costs, memory)` with the drafter's chain of up to `max_draft_tokens` (none with
    `drafter=False`: a drafter-free assistant) and trees of `tree`."""

    def __init__(self, costs, memory: PlannerMemory, max_draft_tokens: int, tree: TreeShape | None = None,
                 drafter: bool = True):
        self.planner = SpeculationPlanner(costs, memory)
        self.chain = ChainProposer(None, max_draft_tokens)
        self.trees = TreeProposer(None, tree) if tree is not None else None
        self.copies = CopyProposer(None, LONGEST_COPY, 0)
        drafted = [self.chain.offer(None)[0]] if drafter else []
        self.drafted = drafted + (self.trees.offer(None) if tree is not None and drafter else [])
        self.tree, self.max_draft_tokens = tree, max_draft_tokens

    @property
    def memory(self) -> PlannerMemory:
        return self.planner.memory

    @property
    def costs(self):
        return self.planner.costs

    @property
    def lookup(self):
        return self.planner.lookup

    def copy(self, candidate: LookupCandidate) -> Offer:
        return Offer(self.copies, candidate.source, candidate.num_tokens, candidate.match_length,
                     tuple(range(candidate.num_tokens)))

    def offers(self, lookups: list[LookupCandidate]) -> list[Offer]:
        return self.drafted + [self.copy(candidate) for candidate in lookups]

    def plan_round(self, lookups: list[LookupCandidate], room: int, rows: int = 1) -> Plan:
        return label(self.planner.choose(self.offers(lookups), at(room), rows))

    def real(self, plan: Plan) -> RoundPlan:
        """The `RoundPlan` a label stands for, with the planner's own offers."""
        if plan.source == "none":
            offer = None
        elif plan.source in ("drafter", "tree"):
            offer = next(o for o in self.drafted if o.source == plan.source)
        else:
            offer = self.copy(LookupCandidate(plan.source, plan.match_length, plan.num_tokens))
        return RoundPlan(offer, plan.num_tokens, tuple(plan.confidences), plan.probe, plan.next_offered)

    def record(self, plan: Plan, num_drafted: int, num_accepted: int, chain_outcome=None) -> None:
        """`chain_outcome` (a tree round): (accepted, reached) of the chain inside the tree, as the tree's accepted
        nodes tell it (DraftTree.greedy_chain_outcome)."""
        self.planner.record(self.real(plan), num_drafted, num_accepted, *_told(chain_outcome))

    def record_past_the_draft(self, plan: Plan, num_drafted: int, matched: bool) -> None:
        self.planner.record_past_the_draft(self.real(plan), num_drafted, matched)

    def record_passed_over(self, candidate: LookupCandidate, matched: bool) -> None:
        self.planner.record_passed_over(self.copy(candidate), matched)

    def rule(self) -> ConfidenceRule:
        return ConfidenceRule(self.planner, self.chain.max_tokens)

    def keep_position(self, confidences):
        return self.rule().keep_position(confidences)

    def draft_more(self, confidences, room):
        return self.rule().draft_more(confidences, room)

    def cut(self, confidences):
        return self.rule().cut(confidences)


__all__ = ["LookupCandidate", "Plan", "Planning", "at", "label", "replace"]


class LatticePlanning:
    """The one planner over a lattice source's offers, as a lattice round makes them (LatticeChain.draft): before
    the read, its chain's and tree's (labelled "chain" and "tree"; either chosen means the lattice is read), with a
    copy (`plan_round`); once read (`choose`), the same kinds priced by the confidences read, the read paid."""

    def __init__(self, costs, memory: PlannerMemory, depth: int = 4, tree: TreeShape | None = None):
        from hf_dynaspec.drafting.proposers.lattice import LatticeChain, LatticeReader, LatticeTree

        self.planner = SpeculationPlanner(costs, memory)
        self.chain = LatticeChain(LatticeReader(None, None, depth, None))
        self.tree = LatticeTree(self.chain.reader, self.chain, tree) if tree is not None else None
        self.copies, self.depth = CopyProposer(None, LONGEST_COPY, 0), depth

    @property
    def memory(self) -> PlannerMemory:
        return self.planner.memory

    def _kinds(self, **read) -> list[Offer]:
        return [Offer(kind, "chain" if kind is self.chain else "tree", read.pop("depth", self.depth), **read)
                for kind in self.chain.kinds]

    def copy(self, candidate: LookupCandidate) -> Offer:
        return Offer(self.copies, candidate.source, candidate.num_tokens, candidate.match_length,
                     tuple(range(candidate.num_tokens)))

    def plan_round(self, lookup: LookupCandidate | None, room: int) -> Plan:
        offers = self._kinds() + ([self.copy(lookup)] if lookup is not None else [])
        return label(self.planner.choose(offers, at(room)))

    def choose(self, confidences: list[float], lookup: LookupCandidate | None, room: int) -> Plan:
        read = [Offer(kind, "chain" if kind is self.chain else "tree", len(confidences),
                      confidences=tuple(confidences), read=object()) for kind in self.chain.kinds]
        plan = self.planner.best(read + ([self.copy(lookup)] if lookup is not None else []), room)
        return label(replace(plan, confidences=plan.offer.confidences if plan.offer is not None else ()))

    def real(self, plan: Plan) -> RoundPlan:
        if plan.source == "none":
            offer = None
        elif plan.source in ("chain", "tree"):
            offer = next(o for o in self._kinds() if o.source == plan.source)
        else:
            offer = self.copy(LookupCandidate(plan.source, plan.match_length, plan.num_tokens))
        return RoundPlan(offer, plan.num_tokens, tuple(plan.confidences), plan.probe, plan.next_offered)

    def record(self, plan: Plan, num_drafted: int, num_accepted: int, chain_outcome=None) -> None:
        """`chain_outcome` (a tree round): (accepted, reached) of the argmax chain inside the tree, as the tree's
        accepted nodes tell it (DraftTree.greedy_chain_outcome)."""
        self.planner.record(self.real(plan), num_drafted, num_accepted, *_told(chain_outcome))


def _told(chain_outcome) -> tuple:
    """(draft, accepted nodes) whose tree tells `chain_outcome` as the chain's outcome; (None, None) for none."""
    if chain_outcome is None:
        return None, None
    return SimpleNamespace(tree=SimpleNamespace(greedy_chain_outcome=lambda nodes: chain_outcome)), []


def one_copy_token_per_round(monkeypatch) -> list:
    """Plans forced to draft 1 token of prompt lookup's copy wherever one is offered (room allowing), whatever the
    planner would pick; returns the list every `record_past_the_draft` outcome is appended to."""
    choose, record = SpeculationPlanner.choose, SpeculationPlanner.record_past_the_draft
    learnt: list = []

    def one_token(self, offers, context, rows=1):
        plan = choose(self, offers, context, rows)
        copies = [offer for offer in offers if offer.source == "prompt-lookup"]
        return RoundPlan(copies[0], 1, copies=tuple(copies)) if copies and context.room > 1 else plan

    def recording(self, plan, drafted, matched):
        learnt.append(matched)
        return record(self, plan, drafted, matched)

    monkeypatch.setattr(SpeculationPlanner, "choose", one_token)
    monkeypatch.setattr(SpeculationPlanner, "record_past_the_draft", recording)
    return learnt
