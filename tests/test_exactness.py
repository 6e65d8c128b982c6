"""The near-tie check used for bf16 runs."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, tiny_target

from hf_dynaspec import check_exactness, first_divergence


def test_first_divergence():
    a = torch.tensor([1, 2, 3, 4])
    assert first_divergence(a, a.clone()) is None
    assert first_divergence(a, torch.tensor([1, 2, 9, 4])) == 2
    assert first_divergence(a, torch.tensor([1, 2])) == 2
    assert first_divergence(torch.tensor([[5]]), torch.tensor([6])) == 0


def test_margin_is_the_fp32_logit_gap_on_the_common_prefix():
    target = tiny_target("qwen2", seed=1)
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(0))
    reference = target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8)[0, 6:]
    with torch.no_grad():
        logits = target(torch.cat([prompt[0], reference[:3]])[None]).logits[0, -1]
    runner_up = int(logits.topk(2).indices[1])
    candidate = reference.clone()
    candidate[3] = runner_up
    gap = float(logits[reference[3]] - logits[runner_up])
    assert check_exactness(target, prompt, reference, reference.clone()) is None
    divergence = check_exactness(target, prompt, reference, candidate, tolerance=gap + 1e-3)
    assert divergence.position == 3 and divergence.candidate_token == runner_up
    assert abs(divergence.margin - gap) < 1e-4 and divergence.near_tie
    assert not check_exactness(target, prompt, reference, candidate, tolerance=gap - 1e-3).near_tie
    # An output that merely stops early has no token pair to compare: never a near-tie.
    assert not check_exactness(target, prompt, reference, reference[:5]).near_tie


def test_bf16_model_is_restored_bit_exactly():
    target = tiny_target("llama").to(torch.bfloat16)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    prompt = torch.tensor([[1, 2, 3]])
    divergence = check_exactness(target, prompt, torch.tensor([4, 5]), torch.tensor([4, 6]))
    assert divergence.margin is not None
    after = target.state_dict()
    assert all(after[k].dtype == torch.bfloat16 and torch.equal(after[k], before[k]) for k in before)


def test_every_tensor_gets_its_own_dtype_back():
    """A bf16 model may keep buffers in float32 (rotary inv_freq, as from_pretrained leaves it); the fp32 check
    must not round them to bf16 on the way back (a blanket `model.to(bf16)` did)."""
    target = tiny_target("llama").to(torch.bfloat16)
    rotary = target.model.rotary_emb
    rotary.inv_freq = rotary.inv_freq.float() + 1e-4  # fp32 values bf16 cannot hold
    kept = rotary.inv_freq.clone()
    check_exactness(target, torch.tensor([[1, 2, 3]]), torch.tensor([4, 5]), torch.tensor([4, 6]))
    assert rotary.inv_freq.dtype == torch.float32 and torch.equal(rotary.inv_freq, kept)
    assert all(p.dtype == torch.bfloat16 for p in target.parameters())


def test_a_bf16_divergence_is_rescored_in_float32():
    """The margin of a bf16 target's divergence is its float32 re-score (the bf16 weights upcast), never a bf16
    forward's: bf16's rounding of the logits would be carried into the margin that decides a near-tie."""
    import copy

    target = tiny_target("qwen2", seed=3).to(torch.bfloat16)
    upcast = copy.deepcopy(target).float()  # the same bf16 values, computed in float32
    prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        fp32_logits = upcast(prompt).logits[0, -1].float()
        bf16_logits = target(prompt).logits[0, -1].float()
    first, second = (int(i) for i in fp32_logits.topk(2).indices)
    fp32_margin = float(fp32_logits[first] - fp32_logits[second])
    bf16_margin = float(bf16_logits[first] - bf16_logits[second])
    # The case the rule is about: bf16's rounding moves this margin by more than the check's precision.
    assert abs(bf16_margin - fp32_margin) > 1e-3, (bf16_margin, fp32_margin)
    divergence = check_exactness(target, prompt, torch.tensor([first]), torch.tensor([second]))
    assert divergence.margin == pytest.approx(fp32_margin, abs=1e-5), (divergence.margin, fp32_margin, bf16_margin)
    assert all(p.dtype == torch.bfloat16 for p in target.parameters())
