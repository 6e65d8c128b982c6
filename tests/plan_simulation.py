"""The `auto` planner replayed on recorded rounds under any host's measured costs: tested decisions for hosts the
tests do not run on.

A trace (recipes/measure_acceptance.py `--traces`) is a real greedy run of an assistant with its target where every
round drafted the whole chain (8 tokens, with each position's confidence) or, every other round, the whole tree;
what each would have accepted is known, at the position where it was drafted. A simulated call walks the call's
output from the first token after the prefill to its end: at each position the plan under test picks a draft,
commits min(drafted, accepted) + 1 tokens and pays the cost table's seconds, and the planner learns as in a real
call. What a draft accepts there: prompt lookup's draft is found at that very position in the call's output and
compared with it (exact); the drafter's chain and tree take the outcome recorded at the nearest earlier recorded
position (the trace covers the positions its own rounds started at). Every plan makes the same number of tokens,
so plans are compared by the seconds they take, as a user's call of fixed length is. Costs (`RoundCosts`) come
from cost fixtures measured on each host kind (benchmarks/host_costs.py).

Decode only (the prefill is the same for every plan). Simplifications, the same for every plan compared: a
shallower tree accepts min(depth, the whole tree's accepted depth); the chain inside a tree round accepts what the
chain recorded there did.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from plans import LookupCandidate, Plan, Planning

from hf_dynaspec.drafting.lookup import lookup_match
from hf_dynaspec.drafting.planning.core import PlannerMemory, TreeShape

MAX_DRAFT = 8


@dataclass
class Record:
    """What drafts accept at one position of a call: the chain's accepted length of 8 and its confidences, the
    whole tree's accepted depth, and the prompt-lookup draft there (None: no match) with its accepted length."""

    chain_accepted: int
    confidences: list[float]
    tree_accepted: int
    lookup: LookupCandidate | None = None
    lookup_accepted: int = 0
    transformers_lookup: int = 0  # tokens transformers' prompt lookup drafts here (`transformers_lookup`)
    transformers_accepted: int = 0


@dataclass
class SimulatedCall:
    tokens: int = 0
    seconds: float = 0.0
    sources: dict[str, int] = field(default_factory=dict)  # rounds by source

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class CallTrace:
    """A traced call (`prompt_length`, `output_ids`, `rounds`) as records by position: `at(position)`."""

    def __init__(self, call: dict, lookup_tokens: int = 5, min_ngram: int = 2):
        self.output = call["output_ids"]
        self.start = call["prompt_length"] + 1  # the prefill commits the first token
        self.end = len(self.output)
        self.lookup_tokens, self.min_ngram = lookup_tokens, min_ngram
        self.chains: list[tuple[int, int, list[float]]] = []  # (position, accepted of 8, confidences)
        self.trees: list[tuple[int, int]] = []  # (position, accepted depth)
        position = self.start
        for entry in call["rounds"]:
            if entry["source"] == "drafter" and entry["drafted"] == MAX_DRAFT:
                self.chains.append((position, entry["accepted"], entry["confidences"]))
            elif entry["source"] == "tree":
                self.trees.append((position, entry["accepted"]))
            position += entry["accepted"] + 1
        self._records: dict[int, Record] = {}

    @staticmethod
    def _nearest(entries: list, position: int):
        earlier = [e for e in entries if e[0] <= position]
        return earlier[-1] if earlier else entries[0]

    def at(self, position: int) -> Record:
        if position not in self._records:
            _, chain_accepted, confidences = self._nearest(self.chains, position)
            tree_accepted = self._nearest(self.trees, position)[1] if self.trees else 0
            tokens, match = lookup_match(torch.tensor(self.output[:position]), self.lookup_tokens, self.min_ngram, 3)
            lookup, accepted = None, 0
            if match and len(tokens):
                lookup = LookupCandidate("prompt-lookup", match, len(tokens))
                accepted = _common_prefix(tokens.tolist(), self.output[position:])
            theirs = transformers_lookup(self.output[:position], self.lookup_tokens)
            self._records[position] = Record(chain_accepted, confidences, tree_accepted, lookup, accepted, len(theirs),
                                             _common_prefix(theirs, self.output[position:]))
        return self._records[position]


def transformers_lookup(ids: list[int], max_tokens: int, max_ngram: int = 2) -> list[int]:
    """What transformers' PromptLookupCandidateGenerator drafts after `ids` (its default max_matching_ngram_size 2):
    for n from max_ngram down to 1, the continuation of the earliest earlier occurrence of the last n ids."""
    for size in range(min(max_ngram, len(ids) - 1), 0, -1):
        suffix = ids[len(ids) - size :]
        for start in range(len(ids) - size):
            if ids[start : start + size] == suffix:
                return ids[start + size : start + size + max_tokens]
    return []


def records_of(call: dict, lookup_tokens: int = 5, min_ngram: int = 2) -> CallTrace:
    """A traced call -> its records by position (`CallTrace`; prompt lookup offers `lookup_tokens` from n-grams of
    `min_ngram`..3 ids); None where the call has no full chain round."""
    trace = CallTrace(call, lookup_tokens, min_ngram)
    return trace if trace.chains else None


class Replay:
    """Prices and plays rounds on `costs` (a `RoundCosts`) with trees of `shape` (a `TreeShape`)."""

    def __init__(self, costs, shape: TreeShape):
        self.costs, self.shape = costs, shape

    def chain_seconds(self, steps: int, kept: int) -> float:
        return self.costs.consume_seconds + self.costs.drafting(steps) + self.costs.verify(kept + 1)

    def tree_seconds(self, depth: int) -> float:
        costs = self.costs
        return (costs.consume_seconds + costs.first_draft_seconds + (depth - 1) * costs.tree_step_seconds
                + costs.verify(self.shape.nodes(depth) + 1))

    def fixed(self, trace: CallTrace, plan: str, k: int) -> SimulatedCall:
        """A fixed plan: "none", "chain" (k tokens), "tree" (depth k), "lookup" (lookup else none),
        "lookup+chain" (lookup else a chain of k) or "transformers-lookup" (transformers' prompt lookup else none)."""
        call, position = SimulatedCall(), trace.start
        while position < trace.end:
            r, room = trace.at(position), trace.end - position
            if plan == "transformers-lookup" and r.transformers_lookup:
                n = min(r.transformers_lookup, room - 1)
                seconds, accepted, source = self.costs.verify(n + 1), min(n, r.transformers_accepted), "lookup"
            elif plan.startswith("lookup") and r.lookup is not None:
                n = min(r.lookup.num_tokens, room - 1)
                seconds, accepted, source = self.costs.verify(n + 1), min(n, r.lookup_accepted), "lookup"
            elif plan in ("chain", "lookup+chain") and k and room > 1:
                n = min(k, room - 1)
                seconds, accepted, source = self.chain_seconds(n, n), min(n, r.chain_accepted), "drafter"
            elif plan == "tree" and room > 1:
                d = min(k, room - 1)
                seconds, accepted, source = self.tree_seconds(d), min(d, r.tree_accepted), "tree"
            else:
                seconds, accepted, source = self.costs.verify(1), 0, "none"
            position = self._commit(call, position, accepted, seconds, source)
        return call

    @staticmethod
    def _commit(call: SimulatedCall, position: int, accepted: int, seconds: float, source: str) -> int:
        call.tokens += accepted + 1
        call.seconds += seconds
        call.sources[source] = call.sources.get(source, 0) + 1
        return position + accepted + 1

    def auto(self, trace: CallTrace, memory: PlannerMemory, trees: bool, deferred: bool = False,
             drafter: bool = True) -> SimulatedCall:
        """`draft_plan="auto"` with `memory` (kept by the caller across calls); `deferred`: the accelerator form
        (draft the cap, cut once at the end) instead of the CPU one (stop as soon as a position does not pay);
        `drafter=False`: a drafter-free assistant's planner (`DynaSpecAssistant.for_target`: lookups or nothing)."""
        planner = Planning(self.costs, memory, MAX_DRAFT, tree=self.shape if trees else None,
                                     drafter=drafter)
        call, position = SimulatedCall(), trace.start
        while position < trace.end:
            r, room = trace.at(position), trace.end - position - 1
            lookups = [r.lookup] if r.lookup is not None and room >= 1 else []
            plan = planner.plan_round(lookups, room) if room >= 1 else Plan("none", 0)
            seconds, drafted, accepted, plan = self._play(planner, plan, r, deferred, room)
            # A tree round also teaches the chain's table what the chain inside it did.
            outcome = ((min(r.chain_accepted, plan.num_tokens), min(r.chain_accepted + 1, plan.num_tokens))
                       if plan.source == "tree" else None)
            planner.record(plan, drafted, accepted, chain_outcome=outcome)
            if plan.source == "prompt-lookup" and accepted == drafted < r.lookup.num_tokens:
                plan = replace(plan, next_offered=-1)  # offered (its value is not needed: the trace knows how far it matches)
                planner.record_past_the_draft(plan, drafted, r.lookup_accepted > drafted)
            if r.lookup is not None and lookups and plan.source != "prompt-lookup":
                planner.record_passed_over(r.lookup, r.lookup_accepted >= 1)
            position = self._commit(call, position, accepted, seconds, plan.source)
        return call

    def _play(self, planner, plan: Plan, r: Record, deferred: bool,
              room: int) -> tuple[float, int, int, Plan]:
        """(seconds, drafted, accepted, the plan with its drafted confidences) of `plan` on record `r`, at most
        `room` draft tokens."""
        if plan.source == "none":
            return self.costs.verify(1), 0, 0, plan
        if plan.source == "tree":
            depth = plan.num_tokens
            return self.tree_seconds(depth), self.shape.nodes(depth), min(depth, r.tree_accepted), plan
        if plan.source != "drafter":
            return (self.costs.verify(plan.num_tokens + 1), plan.num_tokens, min(plan.num_tokens, r.lookup_accepted),
                    plan)
        cap = min(MAX_DRAFT, room)
        if plan.probe:
            steps = kept = plan.num_tokens
        elif deferred:
            steps = plan.num_tokens
            kept = planner.cut(r.confidences[:steps])
        else:  # ChainDraftSession.draft's step-by-step form
            steps = kept = 0
            while steps < cap:
                steps += 1
                if not planner.keep_position(r.confidences[:steps]):
                    break
                kept = steps
                if not planner.draft_more(r.confidences[:kept], cap):
                    break
        plan = replace(plan, confidences=tuple(r.confidences[:kept]))
        return self.chain_seconds(steps, kept), kept, min(kept, r.chain_accepted), plan


def fixed_plans(shape: TreeShape) -> dict[str, tuple[str, int]]:
    """Every fixed plan `auto` is compared with: no draft, lookup alone, chains of 1-8, lookup before a chain of
    1-8, trees of every depth of `shape`; name -> `Replay.fixed` arguments."""
    plans = {"none": ("none", 0), "lookup": ("lookup", 0)}
    plans |= {f"chain:{k}": ("chain", k) for k in range(1, MAX_DRAFT + 1)}
    plans |= {f"lookup+chain:{k}": ("lookup+chain", k) for k in range(1, MAX_DRAFT + 1)}
    return plans | {f"tree:{d}": ("tree", d) for d in range(1, shape.max_depth + 1)}


def rate_of(results: list[SimulatedCall]) -> float:
    """Tokens per second over several calls."""
    return sum(r.tokens for r in results) / sum(r.seconds for r in results)


def fixed_rates(replay: Replay, calls: list[CallTrace]) -> dict[str, float]:
    """Tokens per second of each fixed plan (`fixed_plans`) over `calls` (every plan makes the same tokens)."""
    return {name: rate_of([replay.fixed(call, *plan) for call in calls]) for name, plan in fixed_plans(replay.shape).items()}


def auto_rate(replay: Replay, calls: list[CallTrace], memory: PlannerMemory, trees: bool, deferred: bool,
              drafter: bool = True) -> float:
    """Tokens per second of `auto` over `calls` in order, one assistant's tables (`memory`) kept across them."""
    return rate_of([replay.auto(call, memory, trees=trees, deferred=deferred, drafter=drafter) for call in calls])
