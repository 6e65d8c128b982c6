#!/bin/bash
# Issue 93's recipe ablation on one data budget (Qwen2.5-Coder-0.5B): every variant a fresh drafter from the target's
# last layer, one pass over the same 400k tokens of the target's own answers (data/self_distill/qwen2.5-coder-0.5b-instruct),
# the data curve's schedule (warmup-stable-decay, lr 5e-4, 2,048 tokens per batch); then teacher-forced agreement at
# draft positions 1-3 on the target's own bf16 answers to the 28 dev prompts. Resumable: every step skips what exists.
# Usage: ablation.sh [PAUSE_PID]  (a background job to stop while this runs, continued at the end)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
pause=$1; [ -n "$pause" ] && kill -STOP "$pause" && trap 'kill -CONT '"$pause" EXIT
O=outputs/recipe93; T=qwen2.5-coder-0.5b-instruct; FUSED=2,12,21
mkdir -p $O
[ -f $O/dev_prompts.jsonl ] || python -c "import json; from hf_dynaspec.bench.prompts import load_prompts; [print(json.dumps({'question_id': p.prompt_id, 'category': p.category, 'turns': [p.text]})) for p in load_prompts(['../shared/data/eval/spec_bench_dev.jsonl', '../shared/data/eval/humaneval_dev.jsonl'], 4)]" > $O/dev_prompts.jsonl
python -m recipes.self_distill --target $T --prompts $O/dev_prompts.jsonl --out $O/dev-answers --batch-size 28 \
  --prompts-per-file 28 --max-new-tokens 128 --max-prompt-tokens 2048 --dtype bf16
[ -f $O/dev-fused/shard_00000.safetensors ] || python -m recipes.build_features --target $T --out $O/dev-fused \
  --conversations $O/dev-answers --dtype bf16 --max-length 4096 --sequences-per-shard 64 --fused-hidden-states $FUSED
python -m recipes.build_features --target $T --out $O/train-fused --conversations data/self_distill/$T --dtype bf16 \
  --max-length 1024 --sequences-per-shard 128 --max-tokens 600000 --fused-hidden-states $FUSED
common="--target $T --features $O/train-fused --lr 5e-4 --warmup-steps 10 --tokens-per-batch 2048 --val-tokens 2000 \
  --validate-every 100000 --checkpoint-every 25 --schedule wsd --max-tokens 400000 --decay-tokens 80000 --mixed-precision auto"
run() { name=$1; shift; [ -f $O/runs/$name/done ] && return; python -m recipes.train_drafter $common --out $O/runs/$name "$@" && touch $O/runs/$name/done; }
run A-eagle1 --unroll 2 --reg-weight 1.0
run B-noreg --unroll 2 --reg-weight 0
run C-fused --unroll 2 --reg-weight 0 --fused-hidden-states $FUSED
run D-ttt3 --unroll 3 --reg-weight 0 --fused-hidden-states $FUSED
run E-hard --unroll 3 --reg-weight 0 --fused-hidden-states $FUSED --teacher-top-k 1
args="shipped=assistants/$T"; for r in A-eagle1 B-noreg C-fused D-ttt3 E-hard; do args="$args $r=$O/runs/$r/assistant"; done
python benchmarks/feature_agreement.py --target $T --assistant $args --features dev=$O/dev-fused --depths 3 \
  --answers-only --chain-tau 2,4 --json benchmarks/results/round_93/ablation_05b_agreement.json
echo done
