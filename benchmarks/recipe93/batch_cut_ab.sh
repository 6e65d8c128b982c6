#!/usr/bin/env bash
# One file of Gemma-3-270M's sampled answers (file 76: one 512-token prompt among ~57-token ones), old batching
# (one batch of 64: --batch-cost 1e12) against the cheapest cut (--batch-cost auto), alone on this host.
set -euo pipefail
cd "$(dirname "$0")/../.." && . .venv/bin/activate
for mode in single auto; do
  cost=$([ $mode = single ] && echo 1e12 || echo auto)
  rm -rf ${OUT:-/tmp/sdab}/$mode && mkdir -p ${OUT:-/tmp/sdab}/$mode
  echo "== $mode $(date +%T)"
  python -m recipes.self_distill --target gemma-3-270m --out ${OUT:-/tmp/sdab}/$mode --first-file 76 --max-prompts 4928 \
    --batch-size 64 --max-new-tokens 192 --dtype fp32 --sample --seed 1 --batch-cost $cost 2>&1 | tr '\r' '\n' | grep -v 'Loading\|self-distillation' || true
  cat ${OUT:-/tmp/sdab}/$mode/progress.log
done
echo "== done $(date +%T)"
