#!/usr/bin/env bash
# #75 (AVX-512 BF16 + AMX host, 2 cores): the shipped assistants as committed (sampled prior, verification="auto"
# = block) sampled with their published settings, 7 dev prompts x 64 tokens: the README's sampled rows. Nothing
# else ran meanwhile. (Run as written for the two Qwen targets, then TARGETS=gemma-3-270m.)
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
for target in ${TARGETS:-qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct gemma-3-270m}; do
    hf-dynaspec bench --target "$target" --methods vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto \
        --prompts "$prompts" --limit-per-category 1 --max-new-tokens 64 --dtype bf16 --sample \
        --json "$out/sampled_75b/current_${target}_sampled.json" --results "$out/results.jsonl" \
        > "$out/sampled_75b/current_${target}_sampled.txt" 2>&1
    echo "sampled $target: exit $?"
done
