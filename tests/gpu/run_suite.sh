#!/usr/bin/env bash
# The GPU suite in one call, for a machine with a GPU and no network, from a copy of the working tree (the
# shipped assistants/ need not travel: every model here is built with random weights of real shapes).
#
#   bash tests/gpu/run_suite.sh OUTDIR
#
# Writes to OUTDIR: versions.txt (card, driver, torch, triton, transformers), pytest.txt and junit.xml (what
# passed), and the suite's own records (gpu_steps_<dtype>.json: per-step head and draft times;
# gpu_syncs.json: host syncs of the default configuration). Then record them in docs/gpu.md.
# Installs nothing: it uses the machine's torch/transformers/triton and puts this tree on PYTHONPATH.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bash tests/gpu/run_suite.sh OUTDIR}"
mkdir -p "$out"
{
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1
  python - <<'PY'
import importlib
for name in ("torch", "triton", "transformers", "accelerate", "safetensors", "huggingface_hub"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as error:  # a missing package is a finding, not a crash
        print(name, "unavailable:", error)
import torch
print("cuda", torch.version.cuda, "devices", torch.cuda.device_count())
PY
} > "$out/versions.txt" 2>&1
cat "$out/versions.txt"
# HF_DYNASPEC_TRITON_GPU=1: tests/conftest.py must not select Triton's CPU interpreter; the fake-CUDA suite and
# the kernel's interpreter tests belong to the CPU run, so only tests/gpu runs here.
OUT="$out" HF_DYNASPEC_TRITON_GPU=1 HF_DYNASPEC_CACHE="$out/cache" PYTHONPATH="$PWD:${PYTHONPATH:-}" \
  python -m pytest -q -m gpu tests/gpu -p no:cacheprovider --junitxml="$out/junit.xml" -rA 2>&1 | tee "$out/pytest.txt"
exit "${PIPESTATUS[0]}"
