#!/bin/bash
# Issue 93's bars for the other shipped targets, as the 0.5B's are measured (ship_05b.sh): one interleaved run per
# target and mode, alone: vanilla, vanilla-fast and the default, 21 dev prompts (3 per category), 64 new tokens,
# bf16, greedy and sampled at the checkpoint's own settings; appended to the results table. Skips a run whose JSON exists.
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
R=benchmarks/results/round_93
for T in qwen2.5-coder-1.5b-instruct gemma-3-270m; do
  for mode in greedy sampled; do
    out=$R/bars_${T}_$mode.json; flag=(); [ $mode = sampled ] && flag=(--sample)
    [ -f $out ] || hf-dynaspec bench --target $T --methods vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto \
      --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 3 \
      --max-new-tokens 64 --dtype bf16 "${flag[@]}" --json $out --results benchmarks/results/results.jsonl
  done
done
echo done
