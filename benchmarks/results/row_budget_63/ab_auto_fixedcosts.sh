#!/usr/bin/env bash
# The issue-63 0.5B `auto` A/B again, both trees planning on one fixed cost table (fixed_costs.py), as run on
# 2026-11-28: /tmp/ab63b_old = git worktree of 44c9b44 (the cluster rule), /tmp/ab63b_new = of a3a02aa (the row
# budget), fixed.json = fixed_costs_05b.json here (the new tree's own measurement of the round costs, verify rows 5).
set -euo pipefail
OUT=/tmp/ab63d; mkdir -p $OUT
export HF_DYNASPEC_HOME=$OUT/home; mkdir -p $HF_DYNASPEC_HOME && ln -sfn ~/.cache/hf-dynaspec/models $HF_DYNASPEC_HOME/models
D=/work/shared/data/eval; T=qwen2.5-coder-0.5b-instruct
for rep in 1 2; do for tree in old new; do
  root=/tmp/ab63b_$tree; echo "== rep $rep $tree $(date +%T)"
  (cd $root && PYTHONPATH=$root /work/main/.venv/bin/python -c "import hf_dynaspec; assert hf_dynaspec.__file__.startswith('$root')" && \
   PYTHONPATH=$root /work/main/.venv/bin/python /tmp/keys2/fixed_costs.py /tmp/keys2/fixed.json bench --target $T \
   --assistant $root/assistants/$T --methods vanilla,dynaspec+lookup:5+suffix+auto --prompts $D/spec_bench_dev.jsonl,$D/humaneval_dev.jsonl \
   --limit-per-category 1 --max-new-tokens 64 --dtype bf16 --results $OUT/results.jsonl --json $OUT/${tree}_$rep.json) > $OUT/${tree}_$rep.log 2>&1
done; done
echo done $(date +%T)
