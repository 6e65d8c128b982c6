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

from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.public_loop import check_public_inputs, decode, is_batched, verify_kernel_for
from hf_dynaspec.generation.rounds import build_round
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

    def rounds_for(prompt_ids, processors):  # one prompt's rounds (a batch: one per row)
        return build_round(model, assistant, options, prompt_ids, processors, stats=stats,
                           do_sample=bool(generation_config.do_sample), draws_drafts=False, batch_row=batch_row)

    with verify_kernel_for(model, options):  # before build_round: the planner's costs are measured with it
        return decode(model, input_ids, logits_processor, stopping_criteria, generation_config, rounds_for,
                      model_kwargs)
