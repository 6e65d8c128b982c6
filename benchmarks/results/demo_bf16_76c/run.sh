#!/usr/bin/env bash
# #76 after 797815f (`--cpu-verify auto` takes the kernels measured once and cached): `hf-dynaspec demo` five times
# in a row with a fresh HF_DYNASPEC_HOME (the zoo's models linked in, nothing measured yet), as CI's first command
# and then a user's later runs see it: run 1 measures the kernels, runs 2-5 reuse them. Before the change each run
# measured afresh, and the verdict alternated between a near-tie and token-identical (demo_bf16_76, demo_bf16_76b).
# Host: AVX-512 BF16 + AMX, 2 cores, running at a varying fraction of its usual speed this session.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=benchmarks/results/demo_bf16_76c
home=$(mktemp -d)
ln -s "${HF_DYNASPEC_HOME:-$HOME/.cache/hf-dynaspec}/models" "$home/models"
for i in 1 2 3 4 5; do
    HF_DYNASPEC_HOME=$home hf-dynaspec demo > "$here/run$i.txt" 2>&1
    echo "run $i: exit $?"
done
rm -rf "$home"
