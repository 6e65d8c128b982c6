#!/usr/bin/env bash
# The GPU suite in one call, for a machine with a GPU and no network, from a copy of the working tree (the
# shipped assistants/ need not travel: every model here is built with random weights of real shapes).
#
#   bash tests/gpu/run_suite.sh OUTDIR [PYTEST ARGS...]     (e.g. -k syncs: a part of the suite)
#
# Writes to OUTDIR (8 files at most, what the device tool brings back): versions.txt (card, driver, torch, triton,
# transformers), pytest.txt and junit.xml (what passed), and the suite's own records (gpu_steps_<dtype>.json:
# per-step head and draft times; gpu_syncs.json and gpu_route_syncs.json: host syncs per target pass; gpu_costs.json:
# draft and verify costs per model shape, from -k costs, for benchmarks/gpu_projection.py). Then record
# them in docs/gpu.md (docs/gpu.md, "Running the suite").
# Installs nothing and reaches no network: it uses the image's python3 with its torch/transformers/triton, puts
# this tree on PYTHONPATH, and stops each test after GPU_TEST_TIMEOUT seconds (pytest-timeout, where installed)
# and the whole suite after GPU_SUITE_TIMEOUT seconds (default 450: under the device tool's 8 minutes).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${1:?usage: bash tests/gpu/run_suite.sh OUTDIR [PYTEST ARGS...]}"
shift
mkdir -p "$out"
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "run_suite.sh: $python not found (set PYTHON=...)" >&2; exit 2; }
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
{
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv 2>&1
  "$python" - <<'PY'
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
per_test=()
"$python" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout="${GPU_TEST_TIMEOUT:-150}")
cache=$(mktemp -d)  # measured costs and the CPU kernel build: not among the files that come back
OUT="$out" HF_DYNASPEC_TRITON_GPU=1 HF_DYNASPEC_CACHE="$cache" HF_DYNASPEC_HOME="$cache" \
  PYTHONPATH="$PWD:$PWD/tests:${PYTHONPATH:-}" timeout -k 10 "${GPU_SUITE_TIMEOUT:-450}" \
  "$python" -m pytest -q -m gpu tests/gpu -p no:cacheprovider "${per_test[@]}" --durations=0 \
  --junitxml="$out/junit.xml" -rA "$@" 2>&1 | tee "$out/pytest.txt"
exit "${PIPESTATUS[0]}"
