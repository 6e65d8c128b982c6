"""Ahead-of-time compile of the Triton shortlisted head for the GPUs users have, without a GPU.

`triton.compile` produces real PTX and cubin here (../shared/GPU.md): every (compute capability, dtype, form:
row ids from the router's ranking or given) the dispatcher can launch is compiled, so that a kernel that cannot
build for a T4 (sm_75), an A100 (sm_80) or an H100 (sm_90) fails CI instead of a user's first generate(). It
checks that the GPU build exists, not its values (the interpreter tests do) nor its speed. The compile runs in a
subprocess: the suite sets TRITON_INTERPRET=1, under which `@triton.jit` functions are interpreted and cannot be
compiled.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")

CAPABILITIES = {75: "T4", 80: "A100", 90: "H100"}
DTYPES = ("fp16", "bf16", "fp32")

COMPILE_ALL = r"""
import inspect, json, re, sys
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from hf_dynaspec.kernels.shortlist_head.triton_kernel import _shortlist_head_kernel, launch_constants

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
LONGS = ("row_ids_ptr", "ranking_ptr", "sizes_ptr", "starts_ptr", "token_order_ptr", "always_ptr", "ids_ptr",
         "tile_arg_ptr", "tile_token_ptr", "argmax_ptr", "token_ptr")
FLOATS = ("scores_ptr", "tile_max_ptr", "tile_sumexp_ptr", "max_ptr", "logsumexp_ptr", "top_ptr")

def signature(dtype, constants):
    types = {"hidden_ptr": "*" + dtype, "weight_ptr": "*" + dtype, "counter_ptr": "*i32",
             **{n: "*i64" for n in LONGS}, **{n: "*fp32" for n in FLOATS}, **{n: "constexpr" for n in constants}}
    names = list(inspect.signature(_shortlist_head_kernel.fn).parameters)
    return {n: types.get(n, "i32") for n in names}  # the rest: batch, sizes and strides

results = {}
for capability in (75, 80, 90):
    for dtype in DTYPES:
        for batch in (1, 5):  # the GEMV path and the tl.dot path, with the constants the launcher picks
            for ranked in (True, False):  # row ids from the router's ranking, or given
                constants = {**launch_constants(DTYPES[dtype], batch, (capability // 10, capability % 10)),
                             "BLOCK_T": 4096 if ranked else 1, "FROM_RANKING": ranked}
                source = ASTSource(fn=_shortlist_head_kernel, signature=signature(dtype, constants), constexprs=constants)
                key = f"{capability}/{dtype}/{batch}/{'ranked' if ranked else 'ids'}"
                try:
                    compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
                    ptx = compiled.asm["ptx"]
                    results[key] = {"cubin_bytes": len(compiled.asm["cubin"]), "targets_sm": f"sm_{capability}" in ptx,
                                    "tensor_cores": "mma" in ptx, "upcast": constants["UPCAST"],
                                    "atomics": sorted(set(re.findall(r"atom\.[\w.]+", ptx))),
                                    "barrier": "bar.sync" in ptx or "barrier.sync" in ptx}
                except Exception as error:
                    results[key] = {"error": f"{type(error).__name__}: {error}"[:300]}
# Ints equal to 1 are specialised to constants by the launcher: one cluster, one row, one tile, batch 1.
ones = {**launch_constants(torch.bfloat16, 1, (9, 0)), "BLOCK_T": 1, "FROM_RANKING": True,
        "num_clusters": 1, "budget_rows": 1, "num_tiles": 1, "batch": 1}
try:
    compiled = triton.compile(ASTSource(fn=_shortlist_head_kernel, signature=signature("bf16", ones), constexprs=ones),
                              target=GPUTarget("cuda", 90, 32))
    results["ones"] = {"cubin_bytes": len(compiled.asm["cubin"]), "targets_sm": "sm_90" in compiled.asm["ptx"]}
except Exception as error:
    results["ones"] = {"error": f"{type(error).__name__}: {error}"[:300]}
print(json.dumps({"triton": triton.__version__, "results": results}))
"""


@pytest.fixture(scope="module")
def compiled() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    out = subprocess.run([sys.executable, "-c", COMPILE_ALL], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: f"sm_{c}_{CAPABILITIES[c]}")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 5], ids=["gemv", "dot"])
@pytest.mark.parametrize("form", ["ranked", "ids"])
def test_the_kernel_compiles_for_each_gpu_and_dtype(compiled, capability, dtype, batch, form):
    result = compiled["results"][f"{capability}/{dtype}/{batch}/{form}"]
    assert "error" not in result, f"triton {compiled['triton']}: {result}"
    assert result["cubin_bytes"] > 0 and result["targets_sm"], result
    # The last-program combine: every thread's partials stored before the count (a CTA barrier), the count an
    # acquire-release atomic at GPU scope (so the last program sees every other's partials), the reset an exchange.
    assert result["barrier"], result
    assert any(".acq_rel" in a and ".gpu" in a and ".add" in a for a in result["atomics"]), result
    assert any(".exch" in a for a in result["atomics"]), result
    # Several rows of fp16/bf16 go through tensor cores (mma) on sm_80 and sm_90; fp32 uses an IEEE fp32 dot by
    # design (triton_kernel.launch_constants), and for sm_75 Triton emits FMA code even for fp16 (checked: no mma
    # in the PTX), so a T4 runs the kernel on CUDA cores whatever the dtype.
    tensor_core_dtype = dtype in ("fp16", "bf16") and capability >= 80
    if batch > 1:
        assert result["tensor_cores"] == tensor_core_dtype, result


def test_the_kernel_compiles_where_the_launcher_turns_ones_into_constants(compiled):
    """A one-cluster artifact at a one-row budget, batch 1, one tile: every such int arrives as a constant."""
    result = compiled["results"]["ones"]
    assert "error" not in result, f"triton {compiled['triton']}: {result}"
    assert result["cubin_bytes"] > 0 and result["targets_sm"], result
