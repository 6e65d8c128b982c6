#!/bin/bash
# Measurements of the 0.5B curve: teacher-forced agreement on the dev answers, then tau of chains K=2/4 (no lookup).
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
assistants="shipped=assistants/qwen2.5-coder-0.5b-instruct"
for d in outputs/curve39/runs/corpus05/b* outputs/curve39/runs/sd05/b*; do
  kind=$(basename $(dirname $d)); kind=${kind%05}; [ $kind = sd ] && kind=own
  assistants="$assistants $kind-$(basename $d | cut -c2-)=$d/assistant"
done
python benchmarks/feature_agreement.py --target qwen2.5-coder-0.5b-instruct --assistant $assistants --features dev=outputs/curve39/dev-05b --depths 3 --answers-only --chain-tau 2,4 --json benchmarks/results/data_curve_05b_agreement.json
bench_assistants=""; for a in $assistants; do bench_assistants="$bench_assistants --assistant $a"; done
# measured tau for the shipped drafter and two budgets of each kind, K = 2 (the machine's time); every point by teacher-forced simulation
methods="vanilla,shipped/eagle+draft:2,corpus-100000/eagle+draft:2,corpus-1000000/eagle+draft:2,own-100000/eagle+draft:2,own-550000/eagle+draft:2"
hf-dynaspec bench --target qwen2.5-coder-0.5b-instruct $bench_assistants --methods $methods --prompts benchmarks/curve39/dev_short.jsonl --max-new-tokens 64 --dtype bf16 --json benchmarks/results/data_curve_05b_tau.json --results benchmarks/results/results.jsonl
echo done
