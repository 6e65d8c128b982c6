"""Every target family the drafter mirrors (hf_dynaspec.modeling.families): llama (Llama-3 style), qwen2, qwen3,
mistral and phi3. Per family, tiny random targets: greedy identity through both routes into generate(), and the
exact enumeration of a sampled chain round (the output distribution equals the target's to 1e-6)."""

from __future__ import annotations

import pytest
import torch

from conftest import CONFIGS, VOCAB, imitating_assistant, one_layer_target, plain_generate, tiny_target
from test_enumeration import TOLERANCE, chain_error
from test_enumeration import VOCAB as ENUMERATION_VOCAB

from hf_dynaspec import DynaSpecAssistant, tree_generate

FAMILIES = list(CONFIGS)
# Mistral-7B-v0.2/v0.3 and Phi-3 attend over the whole context (sliding_window null); a sliding window is a
# different cache, which tree decoding refuses (tested below) and chain drafting leaves to transformers.
FULL_ATTENTION = {"sliding_window": None}


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_is_identical_for_every_family_through_both_routes(family):
    target = tiny_target(family, **FULL_ATTENTION)
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    assert assistant.config.layer_family == family == assistant.config.target_model_type
    for seed in range(2):
        input_ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        chained = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), assistant_model=assistant,
                                  max_new_tokens=20)
        tree = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=tree_generate,
                               drafter=assistant, max_new_tokens=20, tree_top_k=2, tree_depth=3, tree_total_tokens=5)
        assert torch.equal(chained, expected) and torch.equal(tree, expected), seed


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sampled_chain_round_keeps_the_target_distribution_for_every_family(family):
    target = one_layer_target(family, seed=5, vocab_size=ENUMERATION_VOCAB, **FULL_ATTENTION)
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
        target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=tree_generate,
                        drafter=assistant, max_new_tokens=4)
