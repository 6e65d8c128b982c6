"""`speculative_generate`: the public `custom_generate` entry, no private transformers API.

    from hf_dynaspec import speculative_generate
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=assistant)              # chains
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=assistant, trees=True)  # EAGLE-2
    out = model.generate(**inputs, custom_generate=speculative_generate, drafter=heads)        # Medusa, diffusion LM

`chain_generate` (`trees=False`) and `tree_generate` (`trees=True`) are the same entry under their own names;
`medusa_generate` takes a lattice source's per-call `medusa_*` options.

Each round of an EAGLE drafter is the `assistant_model=` route's round (hf_dynaspec.drafting.round.EagleRound:
the drafter, prompt lookup, the suffix cache, the confidence stop and `draft_plan="auto"`, as the assistant's options
say). With `trees=True` the drafter grows EAGLE-2 trees: every round the configured tree under `draft_plan="fixed"`,
under "auto" the planner's choice (a tree cut to the depth that pays, a chain, a lookup draft or nothing). The one
loop (hf_dynaspec.generation.batched_loop; a prompt is a batch of one) verifies each draft as a tree, a chain being a
tree of one branch. Drafts are point-mass proposals (the drafter's most likely tokens, lookup tokens), accepted by
recursive rejection: greedy output identical to plain `generate()`, sampling exact (tests/test_chain_generate.py,
tests/test_tree.py). It is also the fallback for a transformers release that moves the private method the
`assistant_model=` route wraps (hf_dynaspec.generation.hook).
"""

from __future__ import annotations

import torch

from hf_dynaspec.drafting.diffusion import DiffusionDrafter
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.batched_loop import run_batched_rounds
from hf_dynaspec.generation.medusa import medusa_generate
from hf_dynaspec.generation.public_loop import check_public_inputs, verify_kernel_for
from hf_dynaspec.generation.rounds import build_round
from hf_dynaspec.modeling.medusa import MedusaAssistant
from hf_dynaspec.stats import start_stats


@torch.no_grad()
def speculative_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                         trees: bool = False, tree_top_k: int | None = None, tree_depth: int | None = None,
                         tree_total_tokens: int | None = None, **model_kwargs):
    """`custom_generate` callable. `drafter`: a DynaSpecAssistant for `model` (named `drafter` because generate()
    keeps `assistant_model` for its own assisted mode), drafting as `drafter.generation_config` says; `trees`:
    EAGLE-2 trees instead of chains, `tree_top_k`, `tree_depth`, `tree_total_tokens` overriding its tree shape. A
    MedusaAssistant or a DiffusionDrafter goes to `medusa_generate`, the tree shape with it (`tree_depth` as its
    `num_assistant_tokens`); its other options go through `medusa_generate` itself. A batch of left-padded
    prompts decodes each row at its own pace. Returns the sequences `[B, L]`, or a `GenerateDecoderOnlyOutput` with
    `return_dict_in_generate`."""
    route = "tree_generate" if trees else "chain_generate"
    if drafter is None:
        raise ValueError(f"{route} needs the assistant: model.generate(..., custom_generate={route}, "
                         "drafter=assistant)")
    if isinstance(drafter, (MedusaAssistant, DiffusionDrafter)):  # the tree shape by the lattice options' names
        shape = dict(tree_top_k=tree_top_k, num_assistant_tokens=tree_depth, tree_total_tokens=tree_total_tokens)
        return medusa_generate(model, input_ids, logits_processor, stopping_criteria, generation_config,
                               drafter=drafter, **{k: v for k, v in shape.items() if v is not None}, **model_kwargs)
    assistant = ensure_attached(drafter, model, argument="drafter")
    batch = check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs)
    options = assistant.generation_config
    options.validate_options()  # options set one by one since loading (assistant.generation_config.X = ...)
    shape = dict(tree_top_k=tree_top_k, tree_depth=tree_depth, tree_total_tokens=tree_total_tokens)
    if any(value is not None for value in shape.values()):
        options = options.with_options(**shape)  # a validated copy for this call
    stats = start_stats(assistant)  # one set for the call (a batch: every row's rounds)

    def rounds_for(prompt_ids, processors):  # one prompt's rounds (a batch: one per row)
        return build_round(model, assistant, options, prompt_ids, processors, stats=stats,
                           do_sample=bool(generation_config.do_sample), draws_drafts=False, with_trees=trees,
                           batch_row=batch.padded)

    with verify_kernel_for(model, options):  # before build_round: the planner's costs are measured with it
        return run_batched_rounds(model, input_ids, batch, logits_processor, stopping_criteria, generation_config,
                                  rounds_for, model_kwargs, options.verify_round)


def chain_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                   **model_kwargs):
    """`speculative_generate` with chains: `custom_generate=chain_generate, drafter=assistant`."""
    return speculative_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter,
                                **model_kwargs)


def tree_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                  tree_top_k: int | None = None, tree_depth: int | None = None, tree_total_tokens: int | None = None,
                  **model_kwargs):
    """`speculative_generate` with EAGLE-2 trees: `custom_generate=tree_generate, drafter=assistant` (and
    `tree_top_k`, `tree_depth`, `tree_total_tokens` to override the assistant's tree shape)."""
    return speculative_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter,
                                trees=True, tree_top_k=tree_top_k, tree_depth=tree_depth,
                                tree_total_tokens=tree_total_tokens, **model_kwargs)


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
