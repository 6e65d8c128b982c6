"""Every target family the drafter mirrors (hf_dynaspec.modeling.families): llama (Llama-3 style), qwen2, qwen3,
mistral, phi3 and gemma3_text (Gemma-3). Per family, tiny random targets: greedy identity through both routes into generate(), and the
exact enumeration of a sampled chain round (the output distribution equals the target's to 1e-6)."""

from __future__ import annotations

import pytest
import torch
from conftest import CONFIGS, VOCAB, imitating_assistant, one_layer_target, plain_generate, tiny_target
from test_enumeration import TOLERANCE, chain_error
from test_enumeration import VOCAB as ENUMERATION_VOCAB

from hf_dynaspec import DynaSpecAssistant, speculative_generate

FAMILIES = list(CONFIGS)
# Mistral-7B-v0.2/v0.3 and Phi-3 attend over the whole context (sliding_window null); a sliding window is a
# different cache, which tree decoding refuses (tested below) and chain drafting leaves to transformers.
# Gemma-3 always has sliding layers: a window longer than any test sequence makes them attend fully (the window itself
# is tested below).
FULL_ATTENTION = {"sliding_window": None}
LONG_WINDOW = {"sliding_window": 512}


def full_attention(family: str) -> dict:
    return LONG_WINDOW if family == "gemma3_text" else FULL_ATTENTION


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_is_identical_for_every_family_through_both_routes(family):
    target = tiny_target(family, **full_attention(family))
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    assert assistant.config.layer_family == family == assistant.config.target_model_type
    for seed in range(2):
        input_ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        chained = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant,
                                  max_new_tokens=20)
        tree = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                               drafter=assistant, max_new_tokens=20, tree_top_k=2, tree_depth=3, tree_total_tokens=5)
        assert torch.equal(chained, expected) and torch.equal(tree, expected), seed


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sampled_chain_round_keeps_the_target_distribution_for_every_family(family):
    target = one_layer_target(family, seed=5, vocab_size=ENUMERATION_VOCAB, **full_attention(family))
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2)
    error, outcomes = chain_error(target, assistant, "temperature")
    assert {len(tokens) for tokens in outcomes} == {1, 2, 3}  # drafts rejected at once, midway and never
    assert error < TOLERANCE, error


def test_a_sliding_window_target_is_exact_by_chain_and_refused_by_trees_with_the_reason():
    target = tiny_target("mistral", sliding_window=4)
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    input_ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(0))
    expected = plain_generate(target, input_ids, max_new_tokens=16)  # past the window: the sliding cache matters
    chained = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant,
                              max_new_tokens=16)
    assert torch.equal(chained, expected)
    with pytest.raises(ValueError, match="Sliding-window.*chain drafting"):
        target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                        drafter=assistant, max_new_tokens=4)


def gemma_target(window: int, **overrides):
    """A tiny Gemma-3 text model with tied embeddings (as published) and a sliding `window` on five of six layers."""
    return tiny_target("gemma3_text", sliding_window=window, tie_word_embeddings=True, **overrides)


def test_gemma3_trees_are_exact_while_the_window_never_slides_and_refused_once_it_would():
    window, prompt = 16, 7
    target = gemma_target(window)
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    input_ids = torch.randint(0, VOCAB, (1, prompt), generator=torch.Generator().manual_seed(4))
    fits = dict(max_new_tokens=window - prompt, tree_top_k=2, tree_depth=3, tree_total_tokens=6)
    expected = plain_generate(target, input_ids, max_new_tokens=window - prompt)
    tree = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                           drafter=assistant, **fits)
    assert torch.equal(tree, expected)
    with pytest.raises(ValueError, match="Sliding-window"):  # one token more and the window would slide
        target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                        drafter=assistant, **{**fits, "max_new_tokens": window - prompt + 1})


def test_gemma3_window_matters_at_these_sizes_so_the_refusal_is_needed(monkeypatch):
    """Past the window, full-attention layers would give other tokens: without the refusal trees would be wrong
    (so the test above is not vacuous), while chain drafting, on transformers' own sliding cache, stays exact."""
    from hf_dynaspec.generation import tree_verify as loop_module

    target = gemma_target(4)
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    input_ids = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(0))
    expected = plain_generate(target, input_ids, max_new_tokens=16)
    chained = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant,
                              max_new_tokens=16)
    assert torch.equal(chained, expected)
    monkeypatch.setattr(loop_module, "_window_never_slides", lambda cache, max_length: True)
    wrong = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                            drafter=assistant, max_new_tokens=16, tree_top_k=2, tree_depth=3, tree_total_tokens=6)
    assert not torch.equal(wrong, expected)


def test_gemma3_drafter_mirrors_the_targets_layer_and_round_trips(tmp_path):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3DecoderLayer

    target = gemma_target(512)
    assistant = DynaSpecAssistant.from_target(target)
    layer = assistant.drafter.layers[0]
    assert type(layer) is Gemma3DecoderLayer and isinstance(layer.input_layernorm, torch.nn.Identity)
    assert layer.self_attn.scaling == target.config.query_pre_attn_scalar ** -0.5 != target.config.head_dim ** -0.5
    assert layer.self_attn.sliding_window is None  # the drafter's layer attends to its whole cache
    last = target.model.layers[-1]
    for name in ("self_attn.q_norm.weight", "post_feedforward_layernorm.weight", "mlp.gate_proj.weight"):
        assert torch.equal(layer.get_parameter(name), last.get_parameter(name)), name
    # The global layers' rotary table (theta 1e6), not the local one (1e4).
    assert assistant.config.rope_parameters["rope_theta"] == target.config.rope_parameters["full_attention"]["rope_theta"]
    assistant.save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    input_ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(1))
    hidden = torch.randn(1, 8, target.config.hidden_size, generator=torch.Generator().manual_seed(2))
    positions = torch.arange(8)[None]
    outputs = [a.drafter.step(a.drafter.embed(input_ids), hidden, positions, None, None) for a in (assistant, loaded)]
    assert torch.equal(*outputs)


def test_a_soft_capped_gemma_and_a_multimodal_gemma_are_refused_naming_the_fix():
    from hf_dynaspec.errors import UnsupportedTargetError

    with pytest.raises(UnsupportedTargetError, match="final_logit_softcapping"):
        DynaSpecAssistant.from_target(gemma_target(512, final_logit_softcapping=30.0))
    from hf_dynaspec.modeling.families import family_classes

    with pytest.raises(UnsupportedTargetError, match="Gemma3ForCausalLM"):
        family_classes("gemma3")
