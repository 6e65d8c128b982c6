#!/bin/bash
# Interleaved A/B (run 2026-12-05 with the old code in a worktree at /tmp/old, outputs in /tmp/ab): today's vanilla-fast (bf70e34) against the compiled one (the working tree), dev prompts.
cd /work/main && source .venv/bin/activate
ARGS="bench --target qwen2.5-coder-0.5b-instruct --methods vanilla,vanilla-fast --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 1 --max-new-tokens 64 --dtype bf16"
for r in 1 2; do
  for side in old new; do
    root=/work/main; [ $side = old ] && root=/tmp/old
    echo "== $side round $r $(date +%T)"
    python -c "import sys; sys.meta_path=[f for f in sys.meta_path if \"editable\" not in repr(f)]; sys.path.insert(0, \"$root\"); import hf_dynaspec; print(hf_dynaspec.__file__, flush=True); from hf_dynaspec.cli import main; sys.argv=['hf-dynaspec']+sys.argv[1:]; main()" $ARGS --json /tmp/ab/${side}_$r.json 2>&1 | grep -v "Warning\|warn(" | tail -25
  done
done
echo "== done $(date +%T)"
