"""fp32 shadow weights for multi-token verification: same results up to rounding, only where intended."""

from __future__ import annotations

import torch

from conftest import imitating_assistant, one_layer_target, tiny_target
from hf_dynaspec import cpu_verify, check_exactness


def test_shadow_path_is_taken_only_for_a_few_rows_and_matches_the_native_product():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    assert cpu_verify.enable(linear, max_rows=4) == 1 and cpu_verify.is_enabled(linear)
    old_weight = linear.weight.detach().clone()
    with torch.no_grad():
        for rows in (1, 2, 4, 5):
            x = torch.randn(1, rows, 64).to(torch.bfloat16)
            expected = (x.float() @ linear.weight.float().T + linear.bias.float()).to(torch.bfloat16)
            torch.testing.assert_close(linear(x), expected, rtol=1e-2, atol=1e-2)
        # The shadow is a copy: after a weight change, only 2..max_rows-row inputs still see the old weight.
        linear.weight.mul_(-1)
        stale = {rows: torch.allclose(linear(torch.ones(rows, 64, dtype=torch.bfloat16)).float(),
                                      (torch.ones(rows, 64) @ old_weight.float().T + linear.bias.float()), atol=0.05)
                 for rows in (1, 2, 4, 5)}
    assert stale == {1: False, 2: True, 4: True, 5: False}
    x = torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True)
    linear(x).sum().backward()  # with autograd on, the module's own (differentiable) path runs
    torch.testing.assert_close(x.grad.float(), linear.weight.float().sum(0).expand(2, 64), rtol=1e-2, atol=1e-2)
    cpu_verify.disable(linear)
    assert not cpu_verify.is_enabled(linear) and "forward" not in linear.__dict__


def test_assisted_generation_with_shadows_stays_exact_up_to_near_ties():
    target = one_layer_target("qwen2", seed=4).to(torch.bfloat16)
    assistant = imitating_assistant(target, noise=0.3, num_draft_tokens=4)
    assert cpu_verify.enable(target) > 0
    try:
        for seed in range(4):
            prompt = torch.randint(0, 97, (1, 7), generator=torch.Generator().manual_seed(seed))
            ones = torch.ones_like(prompt)
            plain = target.generate(prompt, attention_mask=ones, max_new_tokens=20, do_sample=False)
            assisted = target.generate(prompt, attention_mask=ones, max_new_tokens=20, do_sample=False,
                                       assistant_model=assistant)
            divergence = check_exactness(target, prompt, plain[0, 7:], assisted[0, 7:])
            assert divergence is None or divergence.near_tie, divergence
        assert assistant.stats.accepted > 0
    finally:
        cpu_verify.disable(target)


def test_fp32_models_are_left_alone():
    model = tiny_target("llama")
    assert cpu_verify.enable(model) == 0 and not cpu_verify.is_enabled(model)
