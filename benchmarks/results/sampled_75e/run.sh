#!/usr/bin/env bash
# #75 re-measure at 5be62a3 (no change to the sampled route since 793c361) once this host was back at its usual
# speed (AVX-512 BF16 + AMX, 2 cores, 2026-11-29 ~17:05; nothing else running): the 0.5B, greedy then sampled, back
# to back, exactly as sampled_75c/run.sh's "greedy" and "after" runs (14 dev prompts, 2 per category, x 64 new
# tokens, bf16, the shipped assistant with its defaults, the checkpoint's own sampling settings).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=benchmarks/results/sampled_75e
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
target=qwen2.5-coder-0.5b-instruct
common=(--target "$target" --methods "vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto" --prompts "$prompts"
        --limit-per-category 2 --max-new-tokens 64 --dtype bf16)
hf-dynaspec bench "${common[@]}" --json "$here/${target}_greedy.json" > "$here/${target}_greedy.txt" 2>&1
echo "greedy: exit $?"
hf-dynaspec bench "${common[@]}" --sample --json "$here/${target}_sampled.json" > "$here/${target}_sampled.txt" 2>&1
echo "sampled: exit $?"
