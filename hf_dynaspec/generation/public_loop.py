"""The public routes' decoding loop (`tree_generate`, `chain_generate`): our own loop, plugged into `generate()`
through `custom_generate`.

`generate()` does the set-up (generation config, logits processors incl. sampling warpers, stopping criteria, max
length, an empty DynamicCache) and calls the route, which calls `run_rounds` with its drafts. Each round: the
drafts propose a tree (a chain is a tree of one branch) from the target's hidden states of the last pass, the
target reads the whole tree in one forward (tree mask, tree positions), the accepted path is chosen
(hf_dynaspec.generation.tree_verify), the cache is compacted to that path, and the committed tokens are checked
one by one against the stopping criteria, so that output stops exactly where plain `generate()` stops.

Legend: L sequence length, N tree nodes, V vocabulary, D target hidden.
"""

from __future__ import annotations

import contextlib

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

import hf_dynaspec.sampling as sampling
from hf_dynaspec.drafting.contract import DraftingRound, TargetFeatures
from hf_dynaspec.drafting.tree_structure import tree_attention_mask, tree_position_ids
from hf_dynaspec.generation.batched_loop import check_batch, run_batched_rounds
from hf_dynaspec.generation.checks import check_prompt_ids
from hf_dynaspec.generation.costs.verify_kernel import target_verify_kernel
from hf_dynaspec.generation.forward_args import cache_kwargs
from hf_dynaspec.generation.tree_verify import accept_path, compact_cache, empty_tree_cache


def verify_kernel_for(model, options):
    """The context a public route runs its call in: as on the `assistant_model=` route (hf_dynaspec.generation.hook),
    a planned call (`draft_plan="auto"`, `target_verify_kernel="auto"`) routes the target's few-row verification
    forwards through the CPU rows kernel where it was measured faster (calibration.target_verify_kernel), and the
    call's costs are measured with it; otherwise nothing changes."""
    if options.draft_plan == "auto" and options.target_verify_kernel == "auto":
        return target_verify_kernel(model)
    return contextlib.nullcontext()


def check_public_inputs(model, assistant, input_ids, generation_config, model_kwargs: dict) -> None:
    """What the public routes (tree_generate, chain_generate) refuse, with the fix."""
    _check_attention(model)
    _check_inputs(input_ids, generation_config, model_kwargs)
    check_prompt_ids(input_ids, assistant.config.vocab_size)


def is_batched(input_ids: torch.Tensor, model_kwargs: dict) -> bool:
    """Several prompts, or one padded prompt: decoded by hf_dynaspec.generation.batched_loop."""
    attention_mask = model_kwargs.get("attention_mask")
    return input_ids.shape[0] != 1 or (attention_mask is not None and not bool(attention_mask.all()))


def decode(model, input_ids, logits_processor, stopping_criteria, generation_config, make_drafts, model_kwargs: dict):
    """The public routes' entry: one prompt through `run_rounds`, a batch through `run_batched_rounds`;
    `make_drafts(prompt_ids [1, L_b], processors)` builds the rounds of one prompt (a `DraftingRound`,
    hf_dynaspec.drafting.contract; `processors`: the prompt's own)."""
    if not is_batched(input_ids, model_kwargs):
        return run_rounds(model, input_ids, logits_processor, stopping_criteria, generation_config,
                          make_drafts(input_ids, logits_processor), model_kwargs)
    mask = check_batch(input_ids, model_kwargs.get("attention_mask"), generation_config)
    return run_batched_rounds(model, input_ids, mask, logits_processor, stopping_criteria, generation_config,
                              make_drafts, model_kwargs)


def run_rounds(model, input_ids, logits_processor, stopping_criteria, generation_config, drafts: DraftingRound,
               model_kwargs: dict):
    """The public routes' loop: prefill, then rounds of `drafts.propose` (a `Draft`, verified as a tree: a chain
    is a tree of one branch), one target forward over the tree, the accepted path, the cache compacted to it, the
    committed tokens checked against the stopping criteria; `drafts.learn` sees each outcome."""
    cache = empty_tree_cache(model, model_kwargs, generation_config.max_length)
    hidden_selection = drafts.hidden_state_selection()
    do_sample = bool(generation_config.do_sample)
    # Per-token rows are kept only when the caller asked for them: each is a full-vocabulary fp32 row (0.6-1 MiB at
    # 150k-260k tokens), GBs on the device over a long output.
    returned = bool(generation_config.return_dict_in_generate)
    scores = [] if returned and generation_config.output_scores else None
    raw_logits = [] if returned and generation_config.output_logits else None

    input_ids, processed, logits, target_hidden = _prefill(model, drafts, input_ids, cache, logits_processor,
                                                           do_sample)
    _keep_rows(scores, [processed])
    _keep_rows(raw_logits, [logits])
    done = bool(stopping_criteria(input_ids, processed).any())

    while not done:
        past_length = input_ids.shape[1] - 1  # the root (last token) is not in the cache yet
        room = generation_config.max_length - input_ids.shape[1]
        tree = drafts.propose(input_ids, target_hidden, max(room - 1, 0)).as_tree(input_ids[0, -1:])
        out = model(
            input_ids=tree.token_ids[None],
            position_ids=tree_position_ids(tree, past_length),
            attention_mask=tree_attention_mask(tree, past_length, model.dtype),
            **cache_kwargs(model, cache),
            use_cache=True,
            output_hidden_states=hidden_selection,
        )
        path = accept_path(tree, out.logits[0].float(), input_ids, logits_processor, do_sample)
        compact_cache(cache, past_length, path.kept_index)
        target_hidden = drafts.select_target_hidden(out.hidden_states)[:, path.kept_index]
        input_ids, committed, done = _commit(input_ids, path.new_tokens, path, stopping_criteria, scores, raw_logits)
        # A stop inside the path commits fewer tokens than were accepted: count what was committed.
        drafts.learn(input_ids, committed - 1, path.nodes[: committed - 1])

    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(
            sequences=input_ids,
            scores=tuple(scores) if scores is not None else None,
            logits=tuple(raw_logits) if raw_logits is not None else None,
            past_key_values=cache if generation_config.use_cache else None,
        )
    return input_ids


def _keep_rows(kept: list | None, rows: list) -> None:
    if kept is not None:
        kept.extend(rows)


def _commit(input_ids, new_tokens, path, stopping_criteria, scores: list | None, raw_logits: list | None):
    """Append the accepted tokens `[n]` to `input_ids` `[1, L]` up to the first whose prefix meets the stopping
    criteria (they see each committed prefix, as they would one token at a time); -> (input_ids, tokens committed,
    stopped). The n checks are stacked and read back at once: one host sync, not one per token. The committed
    tokens' rows join `scores` / `raw_logits` where those are kept (None: not asked for)."""
    extended = torch.cat([input_ids, new_tokens[None]], dim=1)
    length = input_ids.shape[1]
    stops = torch.stack([stopping_criteria(extended[:, : length + i + 1], processed).any()
                         for i, processed in enumerate(path.scores)]).tolist()
    committed = stops.index(True) + 1 if True in stops else len(stops)
    _keep_rows(scores, path.scores[:committed])
    _keep_rows(raw_logits, path.logits[:committed])
    return extended[:, : length + committed], committed, True in stops


def _prefill(model, features: TargetFeatures, input_ids, cache, logits_processor, do_sample):
    """The target's pass over the prompt `[1, L]`: -> (input_ids with its token `[1, L+1]`, processed scores and
    raw logits `[1, V]` of that token, the drafter's features of the prompt `[1, L, F]`)."""
    prompt_length = input_ids.shape[1]
    out = model(
        input_ids=input_ids,
        position_ids=torch.arange(prompt_length, device=input_ids.device)[None],
        **cache_kwargs(model, cache),
        use_cache=True,
        output_hidden_states=features.hidden_state_selection(),
        logits_to_keep=1,
    )
    logits = out.logits[:, -1].float()
    processed = logits_processor(input_ids, logits) if len(logits_processor) else logits
    if do_sample:
        token = sampling.sample(processed.softmax(dim=-1))
    else:
        token = processed.argmax(dim=-1, keepdim=True)
    target_hidden = features.select_target_hidden(out.hidden_states)
    return torch.cat([input_ids, token], dim=1), processed, logits, target_hidden


# Attention implementations known to apply a 4-D additive mask as given. Everything else is refused: flash
# kernels (built in, or from the Hub such as "kernels-community/flash-attn2") take no arbitrary mask and would
# attend causally over the flattened tree, and an implementation not known here cannot be trusted to apply one.
TREE_MASK_ATTENTION = ("eager", "sdpa")


def _check_attention(model) -> None:
    """Tree verification hands the target a 4-D additive mask (each node sees its ancestors only); refuse an
    attention implementation that is not known to apply it (wrong logits, silently, otherwise)."""
    implementation = str(getattr(model.config, "_attn_implementation", None) or "sdpa")
    if implementation not in TREE_MASK_ATTENTION:
        raise ValueError(
            f"tree decoding needs an attention implementation that applies a 4-D tree mask; this target uses "
            f"{implementation!r}. Load it with attn_implementation='sdpa' (or 'eager'), or draft a chain with "
            "assistant_model=assistant, which flash attention serves."
        )


def _check_inputs(input_ids: torch.Tensor, generation_config, model_kwargs: dict) -> None:
    if generation_config.num_beams != 1 or generation_config.num_return_sequences != 1:
        raise ValueError("tree decoding is greedy or sampled decoding: set num_beams=1 and num_return_sequences=1")
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: generate() needs at least one input token (e.g. the tokenizer's "
                         "BOS token) to condition on")
    if is_batched(input_ids, model_kwargs):
        check_batch(input_ids, model_kwargs.get("attention_mask"), generation_config)
    if not generation_config.use_cache:
        raise ValueError("tree decoding needs the KV cache: do not pass use_cache=False")
    if generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError("tree decoding does not return attentions or hidden states; drop output_attentions / "
                         "output_hidden_states")
