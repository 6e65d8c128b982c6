"""`chain_generate`: chain drafting through generate()'s public `custom_generate` hook, no private API.

    from hf_dynaspec import chain_generate
    out = model.generate(**inputs, custom_generate=chain_generate, drafter=assistant)

Each round is the `assistant_model=` route's round (hf_dynaspec.drafting.round.SpeculationRound: the drafter,
prompt lookup, the suffix cache, the confidence stop and `draft_plan="auto"`, as the assistant's options say),
verified as a tree of one branch by the public loop (hf_dynaspec.generation.public_loop.run_rounds). Its drafts are
point-mass proposals (the drafter's most likely tokens, lookup tokens), which the tree verifier accepts by
recursive rejection: greedy output identical to plain `generate()`, sampling exact (tests/test_chain_generate.py).
It is also the fallback for a transformers release that moves the private method the `assistant_model=` route
wraps (hf_dynaspec.generation.hook).

Legend: L sequence length, K draft tokens.
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.lookup import RequestView
from hf_dynaspec.drafting.planner import share_costs
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.drafting.tree_structure import DraftTree
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.candidate_generator import build_round
from hf_dynaspec.generation.public_loop import check_public_inputs, decode, is_batched, verify_kernel_for
from hf_dynaspec.stats import start_stats


@torch.no_grad()
def chain_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                   **model_kwargs):
    """`custom_generate` callable: chain speculative decoding with `drafter` (a DynaSpecAssistant), drafting as
    `drafter.generation_config` says. A batch of left-padded prompts decodes each row at its own pace
    (hf_dynaspec.generation.batched_loop). Returns the sequences `[B, L]`, or a `GenerateDecoderOnlyOutput` with
    `return_dict_in_generate`."""
    if drafter is None:
        raise ValueError(
            "chain_generate needs the assistant: model.generate(..., custom_generate=chain_generate, drafter=assistant)"
        )
    assistant = ensure_attached(drafter, model, argument="drafter")
    check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs)
    options = assistant.generation_config
    options.validate_options()  # options set one by one since loading are checked here
    stats = start_stats(assistant)  # one set for the call, every row's rounds recorded in it
    batch_row = is_batched(input_ids, model_kwargs)

    def drafts_for(prompt_ids, processors):
        return ChainDrafts(build_round(model, assistant, options, prompt_ids, processors, stats=stats,
                                       do_sample=bool(generation_config.do_sample), draws_drafts=False,
                                       batch_row=batch_row))

    with verify_kernel_for(model, options):  # before build_round: the planner's costs are measured with it
        return decode(model, assistant, input_ids, logits_processor, stopping_criteria, generation_config, drafts_for,
                      model_kwargs)


class ChainDrafts:
    """`run_rounds`' drafts: the round's chain as a tree of one branch, or the round's tree (tree_generate's
    planner)."""

    def __init__(self, speculation: SpeculationRound):
        self.round = speculation

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, max_depth: int) -> DraftTree:
        draft = self.round.draft(input_ids, target_hidden, room=max(max_depth, 0))
        if draft.tree is not None:
            return draft.tree
        return chain_tree(input_ids[0, -1:], draft.token_ids[0])

    def share_costs(self, rows: int) -> None:
        """In a batch of `rows` active rows: price this row's rounds as its share of the batch's verify forward."""
        share_costs(self.round.planner, rows)

    def finish(self) -> None:
        """A batch row is done: its output joins the suffix cache's shared index (a single call's joins at the
        next call's start)."""
        if isinstance(self.round.suffix, RequestView):
            self.round.suffix.end_request()

    def learn(self, input_ids: torch.Tensor, tree: DraftTree, num_accepted: int, path) -> None:
        # A tree round (only a planner drafts one here) also tells what a chain would have done: one more read of
        # N ints, the tree's parents, in a round whose verification already reads its accepted path.
        outcome = tree.greedy_chain_outcome(path.nodes[:num_accepted]) if self.round.plan.source == "tree" else None
        self.round.learn(input_ids, num_accepted, tree_outcome=outcome)


def chain_tree(root: torch.Tensor, tokens: torch.Tensor) -> DraftTree:
    """The root `[1]` and K drafted tokens `[K]` as a tree of one branch (node i's parent is node i - 1), built
    on their device from host sizes only."""
    size = tokens.shape[0] + 1
    positions = torch.arange(size, device=tokens.device)
    return DraftTree(token_ids=torch.cat([root, tokens]), parents=positions - 1, depths=positions,
                     max_depth=size - 1)
