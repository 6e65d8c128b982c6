"""Ahead-of-time compile of the Triton shortlisted head for the GPUs users have, without a GPU.

`triton.compile` produces real PTX and cubin here (../shared/GPU.md): every (compute capability, dtype) the
dispatcher can launch is compiled, so that a kernel that cannot build for a T4 (sm_75), an A100 (sm_80) or an H100
(sm_90) fails CI instead of a user's first generate(). It checks that the GPU build exists, not its values (the
interpreter tests do) nor its speed. The compile runs in a subprocess: the suite sets TRITON_INTERPRET=1, under
which `@triton.jit` functions are interpreted and cannot be compiled.
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
import json, sys
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from hf_dynaspec.kernels.shortlist_head.triton_kernel import _combine_tiles_kernel, _indexed_head_kernel, launch_constants

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}

def signature(dtype, constants):
    pointers = {"hidden_ptr": "*" + dtype, "weight_ptr": "*" + dtype, "row_ids_ptr": "*i64", "scores_ptr": "*fp32",
                "tile_max_ptr": "*fp32", "tile_arg_ptr": "*i64", "tile_sumexp_ptr": "*fp32"}
    scalars = {n: "i32" for n in ("batch", "dim", "num_columns", "num_tiles", "stride_hidden", "stride_weight",
                                  "stride_scores")}
    return {**pointers, **scalars, **{name: "constexpr" for name in constants}}

results = {}
for capability in (75, 80, 90):
    for dtype in DTYPES:
        for batch in (1, 5):  # the GEMV path and the tl.dot path, with the constants the launcher picks
            constants = launch_constants(DTYPES[dtype], batch, (capability // 10, capability % 10))
            source = ASTSource(fn=_indexed_head_kernel, signature=signature(dtype, constants), constexprs=constants)
            key = f"{capability}/{dtype}/{batch}"
            try:
                compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
                ptx = compiled.asm["ptx"]
                results[key] = {"cubin_bytes": len(compiled.asm["cubin"]), "targets_sm": f"sm_{capability}" in ptx,
                                "tensor_cores": "mma" in ptx, "upcast": constants["UPCAST"]}
            except Exception as error:
                results[key] = {"error": f"{type(error).__name__}: {error}"[:300]}
    combine = {"tile_max_ptr": "*fp32", "tile_arg_ptr": "*i64", "tile_sumexp_ptr": "*fp32", "argmax_ptr": "*i64",
               "max_ptr": "*fp32", "logsumexp_ptr": "*fp32", "num_tiles": "i32", "BLOCK_T": "constexpr"}
    for block in (1, 512):
        try:
            compiled = triton.compile(ASTSource(fn=_combine_tiles_kernel, signature=combine, constexprs={"BLOCK_T": block}),
                                      target=GPUTarget("cuda", capability, 32))
            results[f"{capability}/combine/{block}"] = {"cubin_bytes": len(compiled.asm["cubin"]),
                                                        "targets_sm": f"sm_{capability}" in compiled.asm["ptx"]}
        except Exception as error:
            results[f"{capability}/combine/{block}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
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
@pytest.mark.parametrize("tiles", [1, 512])
def test_the_tile_combining_kernel_compiles_for_each_gpu(compiled, capability, tiles):
    result = compiled["results"][f"{capability}/combine/{tiles}"]
    assert "error" not in result, f"triton {compiled['triton']}: {result}"
    assert result["cubin_bytes"] > 0 and result["targets_sm"], result


@pytest.mark.parametrize("capability", CAPABILITIES, ids=lambda c: f"sm_{c}_{CAPABILITIES[c]}")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch", [1, 5], ids=["gemv", "dot"])
def test_the_kernel_compiles_for_each_gpu_and_dtype(compiled, capability, dtype, batch):
    result = compiled["results"][f"{capability}/{dtype}/{batch}"]
    assert "error" not in result, f"triton {compiled['triton']}: {result}"
    assert result["cubin_bytes"] > 0 and result["targets_sm"], result
    # Several rows of fp16/bf16 go through tensor cores (mma) on sm_80 and sm_90; fp32 uses an IEEE fp32 dot by
    # design (triton_kernel.launch_constants), and for sm_75 Triton emits FMA code even for fp16 (checked: no mma
    # in the PTX), so a T4 runs the kernel on CUDA cores whatever the dtype.
    tensor_core_dtype = dtype in ("fp16", "bf16") and capability >= 80
    if batch > 1:
        assert result["tensor_cores"] == tensor_core_dtype, result
