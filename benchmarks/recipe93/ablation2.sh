#!/bin/bash
# The ablation's second half (benchmarks/recipe93/ablation.sh first): without the regression loss the first five
# variants lost agreement at positions 2-3 (unroll 2), so fusion and a longer training-time test are also tried
# with it kept. Same data, schedule and dev measurement. Usage: ablation2.sh [PAUSE_PID]
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
pause=$1; [ -n "$pause" ] && kill -STOP "$pause" && trap 'kill -CONT '"$pause" EXIT
O=outputs/recipe93; T=qwen2.5-coder-0.5b-instruct; FUSED=2,12,21
common="--target $T --features $O/train-fused --lr 5e-4 --warmup-steps 10 --tokens-per-batch 2048 --val-tokens 2000 \
  --validate-every 100000 --checkpoint-every 25 --schedule wsd --max-tokens 400000 --decay-tokens 80000 --mixed-precision auto"
run() { name=$1; shift; [ -f $O/runs/$name/done ] && return; python -m recipes.train_drafter $common --out $O/runs/$name "$@" && touch $O/runs/$name/done; }
run F-fused-reg --unroll 2 --reg-weight 1.0 --fused-hidden-states $FUSED
run G-ttt3-reg --unroll 3 --reg-weight 1.0
run H-fused-ttt3-reg --unroll 3 --reg-weight 1.0 --fused-hidden-states $FUSED
args="shipped=assistants/$T"; for r in A-eagle1 B-noreg C-fused D-ttt3 E-hard F-fused-reg G-ttt3-reg H-fused-ttt3-reg; do args="$args $r=$O/runs/$r/assistant"; done
python benchmarks/feature_agreement.py --target $T --assistant $args --features dev=$O/dev-fused --depths 3 \
  --answers-only --chain-tau 2,4 --json benchmarks/results/round_93/ablation_05b_agreement.json
echo done
