#!/bin/bash
# Issue 93: teacher-forced agreement of the shipped 1.5B and Gemma-3-270M drafters on their own targets' greedy bf16
# answers to the 28 dev prompts (4 per category of Spec-Bench dev and HumanEval dev; dev_answers.sh), as the 0.5B's
# is measured (scale.sh): draft positions 1-3 on answer tokens, simulated chain tau at K = 2 and 4.
# Resumable (dev_answers.sh skips what exists). Usage: agreement_others.sh
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
for T in qwen2.5-coder-1.5b-instruct gemma-3-270m; do
  O=outputs/recipe93/dev-$T
  . benchmarks/recipe93/dev_answers.sh
  dev_answers dev
  out=benchmarks/results/round_93/agreement_$T.json
  [ -f $out ] || python benchmarks/feature_agreement.py --target $T --assistant shipped=assistants/$T \
    --features dev=$O/dev-feat --depths 3 --answers-only --chain-tau 2,4 --json $out
done
echo done
