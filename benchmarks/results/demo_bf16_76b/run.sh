#!/usr/bin/env bash
# #76 after the CI failure of 2026-11-29: `hf-dynaspec demo` (bf16, `--cpu-verify auto`: on this AMX host the rows
# kernel at one row and prepacked oneDNN weights after) three times in a row, as CI's first command runs it. Before
# the fix, a run whose outputs met a near-tie crashed in the fp32 re-scoring (float32 rows sent to the bf16 packed
# copy). Host: AVX-512 BF16 + AMX, 2 cores, running at about half its usual speed this session.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=benchmarks/results/demo_bf16_76b
for i in 1 2 3; do
    hf-dynaspec demo > "$here/run$i.txt" 2>&1
    echo "run $i: exit $?"
done
