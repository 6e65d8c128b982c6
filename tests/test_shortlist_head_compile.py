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
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from hf_dynaspec.kernels.shortlist_head.triton_kernel import _shortlist_head_kernel

def signature(dtype):
    pointers = {"hidden_ptr": "*" + dtype, "weight_ptr": "*" + dtype, "scores_ptr": "*fp32", "tile_max_ptr": "*fp32",
                "tile_arg_ptr": "*i64", "tile_sumexp_ptr": "*fp32", "tile_row_ptr": "*i64", "tile_end_ptr": "*i64",
                "tile_out_ptr": "*i64"}
    scalars = {n: "i32" for n in ("batch", "dim", "num_tiles", "stride_hidden", "stride_weight", "stride_scores")}
    return {**pointers, **scalars, "BLOCK_B": "constexpr", "BLOCK_N": "constexpr", "BLOCK_D": "constexpr"}

results = {}
for capability in (75, 80, 90):
    for dtype in ("fp16", "bf16", "fp32"):
        # The block sizes shortlist_head_triton launches with (batch padded to 16 rows; 64 x 64 tiles).
        source = ASTSource(fn=_shortlist_head_kernel, signature=signature(dtype),
                           constexprs={"BLOCK_B": 16, "BLOCK_N": 64, "BLOCK_D": 64})
        try:
            compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32))
            results[f"{capability}/{dtype}"] = {"cubin_bytes": len(compiled.asm["cubin"]),
                                                "targets_sm": f"sm_{capability}" in compiled.asm["ptx"]}
        except Exception as error:
            results[f"{capability}/{dtype}"] = {"error": f"{type(error).__name__}: {error}"[:300]}
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
def test_the_kernel_compiles_for_each_gpu_and_dtype(compiled, capability, dtype):
    result = compiled["results"][f"{capability}/{dtype}"]
    assert "error" not in result, f"triton {compiled['triton']}: {result}"
    assert result["cubin_bytes"] > 0 and result["targets_sm"], result
