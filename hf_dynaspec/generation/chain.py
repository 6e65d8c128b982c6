"""`chain_generate`: chain drafting through generate()'s public `custom_generate` hook, no private API.

    from hf_dynaspec import chain_generate
    out = model.generate(**inputs, custom_generate=chain_generate, drafter=assistant)

A chain of K draft tokens is a tree of width 1 and depth K, so this runs the tree loop
(hf_dynaspec.generation.tree) with `tree_top_k=1`, `tree_depth=tree_total_tokens=K`: the same verification
rules (tests/test_enumeration.py enumerates them exactly), the same output as plain `generate()` under greedy
decoding. It is the fallback for a transformers release that moves the private method the
`assistant_model=` route wraps (hf_dynaspec.generation.hook). What it does not do: prompt lookup, the
confidence stop, the suffix cache and planned rounds (`draft_plan` is not read: every round drafts
`num_assistant_tokens`); the `assistant_model=` route has them.
"""

from __future__ import annotations

from hf_dynaspec.generation.tree import tree_generate


def chain_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=None,
                   **model_kwargs):
    """`custom_generate` callable: chain speculative decoding with `drafter` (a DynaSpecAssistant).

    K is `drafter.generation_config.num_assistant_tokens` (as for the `assistant_model=` route). Returns what `tree_generate`
    returns (sequences `[1, L]`, or a `GenerateDecoderOnlyOutput`)."""
    if drafter is None:
        raise ValueError(
            "chain_generate needs the assistant: model.generate(..., custom_generate=chain_generate, drafter=assistant)"
        )
    options = drafter.generation_config
    options.validate_options()  # before num_assistant_tokens becomes tree_depth (its error names the option set)
    unsupported = [name for name in ("prompt_lookup_num_tokens", "assistant_confidence_threshold")
                   if getattr(options, name)]
    if unsupported:
        raise ValueError(f"chain_generate does not implement {unsupported}: set them to 0 on the assistant's "
                         "generation_config, or use model.generate(..., assistant_model=assistant), which has them")
    depth = options.num_assistant_tokens
    return tree_generate(model, input_ids, logits_processor, stopping_criteria, generation_config, drafter=drafter,
                         tree_top_k=1, tree_depth=depth, tree_total_tokens=depth, **model_kwargs)
