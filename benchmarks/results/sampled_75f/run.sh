#!/usr/bin/env bash
# #75 after SparseTopKTopP (c0a203c; the run is at the commit that also adds #76's earliest lookup source): the 0.5B
# greedy then sampled (as sampled_75e/run.sh: 14 dev prompts, 2 per category, x 64 new tokens, bf16, the shipped
# assistant's defaults, the checkpoint's own sampling settings), then the 0.5B sampled at 79ba65a (SparseTopP alone,
# a worktree at /tmp/before75f), then the 1.5B greedy and sampled. Host: AVX-512 BF16 without AMX, 2 cores,
# 2026-11-29, nothing else running (lookup_76d/run.sh runs after this one).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=$PWD/benchmarks/results/sampled_75f
prompts=$PWD/../shared/data/eval/spec_bench_dev.jsonl,$PWD/../shared/data/eval/humaneval_dev.jsonl
bench() {  # target, tag, extra args
  local target=$1 tag=$2; shift 2
  hf-dynaspec bench --target "$target" --methods "vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto" \
    --prompts "$prompts" --limit-per-category 2 --max-new-tokens 64 --dtype bf16 "$@" \
    --json "$here/${target}_${tag}.json" > "$here/${target}_${tag}.txt" 2>&1
  echo "$target $tag: exit $? $(date +%T)"
}
bench qwen2.5-coder-0.5b-instruct greedy
bench qwen2.5-coder-0.5b-instruct sampled --sample
(cd /tmp/before75f && PYTHONPATH=/tmp/before75f bench qwen2.5-coder-0.5b-instruct sampled_before --sample)
bench qwen2.5-coder-1.5b-instruct greedy
bench qwen2.5-coder-1.5b-instruct sampled --sample
