#!/bin/bash
# Issue 92's "speed and outputs unchanged": the code before (95067bd, a worktree at /tmp/old92) and after (the
# working tree) alternated as processes, the 0.5B in bf16 on the dev prompts, greedy and sampled (the checkpoint's
# published settings), one round per call (R=1, R=2, ...); outputs in /tmp/ab92, kept here as JSON.
#   git worktree add /tmp/old92 95067bd && bash benchmarks/results/round_92/ab_worktree.sh
# The second part (proposers, one round, one planner) compared 63ed4ad with the working tree the same way:
#   git worktree add /tmp/old92b 63ed4ad && OLD=/tmp/old92b OUT=/tmp/ab92b bash benchmarks/results/round_92/ab_worktree.sh
R=${R:-1}  # the round: its files end _rR
OLD=${OLD:-/tmp/old92} OUT=${OUT:-/tmp/ab92}
cd /work/main && source .venv/bin/activate && mkdir -p $OUT
ARGS="bench --target qwen2.5-coder-0.5b-instruct --methods vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto,drafter-free --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 1 --max-new-tokens 64 --dtype bf16"
for mode in greedy sampled; do
  extra=""; [ $mode = sampled ] && extra="--sample"
  for side in ${ORDER:-old new}; do  # ORDER="new old" for a second round
    root=/work/main; [ $side = old ] && root=$OLD
    echo "== $side $mode $(date +%T)"
    python -c "import sys; sys.meta_path=[f for f in sys.meta_path if \"editable\" not in repr(f)]; sys.path.insert(0, \"$root\"); import hf_dynaspec; print(hf_dynaspec.__file__, flush=True); from hf_dynaspec.cli import main; sys.argv=['hf-dynaspec']+sys.argv[1:]; main()" $ARGS $extra --json $OUT/${side}_${mode}_r$R.json 2>&1 | grep -v "Warning\|warn(" | tail -22
  done
done
echo "== done $(date +%T)"
