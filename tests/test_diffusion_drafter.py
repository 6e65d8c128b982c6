"""A diffusion LM as a lattice source (hf_dynaspec.drafting.diffusion): no diffusion LM is reachable here, so a
tiny random bidirectional masked LM (BERT) stands in. It checks the interface (one forward over the context and K
mask tokens, its logits at the masks), greedy identity and exact sampling; acceptance of a real diffusion
drafter (Dream-7B with a Qwen2.5 target) is not measured."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, plain_generate, tiny_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint
from test_enumeration import PROMPT, TOLERANCE, processors
from test_enumeration import VOCAB as SMALL_VOCAB
from transformers import BertConfig, BertForMaskedLM

from hf_dynaspec import DiffusionDrafter, speculative_generate
from hf_dynaspec.errors import AssistantMismatchError


def tiny_masked_lm(vocab: int, seed: int = 0) -> BertForMaskedLM:
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=256)
    return BertForMaskedLM(config).eval()


def test_the_lattice_is_the_models_logits_at_the_mask_tokens():
    model = tiny_masked_lm(VOCAB)
    drafter = DiffusionDrafter(model, mask_token_id=VOCAB - 1, block_size=4, max_context=5)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])
    logits, columns = drafter.lattice_logits(ids, None, depth=3)
    expected = model(input_ids=torch.tensor([[1, 5, 9, 2, 6, VOCAB - 1, VOCAB - 1, VOCAB - 1]])).logits[0, -3:]
    assert columns is None
    torch.testing.assert_close(logits, expected)


@pytest.mark.parametrize("draft", ["chain", "cps", "tree"])
def test_greedy_diffusion_drafting_is_identical(draft):
    target = tiny_target("llama", seed=8)
    drafter = DiffusionDrafter(tiny_masked_lm(VOCAB, seed=1), mask_token_id=0, block_size=4)
    for seed in range(2):
        prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, prompt, max_new_tokens=30, do_sample=False)
        got = target.generate(prompt, custom_generate=speculative_generate, drafter=drafter, max_new_tokens=30,
                              do_sample=False, lattice_draft=draft)
        assert torch.equal(got, expected)
    assert drafter.stats.passes_by_source.get("diffusion", 0) > 0


def test_sampled_diffusion_drafting_is_exact():
    target = tiny_target("llama", seed=5, vocab_size=SMALL_VOCAB)
    drafter = DiffusionDrafter(tiny_masked_lm(SMALL_VOCAB, seed=2), mask_token_id=SMALL_VOCAB - 1, block_size=3)
    prompt = torch.tensor([PROMPT])

    def call():
        out = target.generate(prompt, custom_generate=speculative_generate, drafter=drafter, max_new_tokens=4,
                              do_sample=True, temperature=0.7, top_k=0, lattice_draft="tree",
                              tree_total_tokens=5)
        return tuple(out[0, len(PROMPT):].tolist())

    paths = enumerate_paths(call, max_paths=4 * SMALL_VOCAB**4)
    oracle = TargetOracle(target, processors("temperature"))
    assert max_error(outcome_distribution(paths), target_joint(oracle, PROMPT, 4)) < TOLERANCE


def test_a_diffusion_model_with_another_vocabulary_is_refused():
    target = tiny_target("llama", seed=8)
    drafter = DiffusionDrafter(tiny_masked_lm(VOCAB - 10), mask_token_id=0)
    with pytest.raises(AssistantMismatchError, match="share the target's tokenizer"):
        drafter.attach(target)
    with pytest.raises(ValueError, match="mask_token_id"):
        DiffusionDrafter(tiny_masked_lm(VOCAB), mask_token_id=VOCAB)
