"""`hf_dynaspec.fast_cpu`: plain generate() on the kernels measured fastest per row count, undone on exit, the same
greedy output; prepacked oneDNN weights where they are faster; and the rule that picks the kernels from costs."""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, plain_generate, tiny_target

import hf_dynaspec
from hf_dynaspec import check_exactness
from hf_dynaspec.generation.costs import verify_kernel
from hf_dynaspec.generation.costs.verify_kernel import NO_KERNELS, CpuKernels, kernels_from_costs
from hf_dynaspec.kernels.verify_rows import loader
from hf_dynaspec.kernels.verify_rows import packed as packed_weights
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

needs_kernel = pytest.mark.skipif(not loader.available(), reason="needs x86-64 with AVX2/FMA and a C compiler")
needs_packed = pytest.mark.skipif(not packed_weights.available(), reason="needs oneDNN with native bf16 (AMX/AVX-512 BF16)")


def counting(monkeypatch, model) -> list[tuple[str, int]]:
    """Record (path, rows) of every product over one of `model`'s weights through the kernel or packed weights."""
    weights = {m.weight.data_ptr() for m in model.modules() if isinstance(m, torch.nn.Linear)}
    calls = []
    for module, name in ((loader, "bf16_rows_matmul"), (loader, "f32_rows_matmul")):
        product = getattr(module, name)

        def counted(x, w, product=product, name=name):
            if w.data_ptr() in weights:
                calls.append((name, x.numel() // x.shape[-1]))
            return product(x, w)
        monkeypatch.setattr(module, name, counted)
    linear = packed_weights.linear

    def counted_packed(x, module, packed):
        calls.append(("packed", x.numel() // x.shape[-1]))
        return linear(x, module, packed)
    monkeypatch.setattr(packed_weights, "linear", counted_packed)
    return calls


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_token_steps_take_the_kernel_inside_and_nothing_outside(dtype, monkeypatch):
    """Measured faster at 1..9 rows: every decode step of plain generate() goes through the kernel (and the prefill
    of more rows does not); leaving the block restores PyTorch's kernels. float32 greedy output is identical."""
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels(kernel=(1, 9)))
    model = tiny_target("llama", seed=3).to(dtype)
    prompt = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    expected = plain_generate(model, prompt, max_new_tokens=20, do_sample=False)
    calls = counting(monkeypatch, model)
    with hf_dynaspec.fast_cpu(model, compile=False) as handle:  # the compiled steps: the next test
        assert handle.kernels == CpuKernels((1, 9)) and verify_rows_patch.is_enabled(model) and not handle.compiled
        out = plain_generate(model, prompt, max_new_tokens=20, do_sample=False)
    assert not verify_rows_patch.is_enabled(model)
    expected_kernel = "f32_rows_matmul" if dtype == torch.float32 else "bf16_rows_matmul"
    assert calls and {name for name, _ in calls} == {expected_kernel} and {rows for _, rows in calls} == {1}
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    # 19 one-token steps, and the prefill's LM head (generate() keeps only the last position's logits); the
    # prefill's other 12-row products stay on PyTorch.
    assert len(calls) == 19 * linears + 1
    if dtype == torch.float32:
        assert torch.equal(out, expected)
    calls.clear()
    plain_generate(model, prompt, max_new_tokens=5, do_sample=False)
    assert calls == []


@needs_kernel
def test_compiled_steps_run_the_kernel_inside_one_graph_and_decode_the_same(monkeypatch):
    """fast_cpu's default: generate() compiles its one-token steps (transformers' auto-compile over a static cache,
    told to on a CPU) with the rows kernel inside as an operator. The steps ran compiled (dynamo captured graphs),
    every one-token product still went through the kernel at one row, float32 greedy output equals plain
    PyTorch's, and leaving the block gives the model its own generation config back."""
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels(kernel=(1, 4)))
    model = tiny_target("llama", seed=3)
    config_before = (model.generation_config.cache_implementation, model.generation_config.compile_config)
    prompt = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(0))
    expected = plain_generate(model, prompt, max_new_tokens=12, do_sample=False)
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    calls = counting(monkeypatch, model)
    with hf_dynaspec.fast_cpu(model) as handle:
        assert handle.compiled
        out = plain_generate(model, prompt, max_new_tokens=12, do_sample=False)
        longer = plain_generate(model, prompt[:, :5], max_new_tokens=20, do_sample=False)  # another cache capacity
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["graph_break"]
    assert torch.equal(out, expected)
    assert torch.equal(longer, plain_generate(model, prompt[:, :5], max_new_tokens=20, do_sample=False))
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert {rows for _, rows in calls} == {1} and len(calls) == (11 + 19) * linears + 2
    assert (model.generation_config.cache_implementation, model.generation_config.compile_config) == config_before
    torch._dynamo.reset()


@needs_kernel
@needs_packed
def test_compiled_steps_on_packed_weights_call_onednn_as_one_operator(monkeypatch):
    """Where one-token steps go to prepacked oneDNN weights (how an AMX host may route them), the compiled step keeps
    oneDNN's product as one operator per layer (Inductor cannot lower it over the packed layout: the demo failed
    so), breaks no graph, and gives the eager routed step's logits."""
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels(packed=(1, 4)))
    model = tiny_target("qwen2", seed=2).to(torch.bfloat16)
    prompt = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(5))
    torch._dynamo.reset()
    counters = torch._dynamo.utils.counters
    counters.clear()
    with hf_dynaspec.fast_cpu(model) as handle:
        assert handle.compiled
        with torch.no_grad():  # the routed forwards are for inference
            explained = torch._dynamo.explain(model)(input_ids=prompt[:, :1])  # one row: the packed route
        assert explained.graph_break_count == 0, explained.break_reasons
        ops = {str(op) for graph in explained.ops_per_graph for op in graph}
        assert any("packed_linear" in op for op in ops) and not any("_linear_pointwise" in op for op in ops), ops
        counters.clear()
        out = plain_generate(model, prompt, max_new_tokens=6, do_sample=False)
        with torch.profiler.profile() as profile:
            plain_generate(model, prompt, max_new_tokens=2, do_sample=False)
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["graph_break"]
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert sum(e.name == "hf_dynaspec::packed_linear" for e in profile.events()) == linears  # the one step
    with hf_dynaspec.fast_cpu(model, compile=False):
        eager = plain_generate(model, prompt, max_new_tokens=6, do_sample=False)
    assert out.shape == eager.shape and (out == eager).float().mean() > 0.8  # bf16: a near-tie may flip late
    torch._dynamo.reset()


@needs_kernel
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rows_operator_compiles_without_a_graph_break_and_matches_its_kernel(dtype):
    """The routed Linear under `torch.compile`: the kernel is one opaque operator in one graph (a direct ctypes
    call breaks the graph), its fake gives the real shape and dtype (opcheck), and the
    compiled result equals the eager one."""
    from hf_dynaspec.kernels.verify_rows import op as rows_op

    generator = torch.Generator().manual_seed(4)
    layer = torch.nn.Linear(64, 48, bias=True).to(dtype)
    x = torch.randn(1, 3, 64, generator=generator).to(dtype)
    checks = torch.library.opcheck(torch.ops.hf_dynaspec.rows_matmul, (x[0], layer.weight.detach()),  # inference only
                                   raise_exception=False)
    assert all(result == "SUCCESS" for result in checks.values()), checks
    verify_rows_patch.enable(layer, min_rows=1, max_rows=9, method="kernel", float32=True)
    torch._dynamo.reset()
    with torch.no_grad():
        eager = layer(x)
        explained = torch._dynamo.explain(layer)(x)
        assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
        compiled = torch.compile(layer, fullgraph=True, dynamic=False)(x)
    torch.testing.assert_close(compiled, eager, atol=0, rtol=0)
    torch.testing.assert_close(rows_op.kernel(x[0], layer.weight).to(dtype) + layer.bias, eager[0],
                               atol=1e-2 if dtype == torch.bfloat16 else 1e-5, rtol=1e-2)


@needs_kernel
@needs_packed
def test_packed_weights_take_their_rows_and_match_pytorch(monkeypatch):
    """Kernel at one row, packed oneDNN weights at 2..9, PyTorch beyond: each forward goes where the kernels say,
    the packed product equals PyTorch's up to bf16 rounding, and the packed copies are made once and kept across
    calls until released."""
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels((1, 1), (2, 9)))
    model = tiny_target("qwen2", seed=2).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = {n: model(input_ids=ids[:, :n]).logits.float() for n in (1, 5, 12)}
    calls = counting(monkeypatch, model)
    packs = []
    pack = packed_weights.pack
    monkeypatch.setattr(packed_weights, "pack", lambda w: packs.append(w.shape) or pack(w))
    for _ in range(2):
        with hf_dynaspec.fast_cpu(model), torch.no_grad():
            got = {n: model(input_ids=ids[:, :n]).logits.float() for n in (1, 5, 12)}
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert sorted(set(calls)) == [("bf16_rows_matmul", 1), ("packed", 5)] and len(calls) == 2 * 2 * linears
    for n in (1, 5, 12):
        torch.testing.assert_close(got[n], reference[n], atol=0.05, rtol=0.02)
    assert len(packs) == linears  # packed on the first call only
    assert packed_weights.release(model) == linears and packed_weights.release(model) == 0


@needs_kernel
@needs_packed
def test_a_patched_model_serves_its_current_weights_on_every_path():
    """The packed copies follow the weight. An in-place load while patched gives what the model patched afresh
    gives, and check_exactness's float32 upcast of a patched bf16 target (the demo under `--cpu-verify auto`) runs
    on PyTorch's float32 product, never on the bf16 packed copy, and gives the unpatched model's margin."""
    model = tiny_target("qwen2", seed=3).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(2))
    prompt, reference, candidate = ids[:, :3], ids[0, 3:6], torch.cat([ids[0, 3:5], (ids[0, 5:6] + 1) % 97])
    unpatched = check_exactness(model, prompt, reference, candidate)
    verify_rows_patch.enable(model, min_rows=1, max_rows=1, method="kernel", float32=True, packed_rows=(2, 9))
    try:
        patched = check_exactness(model, prompt, reference, candidate)  # the one-row head: the float32 kernel
        assert (patched.position, patched.reference_token, patched.candidate_token) == (
            unpatched.position, unpatched.reference_token, unpatched.candidate_token)
        assert patched.margin == pytest.approx(unpatched.margin, abs=1e-5)
        with torch.no_grad():
            new_weights = {name: -p for name, p in model.state_dict().items()}
            model.load_state_dict(new_weights)  # copies in place: same storage, a new version
            got = model(input_ids=ids[:, :5]).logits
        verify_rows_patch.disable(model)
        packed_weights.release(model)
        verify_rows_patch.enable(model, min_rows=1, max_rows=1, method="kernel", float32=True, packed_rows=(2, 9))
        with torch.no_grad():
            assert torch.equal(got, model(input_ids=ids[:, :5]).logits)
    finally:
        verify_rows_patch.disable(model)
        packed_weights.release(model)


@needs_kernel
def test_the_commands_cpu_verify_auto_measures_once_and_reuses_the_answer(tmp_path, monkeypatch):
    """`--cpu-verify auto` (apply_cpu_verify: the demo, generate, bench) takes the kernels measured once on this
    machine, as fast_cpu does. A second run (a new process: the in-memory cache emptied) routes as the first did
    without measuring again, so its outputs round the same way; measured afresh, a noisy host could route (and
    round, and give a verdict) differently from run to run."""
    from hf_dynaspec.generation.costs import store

    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    measured = []
    monkeypatch.setattr(verify_kernel, "fastest_kernels", lambda target: measured.append(1) or CpuKernels((1, 3)))
    model = tiny_target("qwen2", seed=1).to(torch.bfloat16)
    for _ in range(2):
        monkeypatch.setattr(store, "MEMORY", {})
        assert verify_kernel.apply_cpu_verify(model, "auto") == "kernel:1-3"
        verify_rows_patch.disable(model)
    assert measured == [1]


@needs_kernel
def test_undo_and_the_refusals(monkeypatch):
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels((2, 5)))
    model = tiny_target("qwen2", seed=1).to(torch.bfloat16)
    handle = hf_dynaspec.fast_cpu(model)
    assert verify_rows_patch.describe(model) == "kernel:2-5"
    with pytest.raises(RuntimeError, match="already rerouted"):
        hf_dynaspec.fast_cpu(model)
    handle.undo()
    assert verify_rows_patch.describe(model) is None
    with pytest.raises(TypeError, match="must be a transformers model"):
        hf_dynaspec.fast_cpu(torch.nn.Linear(4, 4))
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: NO_KERNELS)
    with hf_dynaspec.fast_cpu(model, compile=False) as nothing:  # nothing measured faster: left as it is
        assert nothing.kernels == NO_KERNELS and not verify_rows_patch.is_enabled(model) and not nothing.compiled
    with pytest.raises(TypeError, match="compile must be True or False"):
        hf_dynaspec.fast_cpu(model, compile="yes")
    from torch._inductor import cpp_builder

    def no_compiler():
        raise RuntimeError("no C++ compiler")
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", no_compiler)
    with hf_dynaspec.fast_cpu(model) as eager:  # nothing to compile with: the steps stay eager, the call works
        assert not eager.compiled and model.generation_config.cache_implementation is None


def test_an_fp16_model_is_left_alone(monkeypatch):
    model = tiny_target("llama").to(torch.float16)
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda m: pytest.fail("nothing to measure for fp16"))
    with hf_dynaspec.fast_cpu(model) as handle:
        assert handle.kernels == NO_KERNELS and not verify_rows_patch.is_enabled(model)


SIZES = [1, 2, 3, 5, 9, 17]


@pytest.mark.parametrize("native,kernel,packed,expected", [
    # AVX-512 BF16 / AMX: the kernel at one row, prepacked oneDNN after (the rows between 1 and 2: none)
    ([5, 5, 5, 5, 5, 6], [3, 4, 4.5, 5.5, 6, 8], [4, 3.5, 3.6, 3.7, 4, 5], CpuKernels((1, 1), (2, 17))),
    # the kernel up to 3, packed from 5: rows 4 go with the later run
    ([5, 5, 5, 5, 5, 6], [3, 3, 3, 5.5, 6, 8], [4, 4, 4, 3.7, 4, 5], CpuKernels((1, 3), (4, 17))),
    # AVX2 (no packed path measured): PyTorch's one row wins, the kernel after
    ([5, 9, 13, 20, 36, 70], [6, 6, 6.5, 7, 8, 12], None, CpuKernels((2, 17))),
    # never faster: nothing routed
    ([5, 5, 5, 5, 5, 5], [6, 6, 6, 6, 6, 6], [7, 7, 7, 7, 7, 7], NO_KERNELS),
    # a slower size ends a run; PyTorch between runs keeps its rows
    ([5, 5, 5, 5, 5, 5], [4, 6, 4, 4, 4, 4], [6, 6, 6, 6, 6, 6], CpuKernels((1, 1))),
    ([5, 5, 5, 5, 5, 5], [4, 6, 6, 6, 6, 6], [6, 6, 4, 4, 6, 6], CpuKernels((1, 1), (3, 5))),
])
def test_kernels_are_the_first_unbroken_run_where_each_path_is_fastest(native, kernel, packed, expected):
    seconds = {"native": dict(zip(SIZES, native)), "kernel": dict(zip(SIZES, kernel))}
    if packed is not None:
        seconds["packed"] = dict(zip(SIZES, packed))
    assert kernels_from_costs(SIZES, seconds) == expected


@needs_kernel
def test_costs_measured_on_one_routing_never_plan_another():
    """The planner's cost key names the kernels: costs measured with one-token steps on the kernel are not read back
    for a call that kernels only 2+ rows, or packs its weights (or kernels nothing)."""
    from hf_dynaspec.generation.costs.round_costs import calibration_key

    target = tiny_target("llama").to(torch.bfloat16)
    assistant = imitating_assistant(target)
    options = assistant.generation_config
    keys = [calibration_key(target, assistant, options)]
    kernels = [CpuKernels((1, 9)), CpuKernels((2, 9)), CpuKernels((1, 17))]
    if packed_weights.available():
        kernels.append(CpuKernels((1, 1), (2, 17)))
    for kernel in kernels:
        verify_kernel.enable_kernels(target, kernel)
        keys.append(calibration_key(target, assistant, options))
        verify_rows_patch.disable(target)
    packed_weights.release(target)
    assert len(set(keys)) == len(kernels) + 1


def test_an_emulated_instruction_set_is_another_machine(monkeypatch):
    """Costs and kernels measured with oneDNN capped at AVX2 (how an AVX2 host is emulated) are never read back on
    the full instruction set, or the other way round: the key names what PyTorch and oneDNN use."""
    from hf_dynaspec.generation.costs import store

    target = tiny_target("llama")
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    key = store.digest(store.target_parts(target))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert store.digest(store.target_parts(target)) != key
    assert store.target_parts(target)["cpu"][0] == torch.backends.cpu.get_cpu_capability()


@needs_kernel
@needs_packed
def test_release_packed_frees_the_copies_and_leaves_no_routing_that_packs_again(monkeypatch):
    """`handle.release_packed()` drops every packed copy (the memory comes back) and undoes the routing: the next
    forward of a size the packed weights served runs on PyTorch's kernels and packs nothing again."""
    monkeypatch.setattr(verify_kernel, "measured_kernels", lambda model: CpuKernels((1, 1), (2, 9)))
    model = tiny_target("qwen2", seed=2).to(torch.bfloat16)
    ids = torch.randint(0, model.config.vocab_size, (1, 5), generator=torch.Generator().manual_seed(1))
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    calls = counting(monkeypatch, model)
    packs = []
    pack = packed_weights.pack
    monkeypatch.setattr(packed_weights, "pack", lambda w: packs.append(w.shape) or pack(w))
    handle = hf_dynaspec.fast_cpu(model)
    with torch.no_grad():
        model(input_ids=ids)
    assert len(packs) == len(linears) and ("packed", 5) in calls  # the case: packed copies made and used
    assert all(packed_weights._CACHE in m.__dict__ for m in linears)
    assert handle.release_packed() == len(linears)
    assert not any(packed_weights._CACHE in m.__dict__ for m in model.modules()), "a packed copy is still held"
    assert not verify_rows_patch.is_enabled(model)
    calls.clear()
    with torch.no_grad():
        model(input_ids=ids)
    assert calls == [] and len(packs) == len(linears), "the next forward was routed and packed the weights again"


@pytest.mark.parametrize("units", [(True, False, False), (True, True, False), (True, True, True), (False, False, False)])
def test_a_bf16_model_hears_once_that_float32_is_faster_on_a_cpu_without_bf16_units(units, monkeypatch, caplog):
    """fast_cpu and every assisted call tell a bf16 model's user, once, when this CPU has AVX2 but neither AVX-512 BF16
    nor AMX (the host kinds where float32 measured faster); never a float32 model, a CPU with bf16 units or one that
    is not x86 with AVX2."""
    import logging

    avx2, dots, tiles = units
    for name, value in (("_is_avx2_supported", avx2), ("_is_avx512_bf16_supported", dots), ("_is_amx_tile_supported", tiles)):
        monkeypatch.setattr(torch.cpu, name, lambda value=value: value, raising=False)
    told = avx2 and not (dots or tiles)
    model = tiny_target("llama", seed=3)
    assert not verify_kernel.bf16_without_units(model)  # float32: nothing to say
    model = model.to(torch.bfloat16)
    assert verify_kernel.bf16_without_units(model) == told


    def assisted_call():
        with verify_kernel.target_verify_kernel(model):
            pass

    for entry in (lambda: hf_dynaspec.fast_cpu(model, compile=False).undo(), assisted_call):
        logging.Logger.warning_once.cache_clear()  # transformers' once-per-process memory of messages
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            entry()
            entry()
        said = [r.message for r in caplog.records if "no bf16 units" in r.message]
        assert len(said) == told and all("dtype=torch.float32" in message for message in said)
