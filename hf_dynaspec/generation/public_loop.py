"""The checks of the one public entry, `speculative_generate` (chains, trees, lattice sources), plugged into
`generate()` through `custom_generate`.

`generate()` does the set-up (generation config, logits processors incl. sampling warpers, stopping criteria, max
length, an empty DynamicCache) and calls the route, which hands its drafts to the one loop
(hf_dynaspec.generation.batched_loop: a single prompt is a batch of one). Each round: the drafts propose a tree (a
chain is a tree of one branch) from the target's hidden states of the last pass, the target reads every row's tree
in one forward (tree mask, tree positions), each accepted path is chosen (hf_dynaspec.generation.tree_verify), the
cache is compacted to it, and the committed tokens are checked one by one against the stopping criteria, so that
output stops exactly where plain `generate()` stops.
"""

from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

from hf_dynaspec.generation.checks import check_attention_mask, check_prompt_ids
from hf_dynaspec.generation.costs.verify_kernel import target_verify_kernel


def verify_kernel_for(model, options):
    """The context a public route runs its call in: as on the `assistant_model=` route (hf_dynaspec.generation.hook),
    a planned call (`draft_plan="auto"`, `target_verify_kernel="auto"`) sends the target's few-row verification
    forwards through the CPU rows kernel where it was measured faster (calibration.target_verify_kernel), and the
    call's costs are measured with it; otherwise nothing changes. The static round compiles its forward, which
    the kernel's calls would break: inductor chooses its kernels there."""
    if options.draft_plan == "auto" and options.target_verify_kernel == "auto" and options.verify_round == "eager":
        return target_verify_kernel(model)
    return contextlib.nullcontext()




def is_batched(input_ids: torch.Tensor, model_kwargs: dict) -> bool:
    """Several prompts, or one padded prompt: decoded by hf_dynaspec.generation.batched_loop."""
    attention_mask = model_kwargs.get("attention_mask")
    return input_ids.shape[0] != 1 or (attention_mask is not None and not bool(attention_mask.all()))


class Batch(NamedTuple):
    """The call's prompts, checked (`check_batch`): their `[B, L]` bool mask of real tokens and each one's length."""

    mask: torch.Tensor
    lengths: list[int]

    @property
    def padded(self) -> bool:
        """Several prompts, or one padded prompt."""
        return len(self.lengths) != 1 or self.lengths[0] != self.mask.shape[1]


def check_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, generation_config) -> Batch:
    """The prompts' mask and lengths, checked in one read of the device: left padding only, no empty row, no
    per-step outputs for a batch."""
    check_attention_mask(input_ids, attention_mask)
    mask = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    lengths = mask.sum(dim=1)
    # Left padding: each row's real tokens are its last `length` ones.
    positions = torch.arange(input_ids.shape[1], device=mask.device)[None]
    misplaced = (mask != (positions >= input_ids.shape[1] - lengths[:, None])).any()
    *lengths, misplaced = torch.cat([lengths, misplaced[None].long()]).tolist()  # the call's one read
    if 0 in lengths:
        raise ValueError("a prompt of the batch is empty (its attention_mask row is all zeros): every row needs at "
                         "least one token")
    if misplaced:
        raise ValueError("batched speculative decoding needs left-padded prompts: load the tokenizer with "
                         "padding_side='left' (tokenizer(prompts, padding=True, padding_side='left'))")
    if input_ids.shape[0] > 1 and (generation_config.output_scores or generation_config.output_logits):
        raise ValueError("per-step scores and logits are not returned for batches (rows advance at different "
                         "speeds); drop output_scores / output_logits, or call generate once per prompt")
    return Batch(mask, lengths)


# Attention implementations known to apply a 4-D additive mask as given. Everything else is refused: flash
# kernels (built in, or from the Hub such as "kernels-community/flash-attn2") take no arbitrary mask and would
# attend causally over the flattened tree, and an implementation not known here cannot be trusted to apply one.
TREE_MASK_ATTENTION = ("eager", "sdpa")


def check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs: dict) -> Batch:
    """What the public routes refuse, with the fix; -> the prompts' mask and lengths, checked (`check_batch`)."""
    # Tree verification hands the target a 4-D additive mask (each node sees its ancestors only): an attention
    # implementation not known to apply it would give wrong logits, silently.
    implementation = str(getattr(model.config, "_attn_implementation", None) or "sdpa")
    if implementation not in TREE_MASK_ATTENTION:
        raise ValueError(
            f"tree decoding needs an attention implementation that applies a 4-D tree mask; this target uses "
            f"{implementation!r}. Load it with attn_implementation='sdpa' (or 'eager'), or draft a chain with "
            "assistant_model=assistant, which flash attention serves."
        )
    if generation_config.num_beams != 1 or generation_config.num_return_sequences != 1:
        raise ValueError("tree decoding is greedy or sampled decoding: set num_beams=1 and num_return_sequences=1")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: generate() needs at least one input token (e.g. the tokenizer's "
                         "BOS token) to condition on")
    if not generation_config.use_cache:
        raise ValueError("tree decoding needs the KV cache: do not pass use_cache=False")
    if generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError("tree decoding does not return attentions or hidden states; drop output_attentions / "
                         "output_hidden_states")
    batch = check_batch(input_ids, model_kwargs.get("attention_mask"), generation_config)
    check_prompt_ids(input_ids, assistant.config.vocab_size)
    return batch
