"""Inputs to `generate()` that assisted decoding cannot honour exactly: refused with the reason and the fix.

Called by the chain candidate generator (hf_dynaspec.modeling.assistant) before the first round; tree decoding has its
own, stricter checks (hf_dynaspec.generation.public_loop).
"""

from __future__ import annotations

import torch


def check_prompt_ids(input_ids: torch.Tensor, vocab_size: int) -> None:
    """Refuse prompt ids outside the target's vocabulary `[0, vocab_size)`, naming the likely cause (another
    tokenizer), instead of torch's "index out of range in self" from deep inside the embedding (or, on a GPU, a
    device-side assert that poisons the process). One host read of the prompt's smallest and largest id per
    generate() call."""
    if not input_ids.numel():
        return
    low, high = torch.stack([input_ids.min(), input_ids.max()]).tolist()
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(
            f"the prompt holds token id {bad}, outside the target's vocabulary of {vocab_size} ids (0..{vocab_size - 1}): "
            "it was tokenized with another model's tokenizer. Tokenize with the target's own tokenizer "
            "(AutoTokenizer.from_pretrained(<the target's path>))."
        )


def check_attention_mask(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> None:
    """Refuse a mask that is not the tokenizer's: 0/1 as integers or bools, one entry per prompt token. A float
    mask (an additive -inf / 0 mask, or probabilities) would be read as "padding wherever 0" by one part of the
    call and as weights by another; a mask of another shape fails deep inside attention or is ignored."""
    if attention_mask is None:
        return
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise ValueError(f"attention_mask must hold 0/1 as integers or bools, got {attention_mask.dtype}: pass the "
                         "tokenizer's attention_mask as it is, or attention_mask.long() for a 0/1 float mask")
    if attention_mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids "
                         f"{tuple(input_ids.shape)}: pass the mask the tokenizer returned with these ids (one entry "
                         "per token, 1 for a real token, 0 for padding)")


def check_chain_inputs(input_ids: torch.Tensor, generation_config, model_kwargs: dict,
                       vocab_size: int | None = None) -> None:
    """Raise ValueError for a generate() call that chain drafting would not decode exactly as asked (with
    `vocab_size`, the target's, the prompt's ids are checked against it too)."""
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"DynaSpecAssistant with model.generate(assistant_model=...) drafts for one sequence at a time "
            f"(transformers' assisted decoding supports batch size 1); got batch size {input_ids.shape[0]}. "
            "For a batch of left-padded prompts use the public route, which decodes each row at its own pace: "
            "model.generate(**inputs, custom_generate=speculative_generate, drafter=assistant) (trees=True for trees)."
        )
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: generate() needs at least one input token (e.g. the tokenizer's "
                         "BOS token) to condition on")
    # None: unset in a GenerationConfig built by hand, i.e. the default of 1.
    if (generation_config.num_beams or 1) != 1 or (generation_config.num_return_sequences or 1) != 1:
        raise ValueError(
            f"assisted decoding is greedy or sampled decoding of one sequence; got num_beams="
            f"{generation_config.num_beams}, num_return_sequences={generation_config.num_return_sequences}. "
            "Beam search would silently become greedy search: drop the assistant for beam search, or set "
            "num_beams=1 and num_return_sequences=1."
        )
    if getattr(generation_config, "assistant_ensemble_weight", None) is not None:
        raise ValueError(
            "assistant_ensemble_weight relaxes verification towards the drafter's distribution, so the output no "
            "longer follows the target's (transformers documents it as biased). hf-dynaspec is lossless by "
            "design: drop assistant_ensemble_weight."
        )
    attention_mask = model_kwargs.get("attention_mask")
    check_attention_mask(input_ids, attention_mask)
    if attention_mask is not None and not bool(attention_mask.all()):
        raise ValueError(
            "model.generate(assistant_model=...) does not support padded inputs (the attention_mask has zeros); "
            "pass the prompt without padding, or decode padded batches with custom_generate=speculative_generate, "
            "drafter=assistant."
        )
    if vocab_size is not None:
        check_prompt_ids(input_ids, vocab_size)
