"""Tree decoding: EAGLE-2 draft trees through `generate()`'s `custom_generate` hook.

    from hf_dynaspec import tree_generate
    out = model.generate(**inputs, custom_generate=tree_generate, drafter=assistant, max_new_tokens=128)

Each round the drafter grows a tree from the target's hidden states of the last pass and the public loop
(hf_dynaspec.generation.public_loop.run_rounds) verifies it in one target forward. With the assistant's
`draft_plan="fixed"` every round drafts the configured tree; with `"auto"` each round is the planner's choice
(hf_dynaspec.drafting.round.SpeculationRound): a tree cut to the depth that pays, a chain, a lookup draft or
nothing, priced by this machine's measured costs.

Legend: L sequence length, N tree nodes, V vocabulary, D target hidden.
"""

from __future__ import annotations

import torch

from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.public_loop import check_public_inputs, decode, is_batched, verify_kernel_for
from hf_dynaspec.generation.rounds import build_round
from hf_dynaspec.stats import start_stats


@torch.no_grad()
def tree_generate(
    model,
    input_ids: torch.Tensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    drafter=None,
    tree_top_k: int | None = None,
    tree_depth: int | None = None,
    tree_total_tokens: int | None = None,
    **model_kwargs,
):
    """`custom_generate` callable: speculative decoding with EAGLE-2 draft trees and tree verification (every
    round the configured tree with `draft_plan="fixed"`; the planner's choice among trees of any depth up to
    `tree_depth`, chains and lookup drafts with `"auto"`).

    `drafter`: a DynaSpecAssistant for `model` (named `drafter` because generate() keeps `assistant_model`
    for its own assisted mode). `tree_top_k`, `tree_depth`, `tree_total_tokens` override the assistant's
    drafting options (`assistant.generation_config`). Returns the sequences `[1, L]`, or a
    `GenerateDecoderOnlyOutput` with `return_dict_in_generate`.
    """
    if drafter is None:
        raise ValueError(
            "tree_generate needs the assistant: model.generate(..., custom_generate=tree_generate, drafter=assistant)"
        )
    assistant = ensure_attached(drafter, model, argument="drafter")
    check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs)
    # A validated copy: options set one by one since loading (assistant.generation_config.X = ...) are checked here.
    options = assistant.generation_config.with_options(
        tree_top_k=tree_top_k, tree_depth=tree_depth, tree_total_tokens=tree_total_tokens)
    stats = start_stats(assistant)  # one set for the call (a batch: every row's rounds)
    batch_row = is_batched(input_ids, model_kwargs)

    def rounds_for(prompt_ids, processors):  # "auto": each round planned (a tree of the depth that pays, a chain,
        # a lookup, none); "fixed": the configured tree every round
        return build_round(model, assistant, options, prompt_ids, processors, stats=stats,
                           do_sample=bool(generation_config.do_sample), draws_drafts=False, with_trees=True,
                           batch_row=batch_row)

    with verify_kernel_for(model, options):  # before build_round: the planner's costs are measured with it
        return decode(model, input_ids, logits_processor, stopping_criteria, generation_config, rounds_for,
                      model_kwargs)


def parse_tree_shape(text: str | None) -> dict:
    """"TOPK,DEPTH,TOTAL" (command lines) -> `tree_top_k`, `tree_depth`, `tree_total_tokens` (empty when None)."""
    if text is None:
        return {}
    try:
        top_k, depth, total = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--tree takes three integers TOPK,DEPTH,TOTAL (e.g. 4,4,12), got {text!r}") from None
    if min(top_k, depth, total) < 1:
        raise ValueError(f"--tree values must be positive, got {text!r}")
    return {"tree_top_k": top_k, "tree_depth": depth, "tree_total_tokens": total}
