#!/usr/bin/env bash
# Before/after a change, interleaved: the same `hf-dynaspec bench` from an old tree and this one, alternately, twice
# (speed does not carry across runs of a shared host; alternating spreads its drift over both). Used for issue 62:
#   git worktree add /tmp/ab/old_tree 4560339 && OLD_TREE=/tmp/ab/old_tree OUT=/tmp/ab bash benchmarks/ab_two_trees.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD_TREE:?the old tree (a git worktree of the commit before the change)}"
OUT=${OUT:-/tmp/ab}
export HF_DYNASPEC_HOME=$OUT/home  # one cost cache for both trees: the same measured costs plan both
mkdir -p "$HF_DYNASPEC_HOME" && ln -sfn ~/.cache/hf-dynaspec/models "$HF_DYNASPEC_HOME/models"
T=qwen2.5-coder-0.5b-instruct
for rep in 1 2; do
  for tree in old new; do
    root=$([ $tree = old ] && echo "$OLD_TREE" || pwd)
    echo "== rep $rep $tree $(date +%T)"
    PYTHONPATH=$root .venv/bin/python -m hf_dynaspec.cli bench --target $T --assistant assistants/$T \
      --medusa assistants/$T-medusa \
      --methods vanilla,dynaspec:8+lookup:5+suffix+auto,dynaspec-tree:8+lookup:5+suffix+auto,medusa-auto+shortlist+lookup \
      --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 1 \
      --max-new-tokens 64 --dtype bf16 --results "$OUT/results.jsonl" --json "$OUT/${tree}_${rep}.json" > "$OUT/${tree}_${rep}.log" 2>&1
  done
done
