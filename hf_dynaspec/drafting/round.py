"""One speculation round, one owner: pick the source, absorb the verified positions, draft, cut once.

Both routes into generate() run their rounds through `EagleRound`, an implementation of the one round
contract (hf_dynaspec.drafting.contract.DraftingRound, which the lattice rounds implement too): the
`assistant_model=` route (its candidate generator is a thin adapter, hf_dynaspec.generation.candidate_generator)
and the public routes (hf_dynaspec.generation.public_loop, which verifies a chain as a one-branch tree). A round,
as `propose` runs it:

1. bring the lookup sources' host copy of the committed ids up to date (hf_dynaspec.drafting.lookup.LookupSources,
   shared with the lattice rounds: only while a lookup source is on, one read of the few ids committed since);
2. pick the source: with `draft_plan="fixed"` (or `"adl"`, whose drafter length adapts), the suffix cache's
   draft, else prompt lookup's, else the drafter (whose first token may veto a lookup draft,
   `ChainDraftSession.overrules`); with
   `draft_plan="auto"`, the planner's choice among the drafter (a chain of up to K tokens), a tree of some depth
   (`speculative_generate(trees=True)` only: its verifier reads trees), each lookup source's draft and no draft at all;
3. draft: the chosen source's tokens. A drafter round first runs the drafter over the newly verified positions
   (and any a lookup round left waiting), then its K-step loop, `ChainDraftSession.draft`, which knows
   nothing of sources (it takes a cap and a length rule: the planner, or a probe's `ProbeDrafting`); a lookup
   round, or one with no draft, leaves those positions waiting
   (`ChainDraftSession.defer_verified`): the drafter is not run at all;
4. cut once: after the first EOS where transformers does not crop at EOS itself (releases before 5.18).

`learn` then records the verified outcome: statistics by source, the planner's acceptance tables, the shortlist
coverage. What a round may read: the context and the drafter's distributions, never a token drawn in this round,
so greedy output is identical to plain generate() and sampling exact (tests/test_planner.py,
tests/test_planned_rounds.py, tests/test_enumeration.py).

Legend: N committed tokens, K draft tokens.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.contract import Draft
from hf_dynaspec.drafting.lattice import AdaptiveDraftLength
from hf_dynaspec.drafting.lookup import LookupSources, SuffixCache, as_ids
from hf_dynaspec.drafting.planning.core import LONGEST_COPY, RoundPlan
from hf_dynaspec.drafting.planning.planner import ProbeDrafting, SpeculationPlanner, share_costs
from hf_dynaspec.drafting.tree import TreeDraftSession


class EagleRound:
    """An EAGLE drafter's rounds of one generate() call (a `DraftingRound`, as `LatticeRound` is a lattice
    source's); a drafter-free assistant's too, whose session drafts nothing (`NoDraftSession`). `planner` None:
    `draft_plan="fixed"`; `suffix` None: no suffix cache; `eos_token_ids` `[E]`: cut drafts after an EOS (None: the
    caller's loop crops at EOS itself)."""

    def __init__(self, session: ChainDraftSession, options, stats, planner: SpeculationPlanner | None = None,
                 suffix: SuffixCache | None = None, eos_token_ids: torch.Tensor | None = None,
                 collect_draft_tokens: bool = False, trees: TreeDraftSession | None = None):
        """`trees`: grows the trees a planner with a `TreeShape` may choose (on `session`, which it shares); without
        a planner, the configured tree every round (`trees=True` with `draft_plan="fixed"`)."""
        if planner is not None and (trees is not None) != (planner.tree is not None):
            raise ValueError("a planned round drafts trees exactly when its planner plans them: pass trees= with a "
                             "planner that has a TreeShape, or neither")
        if trees is not None and trees.chain is not session:
            raise ValueError("the tree session must grow on the round's chain session (TreeDraftSession(chain=...))")
        self.session, self.trees, self.options, self.stats, self.planner = session, trees, options, stats, planner
        self.sources = LookupSources(options.prompt_lookup_num_tokens, options.prompt_lookup_min_ngram,
                                     options.max_matching_ngram_size, suffix)
        self.eos_token_ids, self.collect_draft_tokens = eos_token_ids, collect_draft_tokens
        # draft_plan="adl": the drafter's K from smoothed accepted lengths (DiffuSpec's ADL), else None.
        self.adaptive_length = (AdaptiveDraftLength(k_min=1, k_max=options.num_assistant_tokens)
                                if options.draft_plan == "adl" else None)

    @property
    def max_draft_tokens(self) -> int:
        """The longest draft a round may make: the planner's cap, the fixed tree's depth, or K."""
        if self.planner is not None:
            return self.options.auto_max_assistant_tokens
        return self.trees.depth if self.trees is not None else self.options.num_assistant_tokens

    def begin(self, input_ids: torch.Tensor) -> None:
        """Start a generate() call on the prompt `[1, N]` (one read of the prompt when a lookup source is on)."""
        self.sources.begin(input_ids)

    # -- the contract: features, propose, learn, share_costs, finish ------------------------------------------
    def hidden_state_selection(self):
        return self.session.drafter.hidden_state_selection()

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.session.drafter.select_target_hidden(hidden_states)

    def share_costs(self, rows: int) -> None:
        """In a batch of `rows` active rows: price this row's rounds as its share of the batch's verify forward."""
        share_costs(self.planner, rows)

    def finish(self) -> None:
        """A batch row is done (LookupSources.finish)."""
        self.sources.finish()

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, room: int) -> Draft:
        """The round's draft continuing `input_ids` `[1, N]`: `Draft.token_ids` `[1, k]`, 0 <= k <= `room`
        (k = 0: verify the target's own token only), `Draft.plan` what was chosen. `target_hidden`
        `[1, >=T_new, F]`: the drafter's features of the last verification pass (ChainDraftSession.draft)."""
        self.sources.read(input_ids)
        budget = min(self.max_draft_tokens, room)
        if budget < 1:
            return self._empty(input_ids)
        if self.planner is None and self.trees is not None:  # the configured tree, every round
            draft = self._tree_draft(input_ids, target_hidden, RoundPlan("tree", budget))
        elif self.planner is None:
            if self.adaptive_length is not None:
                budget = min(budget, self.adaptive_length.length)
            draft = self._fixed_draft(input_ids, target_hidden, budget, room)
        else:
            draft = self._planned_draft(input_ids, target_hidden, room)
        draft = self._end_at_eos(draft)
        if self.collect_draft_tokens and draft.token_ids.shape[1] and not draft.looked_up and draft.tree is None:
            self.stats.draft_token_ids.append(draft.token_ids[0])
        return draft

    def learn(self, draft: Draft, committed_ids: torch.Tensor, num_accepted: int,
              accepted_nodes: list[int] | None = None) -> None:
        """Record the verified outcome of `draft`: `committed_ids` `[1, N']` now ends with the accepted drafts and
        the target's own token. `accepted_nodes` (a tree round): the accepted nodes, from which what a chain would
        have done there (DraftTree.greedy_chain_outcome) is read, which the chain's table learns too (one more read
        of N ints, the tree's parents, in a round whose verification already reads its path)."""
        plan, num_drafted = draft.plan, draft.token_ids.shape[1]
        tree_outcome = None
        if self.planner is not None and draft.tree is not None and accepted_nodes is not None and plan.source == "tree":
            tree_outcome = draft.tree.greedy_chain_outcome(accepted_nodes)
        self.sources.read(committed_ids)
        source = plan.source if num_drafted else "none"
        self.stats.record(num_drafted, num_accepted, looked_up=source not in ("drafter", "tree", "none"),
                          source=source)
        if self.adaptive_length is not None and source == "drafter":
            self.adaptive_length.record(num_drafted, num_accepted)
        if self.planner is not None:
            self.planner.record(plan, num_drafted, num_accepted)
            self.sources.learn(self.planner, plan, num_drafted, num_accepted)
            if tree_outcome is not None:
                self.planner.record_chain_outcome(*tree_outcome)
        committed = committed_ids[0, -(num_accepted + 1) :]  # the target's tokens at draft positions 0..n
        self.stats.record_shortlists(draft.shortlists, committed)

    # -- the sources ------------------------------------------------------------------------------------------
    def _fixed_draft(self, input_ids, target_hidden, budget: int, room: int) -> Draft:
        """`draft_plan="fixed"`: a suffix-cache or prompt-lookup draft when there is one (the drafter may veto
        it), else `budget` drafter tokens."""
        found = self.sources.first_found(room, self.options.suffix_cache_num_tokens)
        session, veto = self.session, self.options.prompt_lookup_veto
        # The veto compares the copy's first token on the host (the copy is host ids): no read of the device.
        if found is not None and veto < 1.0 and session.overrules(input_ids, target_hidden, found[1][0], veto):
            self.stats.lookup_vetoes += 1
            found = None
        if found is not None:
            draft = session.lookup_draft(input_ids, target_hidden, as_ids(found[1], input_ids)[None])
        else:
            draft = session.draft(input_ids, target_hidden, budget)
        return replace(draft, plan=RoundPlan(found[0] if draft.looked_up else "drafter", draft.token_ids.shape[1]))

    def _planned_draft(self, input_ids, target_hidden, room: int) -> Draft:
        """`draft_plan="auto"`: the planner picks the drafter, a lookup source or nothing."""
        # Each source offers a copy as long as it matches, up to LONGEST_COPY: the planner's measured costs and
        # learnt acceptance decide how much of it to draft, not the options' fixed lengths (those bound "fixed").
        candidates, drafts = self.sources.offers(min(room, LONGEST_COPY))
        plan = self.planner.plan_round(candidates, room)
        if plan.source == "none":
            self.session.defer_verified(input_ids, target_hidden)  # the drafter absorbs them when next needed
            return replace(self._empty(input_ids), plan=plan)
        if plan.source == "tree":
            return self._tree_draft(input_ids, target_hidden, plan)
        if plan.source != "drafter":
            # Only the chosen source's ids go to the device: one upload of a few ids.
            plan, copy = self.sources.take(plan, drafts[plan.source])
            return replace(self.session.lookup_draft(input_ids, target_hidden, as_ids(copy, input_ids)[None]),
                           plan=plan)
        # A probe drafts exactly its length (the planner would cut it to nothing); others stop when the planner says.
        rule = ProbeDrafting() if plan.probe else self.planner
        capped = plan.probe or self.session.defer_host_decisions
        cap = plan.num_tokens if capped else min(self.planner.max_draft_tokens, room)
        draft = self.session.draft(input_ids, target_hidden, cap, rule=rule)
        return replace(draft, plan=replace(plan, confidences=tuple(draft.confidences)))

    def _tree_draft(self, input_ids, target_hidden, plan: RoundPlan) -> Draft:
        """An EAGLE-2 tree grown to the plan's depth (a cap: EAGLE-2 keeps the best-scored nodes, which may stop
        short of it) with the node count the planner priced (tests/test_planned_trees.py)."""
        tree = self.trees.draft_tree(input_ids, target_hidden, max_depth=plan.num_tokens)
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree,
                     shortlists=self.trees.shortlists_of_last_draft, plan=plan)

    # -- the end of a round -----------------------------------------------------------------------------------
    @staticmethod
    def _empty(input_ids: torch.Tensor) -> Draft:
        return Draft(token_ids=input_ids.new_empty((1, 0)), logits=None)

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
