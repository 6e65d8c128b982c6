#!/bin/bash
# Issue 93: does more of the target's own answers still raise the shipped 0.5B drafter? The shipped drafter
# (version 10; its own answers were files 0-27 of the fixed mix, in fp32) continues for one pass over the new bf16
# answers (data/self_distill/qwen2.5-coder-0.5b-instruct-bf16, files 38 to LAST: prompts it never saw), as shipped
# (K: EAGLE-1, regression loss, unroll 2) and with fused layers added as a pass-through (L: the ablation's best, F);
# lr 2e-4, warmup-stable-decay, 2,048 tokens per batch; then teacher-forced agreement at draft positions 1-3 on
# the ablation's dev answers, the shipped drafter beside. Resumable: every step skips what exists.
# Usage: continue.sh LAST_FILE [PAUSE_PID]  (a background job to stop while this runs, continued at the end)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
last=$1; pause=$2; [ -n "$pause" ] && kill -STOP "$pause" && trap 'kill -CONT '"$pause" EXIT
O=outputs/recipe93; T=qwen2.5-coder-0.5b-instruct; FUSED=2,12,21; F=$O/train-bf16-38-$last
[ -f $F/done ] || { python -m recipes.build_features --target $T --out $F --conversations data/self_distill/$T-bf16 \
  --first-file 38 --last-file "$last" --dtype bf16 --max-length 1024 --sequences-per-shard 128 \
  --fused-hidden-states $FUSED && touch $F/done; }
common="--target $T --features $F --init assistants/$T --lr 2e-4 --warmup-steps 10 --tokens-per-batch 2048 \
  --val-tokens 2000 --validate-every 100000 --checkpoint-every 25 --schedule wsd --max-tokens 500000 --decay-tokens 100000 \
  --mixed-precision auto --unroll 2 --reg-weight 1.0"
run() { name=$1; shift; [ -f $O/runs/$name/done ] && return; python -m recipes.train_drafter $common --out $O/runs/$name "$@" && touch $O/runs/$name/done; }
run K-continue-$last
run L-continue-fused-$last --fused-hidden-states $FUSED
python benchmarks/feature_agreement.py --target $T --assistant shipped=assistants/$T A-eagle1=$O/runs/A-eagle1/assistant \
  F-fused-reg=$O/runs/F-fused-reg/assistant K-continue=$O/runs/K-continue-$last/assistant \
  L-continue-fused=$O/runs/L-continue-fused-$last/assistant --features dev=$O/dev-fused --depths 3 --answers-only \
  --chain-tau 2,4 --json benchmarks/results/round_93/continue_05b_agreement.json
echo done
