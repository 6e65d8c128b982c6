"""Multi-token verification on CPU (bf16 kernel, fp32 shadows): same results up to rounding, only where intended."""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, tiny_target

from hf_dynaspec import check_exactness
from hf_dynaspec.kernels.verify_rows import loader as cpu_rows
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify

needs_kernel = pytest.mark.skipif(not cpu_rows.available(), reason="needs x86-64 with AVX2/FMA and a C compiler")


ISAS = ["avx2", pytest.param("avx512_bf16", marks=pytest.mark.skipif(
    cpu_rows.isa() != "avx512_bf16", reason="needs a CPU with AVX-512 BF16"))]


@needs_kernel
@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("out_features,in_features", [(48, 64), (37, 29), (100, 8), (17, 1), (20, 95)])
def test_kernel_matches_a_float64_product_for_every_row_count(out_features, in_features, isa, monkeypatch):
    # Row counts cover whole blocks of eight (AVX2) and sixteen (AVX-512), remainders of each size and several
    # blocks; feature counts cover the vector loops (8, 16 and 32 wide), their tails and a weight-row tile that is
    # not full. Each form is forced in turn: the AVX-512 BF16 one takes bf16 inputs, AVX2 widens them.
    monkeypatch.setattr(cpu_rows, "isa", lambda: isa)
    generator = torch.Generator().manual_seed(out_features)
    weight = torch.randn(out_features, in_features, generator=generator).to(torch.bfloat16)
    weight32 = torch.randn(out_features, in_features, generator=generator)
    for rows in (1, 2, 3, 5, 8, 9, 15, 16, 17, 21, 33):
        x = torch.randn(rows, in_features, generator=generator).to(torch.bfloat16)
        expected = x.double() @ weight.double().T
        got = cpu_rows.bf16_rows_matmul(x, weight)
        assert got.dtype == torch.float32 and got.shape == (rows, out_features)
        torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=1e-5)
        x32 = torch.randn(rows, in_features, generator=generator)
        got32 = cpu_rows.f32_rows_matmul(x32, weight32)
        torch.testing.assert_close(got32.double(), x32.double() @ weight32.double().T, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="features"):
        cpu_rows.bf16_rows_matmul(torch.ones(2, in_features + 1), weight)
    with pytest.raises(ValueError, match="bf16 weight"):
        cpu_rows.bf16_rows_matmul(torch.ones(2, in_features), weight.float())


@pytest.mark.parametrize("method", [pytest.param("kernel", marks=needs_kernel), "shadow"])
def test_rerouted_path_is_taken_only_for_a_few_rows_and_matches_the_native_product(method, monkeypatch):
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48).to(torch.bfloat16)
    kernel_rows = []
    kernel = cpu_rows.bf16_rows_matmul
    monkeypatch.setattr(cpu_rows, "bf16_rows_matmul", lambda x, w: kernel_rows.append(len(x)) or kernel(x, w))
    assert cpu_verify.enable(linear, max_rows=4, method=method) == 1
    assert cpu_verify.enabled_method(linear) == method
    old_weight = linear.weight.detach().clone()
    with torch.no_grad():
        for rows in (1, 2, 4, 5):
            x = torch.randn(1, rows, 64).to(torch.bfloat16)
            expected = (x.float() @ linear.weight.float().T + linear.bias.float()).to(torch.bfloat16)
            torch.testing.assert_close(linear(x), expected, rtol=1e-2, atol=1e-2)
        assert kernel_rows == ([2, 4] if method == "kernel" else [])
        # After an in-place weight change no row count may still see the old weight: the kernel reads the weight
        # itself, and a shadow copy is remade when the weight's version moves.
        linear.weight.mul_(-1)
        stale = {rows: torch.allclose(linear(torch.ones(rows, 64, dtype=torch.bfloat16)).float(),
                                      (torch.ones(rows, 64) @ old_weight.float().T + linear.bias.float()), atol=0.05)
                 for rows in (1, 2, 4, 5)}
    assert stale == {1: False, 2: False, 4: False, 5: False}
    x = torch.randn(2, 64, dtype=torch.bfloat16, requires_grad=True)
    linear(x).sum().backward()  # with autograd on, the module's own (differentiable) path runs
    torch.testing.assert_close(x.grad.float(), linear.weight.float().sum(0).expand(2, 64), rtol=1e-2, atol=1e-2)
    cpu_verify.disable(linear)
    assert not cpu_verify.is_enabled(linear) and "forward" not in linear.__dict__


@needs_kernel
def test_min_rows_sends_one_row_inputs_to_the_kernel_too(monkeypatch):
    torch.manual_seed(1)
    linear = torch.nn.Linear(40, 24).to(torch.bfloat16)
    kernel_rows = []
    kernel = cpu_rows.bf16_rows_matmul
    monkeypatch.setattr(cpu_rows, "bf16_rows_matmul", lambda x, w: kernel_rows.append(len(x)) or kernel(x, w))
    cpu_verify.enable(linear, max_rows=3, method="kernel", min_rows=1)
    with torch.no_grad():
        for rows in (1, 3, 4):
            x = torch.randn(rows, 40).to(torch.bfloat16)
            expected = (x.float() @ linear.weight.float().T + linear.bias.float()).to(torch.bfloat16)
            torch.testing.assert_close(linear(x), expected, rtol=1e-2, atol=1e-2)
    assert kernel_rows == [1, 3]
    with pytest.raises(ValueError, match="min_rows"):
        cpu_verify.enable(linear, max_rows=3, method="kernel", min_rows=0)


@pytest.mark.parametrize("method", [pytest.param("kernel", marks=needs_kernel), "shadow"])
def test_assisted_generation_with_cpu_verification_stays_exact_up_to_near_ties(method):
    target = one_layer_target("qwen2", seed=4).to(torch.bfloat16)
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=4)
    assert cpu_verify.enable(target, method=method) > 0
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


def test_fp32_models_are_left_alone_and_methods_are_checked(monkeypatch):
    model = tiny_target("llama")
    # Nothing to reroute (fp32 here; a model on a GPU likewise): the kernel must not even be built.
    monkeypatch.setattr(cpu_rows, "available", lambda: pytest.fail("the kernel was built for a model it cannot serve"))
    assert cpu_verify.enable(model) == 0 and not cpu_verify.is_enabled(model)
    with pytest.raises(ValueError, match="one of"):
        cpu_verify.enable(model, method="fast")


@needs_kernel
def test_a_bf16_target_routes_every_drafter_step_through_the_kernel_including_the_prompt_pass(monkeypatch):
    # The drafter's first step of a generate() call reads the whole prompt; PyTorch's bf16 product on AVX2
    # CPUs costs about one weight pass per row there, the kernel one per eight rows. A row cap on the drafter's
    # routing (it once had the default 16) sends long prompts back to the slow path.
    target = one_layer_target("qwen2", seed=5).to(torch.bfloat16)
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=2)
    assert not cpu_verify.is_enabled(assistant.drafter)  # attach() only binds: the runtime picks kernels
    kernel_rows = []
    kernel = cpu_rows.bf16_rows_matmul
    monkeypatch.setattr(cpu_rows, "bf16_rows_matmul", lambda x, w: kernel_rows.append(len(x)) or kernel(x, w))
    prompt = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(0))
    ones = torch.ones_like(prompt)
    plain = target.generate(prompt, attention_mask=ones, max_new_tokens=12, do_sample=False)
    assisted = target.generate(prompt, attention_mask=ones, max_new_tokens=12, do_sample=False,
                               assistant_model=assistant)
    assert cpu_verify.enabled_method(assistant.drafter) == "kernel"
    assert not cpu_verify.is_enabled(target)  # the target is the user's: generate() leaves it alone
    # The prompt pass pairs the features of prompt positions 0..39 with the next tokens (the last one is the
    # prefill's token): 40 rows through each of the drafter's 8 Linear modules (fc, q/k/v/o, gate/up/down);
    # later steps take 1..3 rows each.
    assert kernel_rows[:8] == [40] * 8
    assert max(kernel_rows[8:]) <= 3 and min(kernel_rows) >= 1
    divergence = check_exactness(target, prompt, plain[0, 40:], assisted[0, 40:])
    assert divergence is None or divergence.near_tie, divergence


PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) { FILE *f = fopen("%s", "w"); if (f) fclose(f); }
int hf_dynaspec_has_avx2_fma(void) { return 0; }
"""


@needs_kernel
def test_a_planted_library_is_loaded_only_from_a_private_directory(tmp_path, monkeypatch):
    """Someone who can write the kernel cache could plant a library under the computable name: it must not run
    unless the directory and the file are the current user's and nobody else can write them."""
    import os
    import subprocess

    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path / "home"))
    compiler = cpu_rows._compiler()
    library = cpu_rows.cached_library_path(compiler)
    library.parent.mkdir(parents=True)
    marker = tmp_path / "planted-code-ran"
    source = tmp_path / "planted.c"
    source.write_text(PLANTED % marker)
    subprocess.run([compiler, "-shared", "-fPIC", str(source), "-o", str(library)], check=True)

    def load():
        cpu_rows._library.cache_clear()
        return cpu_rows.available()

    try:
        for directory_mode, file_mode in [(0o777, 0o755), (0o733, 0o755), (0o700, 0o666), (0o700, 0o620)]:
            os.chmod(library.parent, directory_mode)
            os.chmod(library, file_mode)
            with pytest.warns(UserWarning, match="can be written by another user"):
                assert load(), "the real kernel, compiled afresh into a private directory, must load"
            assert not marker.exists(), (oct(directory_mode), oct(file_mode))
        # The control: private directory, private file. It is loaded (so the test above could see a load).
        os.chmod(library.parent, 0o700)
        os.chmod(library, 0o755)
        assert not load() and marker.exists()
    finally:
        cpu_rows._library.cache_clear()
