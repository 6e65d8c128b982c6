"""Tree decoding: our own decoding loop, plugged into `generate()` through `custom_generate`.

    from hf_dynaspec.tree import tree_generate
    out = model.generate(**inputs, custom_generate=tree_generate, drafter=assistant, max_new_tokens=128)
    # or: assistant.generate(model, **inputs, max_new_tokens=128)

`generate()` does the set-up (generation config, logits processors incl. sampling warpers, stopping
criteria, max length, an empty DynamicCache) and calls `tree_generate`. Each round: the drafter grows a tree
from the target's hidden states of the last pass, the target reads the whole tree in one forward (tree mask,
tree positions), the accepted path is chosen (hf_dynaspec.tree.verify), the cache is compacted to that path,
and the committed tokens are checked one by one against the stopping criteria, so that output stops exactly
where plain `generate()` stops.

Legend: L sequence length, N tree nodes, V vocabulary, D target hidden.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache
from transformers.generation.utils import GenerateDecoderOnlyOutput

from hf_dynaspec.stats import DraftStats
from hf_dynaspec.tree.drafting import TreeDraftSession
from hf_dynaspec.tree.structure import tree_attention_mask, tree_position_ids
from hf_dynaspec.tree.verify import accept_path, check_tree_cache, compact_cache


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
    """`custom_generate` callable: speculative decoding with EAGLE-2 draft trees and tree verification.

    `drafter`: a DynaSpecAssistant for `model` (named `drafter` because generate() keeps `assistant_model`
    for its own assisted mode). `tree_top_k`, `tree_depth`, `tree_total_tokens` override the assistant's
    config. Returns the sequences `[1, L]`, or a `GenerateDecoderOnlyOutput` with `return_dict_in_generate`.
    """
    assistant = _checked_assistant(model, drafter)
    _check_inputs(input_ids, generation_config, model_kwargs)
    config = assistant.config
    cache = model_kwargs.get("past_key_values")
    if cache is None:
        cache = DynamicCache(config=model.config)
    check_tree_cache(cache)
    if cache.get_seq_length():
        raise ValueError("tree decoding starts from an empty cache; pass the whole prompt without past_key_values")

    session = TreeDraftSession(
        assistant.drafter, config.vocab_size, head=assistant.runtime_head(),
        top_k=config.tree_top_k if tree_top_k is None else tree_top_k,
        depth=config.tree_depth if tree_depth is None else tree_depth,
        total_tokens=config.tree_total_tokens if tree_total_tokens is None else tree_total_tokens,
    )
    stats = assistant.stats = DraftStats()
    hidden_selection = assistant.target_hidden_state_selection()
    do_sample = bool(generation_config.do_sample)
    want_scores, want_logits = generation_config.output_scores, generation_config.output_logits
    scores, raw_logits = [], []

    prompt_length = input_ids.shape[1]
    out = model(
        input_ids=input_ids,
        position_ids=torch.arange(prompt_length, device=input_ids.device)[None],
        past_key_values=cache,
        use_cache=True,
        output_hidden_states=hidden_selection,
        logits_to_keep=1,
    )
    logits = out.logits[:, -1].float()
    processed = logits_processor(input_ids, logits) if len(logits_processor) else logits
    if do_sample:
        token = torch.multinomial(processed.softmax(dim=-1), 1)
    else:
        token = processed.argmax(dim=-1, keepdim=True)
    input_ids = torch.cat([input_ids, token], dim=1)
    scores.append(processed)
    raw_logits.append(logits)
    target_hidden = assistant.select_target_hidden(out.hidden_states)  # [1, L, D]
    done = bool(stopping_criteria(input_ids, processed).any())

    while not done:
        past_length = input_ids.shape[1] - 1  # the root (last token) is not in the cache yet
        room = generation_config.max_length - input_ids.shape[1]
        tree = session.propose_tree(input_ids, target_hidden, max_depth=room - 1)
        out = model(
            input_ids=tree.token_ids[None],
            position_ids=tree_position_ids(tree, past_length),
            attention_mask=tree_attention_mask(tree, past_length, model.dtype),
            past_key_values=cache,
            use_cache=True,
            output_hidden_states=hidden_selection,
        )
        path = accept_path(tree, out.logits[0].float(), input_ids, logits_processor, do_sample)
        kept = [0] + path.nodes
        compact_cache(cache, past_length, kept)
        target_hidden = assistant.select_target_hidden(out.hidden_states)[:, kept]
        new_tokens = torch.cat([tree.token_ids[path.nodes], input_ids.new_tensor([path.next_token])])
        extended = torch.cat([input_ids, new_tokens[None]], dim=1)
        # The stopping criteria see each committed prefix (a view), as they would one token at a time.
        committed = 0
        for processed, logits in zip(path.scores, path.logits):
            committed += 1
            scores.append(processed)
            raw_logits.append(logits)
            if stopping_criteria(extended[:, : input_ids.shape[1] + committed], processed).any():
                done = True
                break
        input_ids = extended[:, : input_ids.shape[1] + committed]
        # A stop inside the path commits fewer tokens than were accepted: count what was committed.
        stats.record(len(tree) - 1, committed - 1)
        stats.record_shortlists(session.shortlists_of_last_draft, new_tokens)

    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(
            sequences=input_ids,
            scores=tuple(scores) if want_scores else None,
            logits=tuple(raw_logits) if want_logits else None,
            past_key_values=cache if generation_config.use_cache else None,
        )
    return input_ids


def _checked_assistant(model, drafter):
    from hf_dynaspec.assistant import AssistantMismatchError, DynaSpecAssistant

    if drafter is None:
        raise ValueError(
            "tree_generate needs the assistant: model.generate(..., custom_generate=tree_generate, drafter=assistant)"
        )
    if not isinstance(drafter, DynaSpecAssistant):
        raise TypeError(f"drafter must be a DynaSpecAssistant, got {type(drafter).__name__}")
    if drafter.target is None:
        drafter.attach(model)
    elif drafter.target is model:
        drafter._follow_target_dtype_and_device(model)
    else:
        raise AssistantMismatchError(
            "This assistant is attached to a different target model object. Call `assistant.attach(model)` first."
        )
    return drafter


def _check_inputs(input_ids: torch.Tensor, generation_config, model_kwargs: dict) -> None:
    if generation_config.num_beams != 1 or generation_config.num_return_sequences != 1:
        raise ValueError("tree decoding is greedy or sampled decoding: set num_beams=1 and num_return_sequences=1")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: generate() needs at least one input token (e.g. the tokenizer's "
                         "BOS token) to condition on")
    if input_ids.shape[0] != 1:
        raise ValueError(
            f"tree decoding drafts for one sequence at a time; got batch size {input_ids.shape[0]}. "
            "Call generate once per prompt (padding-aware tree masks for batches are not implemented)."
        )
    attention_mask = model_kwargs.get("attention_mask")
    if attention_mask is not None and not bool(attention_mask.all()):
        raise ValueError("tree decoding does not support padded inputs (the attention_mask has zeros)")
    if not generation_config.use_cache:
        raise ValueError("tree decoding needs the KV cache: do not pass use_cache=False")
    if generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError("tree decoding does not return attentions or hidden states; drop output_attentions / "
                         "output_hidden_states")


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
