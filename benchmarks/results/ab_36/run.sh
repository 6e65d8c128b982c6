#!/usr/bin/env bash
# Old (a771cd5, a worktree at /tmp/old) vs new code, alternating, same host, same venv; per run, speedups against
# that run's own vanilla. Runs 1-2: METHODS=vanilla,dynaspec:8+lookup:5,dynaspec-tree ROUNDS="1 2";
# runs 3-4: METHODS=vanilla,dynaspec-tree,dynaspec:8 ROUNDS="3 4".
set -e
METHODS=${METHODS:-vanilla,dynaspec:8+lookup:5,dynaspec-tree}
ROUNDS=${ROUNDS:-"1 2"}
P=/work/shared/data/eval/spec_bench_dev.jsonl,/work/shared/data/eval/humaneval_dev.jsonl
ARGS="--target qwen2.5-coder-0.5b-instruct --methods $METHODS --prompts $P --limit-per-category 1 --max-new-tokens 64 --dtype bf16 --cpu-verify --num-draft-tokens 2"
for round in $ROUNDS; do
  for side in old new; do
    if [ $side = old ]; then cd /tmp/old; export PYTHONPATH=/tmp/old; else cd /work/main; unset PYTHONPATH; fi
    /work/main/.venv/bin/python -m hf_dynaspec.cli bench $ARGS --json /tmp/ab/${side}_$round.json > /tmp/ab/${side}_$round.log 2>&1
    echo "$side $round done $(date +%T)"
  done
done
