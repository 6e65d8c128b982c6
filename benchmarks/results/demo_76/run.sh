#!/usr/bin/env bash
# #76 bar "five consecutive CI-style runs give the same verdict" (AVX-512 BF16 + AMX host, 2 cores, 2026-11-29):
# `hf-dynaspec demo` as the README runs it (bf16, the shipped 0.5B assistant), five times back to back. A few seconds of
# linting overlapped one run. Outputs: demo_N.txt, runs.log.
cd "$(dirname "$0")/../../.." && . .venv/bin/activate
for i in 1 2 3 4 5; do
  start=$(date +%s)
  hf-dynaspec demo > benchmarks/results/demo_76/demo_$i.txt 2>&1; rc=$?
  echo "run $i: exit $rc in $(( $(date +%s) - start )) s"
done
echo done
