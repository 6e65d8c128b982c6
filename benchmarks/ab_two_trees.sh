#!/usr/bin/env bash
# Before/after a change, interleaved: the same `hf-dynaspec bench` from an old tree and this one, alternately, twice
# (speed does not carry across runs of a shared host; alternating spreads its drift over both). Each tree loads
# its own assistants/ (an artifact's options may change with the code), from its own directory (checked: the
# package imported is the tree's). Used for issue 62 (whose runs, before that check, imported this tree both times):
#   git worktree add /tmp/ab/old_tree 4560339 && OLD_TREE=/tmp/ab/old_tree OUT=/tmp/ab bash benchmarks/ab_two_trees.sh
# and issue 63 (the row budget against the cluster-count rule, per shipped assistant):
#   git worktree add /tmp/ab63/old_tree 44c9b44 && OLD_TREE=/tmp/ab63/old_tree OUT=/tmp/ab63 MEDUSA=0 \
#     TARGETS="qwen2.5-coder-0.5b-instruct gemma-3-270m qwen2.5-coder-1.5b-instruct" \
#     METHODS=vanilla,dynaspec+draft:3,dynaspec+lookup:5+suffix+auto bash benchmarks/ab_two_trees.sh
# and issue 92 (the package's core cut down; greedy, then sampled with EXTRA=--sample):
#   git worktree add /tmp/ab/old_tree caea732 && OLD_TREE=/tmp/ab/old_tree OUT=/tmp/ab/greedy MEDUSA=0 \
#     METHODS=vanilla,dynaspec+lookup:5+suffix+auto bash benchmarks/ab_two_trees.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OLD_TREE:?the old tree (a git worktree of the commit before the change)}"
OUT=${OUT:-/tmp/ab}
TARGETS=${TARGETS:-qwen2.5-coder-0.5b-instruct}
METHODS=${METHODS:-vanilla,dynaspec:8+lookup:5+suffix+auto,dynaspec-tree:8+lookup:5+suffix+auto,medusa-auto+shortlist+lookup}
MEDUSA=${MEDUSA:-1}
EXTRA=${EXTRA:-}  # more bench arguments for every run, e.g. "--sample" (issue 92's sampled before/after)
PY=$(pwd)/.venv/bin/python
DATA=$(cd ../shared/data/eval && pwd)
export HF_DYNASPEC_HOME=$OUT/home  # one cost cache for both trees: the same measured costs plan both
mkdir -p "$HF_DYNASPEC_HOME" && ln -sfn ~/.cache/hf-dynaspec/models "$HF_DYNASPEC_HOME/models"
for T in $TARGETS; do
  for rep in 1 2; do
    for tree in old new; do
      root=$([ $tree = old ] && echo "$OLD_TREE" || pwd)
      medusa=()
      [ "$MEDUSA" = 1 ] && medusa=(--medusa "$root/assistants/$T-medusa")
      name=$([ "$TARGETS" = qwen2.5-coder-0.5b-instruct ] && echo "${tree}_${rep}" || echo "${T}_${tree}_${rep}")
      echo "== $T rep $rep $tree $(date +%T)"
      # Run from the tree itself: `python -m` puts the working directory first on sys.path, ahead of PYTHONPATH,
      # so a run started here would import this tree's package whatever PYTHONPATH says (the issue-62 runs did).
      (cd "$root" && PYTHONPATH=$root "$PY" -c "import hf_dynaspec, sys; assert hf_dynaspec.__file__.startswith('$root'), hf_dynaspec.__file__" \
        && PYTHONPATH=$root "$PY" -m hf_dynaspec.cli bench --target $T --assistant "$root/assistants/$T" \
        "${medusa[@]}" --methods "$METHODS" --prompts "$DATA/spec_bench_dev.jsonl,$DATA/humaneval_dev.jsonl" \
        --limit-per-category 1 --max-new-tokens ${MAX_NEW_TOKENS:-64} --dtype bf16 --results "$OUT/results.jsonl" \
        --json "$OUT/$name.json" $EXTRA) > "$OUT/$name.log" 2>&1
    done
  done
done
