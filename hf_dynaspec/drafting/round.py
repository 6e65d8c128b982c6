"""One speculation round for every drafter: offer, choose, draft, cut once; then learn.

Every route runs its rounds through `SpeculationRound`, the one implementation of the round contract
(hf_dynaspec.drafting.contract.DraftingRound): the `assistant_model=` route (its candidate generator is a thin
adapter, hf_dynaspec.generation.candidate_generator) and `speculative_generate` (the batched loop). A round, as
`propose` runs it:

1. bring the call's host copy of the committed ids up to date (hf_dynaspec.drafting.lookup.LookupSources: only while
   a copy or a lattice's n-gram scorer reads it, one read of the few ids committed since);
2. collect every proposer's offers (hf_dynaspec.drafting.proposers: the drafter's chain and trees, prompt lookup,
   the suffix cache) and let the policy choose: the fixed order (`FixedOrder`) or the planner's expected tokens per
   second (`SpeculationPlanner`, `draft_plan="auto"`);
3. draft: the chosen proposer's tokens. A round whose draft reads no features (a copy, or no draft) lets the
   drafter's proposers keep the verified positions waiting (`absorb`): the drafter is not run at all;
4. cut once: after the first EOS where transformers does not crop at EOS itself (releases before 5.18).

`learn` then records the verified outcome from the plan the draft carries back: statistics by source, the
policy's tables, what the copies showed, the shortlist coverage. What a round may read: the context and the
drafter's distributions, never a token drawn in this round, so greedy output is identical to plain generate() and
sampling exact (tests/test_planner.py, tests/test_planned_rounds.py, tests/test_enumeration.py).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from hf_dynaspec.drafting.contract import Draft, RoundContext
from hf_dynaspec.drafting.lookup import LookupSources


class SpeculationRound:
    """One generate() call's rounds for one sequence: `proposers` (in the order the policy reads ties and, fixed,
    preference), `policy` (`FixedOrder` or `SpeculationPlanner`), `stats`, `features` (what reads the target's
    hidden states: the drafter), `sources` (the call's host context); `eos_token_ids` `[E]`: cut drafts after an
    EOS (None: the caller's loop crops at EOS itself)."""

    def __init__(self, proposers: list, policy, stats, features, sources: LookupSources,
                 eos_token_ids: torch.Tensor | None = None, collect_draft_tokens: bool = False):
        self.proposers, self.policy, self.stats, self.features, self.sources = proposers, policy, stats, features, sources
        self.eos_token_ids, self.collect_draft_tokens = eos_token_ids, collect_draft_tokens

    def begin(self, input_ids: torch.Tensor) -> None:
        """Start a generate() call on the prompt `[1, N]` (one read of the prompt when the host context is kept)."""
        self.sources.begin(input_ids)

    def hidden_state_selection(self):
        return self.features.hidden_state_selection()

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.features.select_target_hidden(hidden_states)

    def finish(self) -> None:
        """A batch row is done (LookupSources.finish)."""
        self.sources.finish()

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, room: int, rows: int = 1) -> Draft:
        """The round's draft continuing `input_ids` `[1, N]`: `Draft.token_ids` `[1, k]`, 0 <= k <= `room` (k = 0:
        verify the target's own token only), `Draft.plan` what was chosen."""
        self.sources.read(input_ids)
        if room < 1:
            return Draft(token_ids=input_ids.new_empty((1, 0)), logits=None)
        context = RoundContext(input_ids, target_hidden, room)
        offers = []
        for proposer in self.proposers:
            offers += proposer.offer(context)
        plan = self.policy.choose(offers, context, rows)
        if plan.proposer is None or not plan.proposer.reads_features:  # the drafter's proposers catch up later
            for proposer in self.proposers:
                if proposer.reads_features:
                    proposer.absorb(context)
        if plan.proposer is None:
            return Draft(token_ids=input_ids.new_empty((1, 0)), logits=None, plan=plan)
        draft = self._end_at_eos(plan.proposer.draft(context, plan, self.policy))
        if self.collect_draft_tokens and draft.token_ids.shape[1] and not draft.looked_up and draft.tree is None:
            self.stats.draft_token_ids.append(draft.token_ids[0])
        return draft

    def learn(self, draft: Draft, committed_ids: torch.Tensor, num_accepted: int,
              accepted_nodes: list[int] | None = None) -> None:
        """Record the verified outcome of `draft`: `committed_ids` `[1, N']` now ends with the accepted drafts and
        the target's own token; `accepted_nodes` (a tree round): the accepted nodes."""
        plan, num_drafted = draft.plan, draft.token_ids.shape[1]
        self.sources.read(committed_ids)
        copied = bool(num_drafted) and not plan.proposer.reads_features
        self.stats.record(num_drafted, num_accepted, looked_up=copied, source=plan.source if num_drafted else "none")
        self.policy.record(plan, num_drafted, num_accepted, draft, accepted_nodes)
        self.sources.learn(self.policy, plan, num_drafted, num_accepted)
        committed = committed_ids[0, -(num_accepted + 1) :]  # the target's tokens at draft positions 0..n
        self.stats.record_shortlists(draft.shortlists, committed)

    def _end_at_eos(self, draft: Draft) -> Draft:
        """Cut the draft after its first EOS, as transformers' own candidate generators end theirs: releases
        before 5.18 commit every accepted token and check the stopping criteria only on the last one, so tokens
        drafted past an EOS would be appended after it. The cut reads tokens already drawn and drops only
        positions that follow an EOS, whose tokens are never part of the output: sampling stays exact."""
        if self.eos_token_ids is None or not draft.token_ids.shape[1] or draft.tree is not None:
            return draft  # (a tree's verifier checks every committed token against the stopping criteria)
        is_eos = torch.isin(draft.token_ids[0], self.eos_token_ids)
        if not bool(is_eos.any()):
            return draft
        keep = int(is_eos.nonzero()[0, 0]) + 1
        logits = draft.logits[:, :keep] if draft.logits is not None else None
        return replace(draft, token_ids=draft.token_ids[:, :keep], logits=logits,
                       confidences=draft.confidences[:keep], shortlists=draft.shortlists[:keep])
