#!/bin/bash
# One data kind's curve: a constant-rate run with snapshots where each budget's decay starts, then one branch per
# budget decaying over its last 20% of tokens. Usage: train_curve.sh NAME TARGET "BUDGETS" FEATURE_DIRS...
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
name=$1; target=$2; budgets=$3; shift 3
common="--target $target --features $* --unroll 2 --lr 5e-4 --warmup-steps 10 --tokens-per-batch 2048 --val-tokens 2000 --validate-every 100000 --checkpoint-every 25 --schedule wsd --mixed-precision auto"
snaps=""; last=0
for b in $budgets; do snaps="$snaps,$((b * 8 / 10))"; last=$((b * 8 / 10)); done
python -m recipes.train_drafter $common --out outputs/curve39/runs/$name/main --max-tokens $last --snapshot-at-tokens ${snaps#,}
for b in $budgets; do
  python -m recipes.train_drafter $common --out outputs/curve39/runs/$name/b$b --max-tokens $b --decay-tokens $((b - b * 8 / 10)) \
    --resume-from outputs/curve39/runs/$name/main/snapshots/tokens_$((b * 8 / 10))
done
echo done
