#!/bin/bash
# Measurements of the 1.5B curve: tau of chains K=2/4 (no lookup) on the dev prompts (one per category).
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
args="--assistant shipped=assistants/qwen2.5-coder-1.5b-instruct"; methods="vanilla,shipped/eagle+draft:2"
for d in outputs/curve39/runs/corpus15/b*; do
  label=corpus-$(basename $d | cut -c2-); args="$args --assistant $label=$d/assistant"
  methods="$methods,$label/eagle+draft:2"
done
hf-dynaspec bench --target qwen2.5-coder-1.5b-instruct $args --methods $methods --prompts benchmarks/curve39/dev_short.jsonl --max-new-tokens 64 --dtype bf16 --json benchmarks/results/data_curve_15b_tau.json --results benchmarks/results/results.jsonl
echo done
