#!/usr/bin/env bash
# #76 item 2/4 (AVX-512 BF16 + AMX host, 2 cores): the drafter-free assistant (DynaSpecAssistant.for_target)
# against plain decoding (vanilla, vanilla-fast) and transformers' prompt lookup, greedy, on the dev prompts, one
# interleaved run per target; the shipped assistant's default method beside it where one ships. Nothing else ran.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
for target in smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    methods=vanilla,vanilla-fast,prompt-lookup,drafter-free
    [ -d "assistants/$target" ] && methods="$methods,dynaspec+lookup:5+suffix+auto"
    hf-dynaspec bench --target "$target" --methods "$methods" --prompts "$prompts" \
        --limit-per-category 1 --max-new-tokens 64 --dtype bf16 \
        --json "$out/drafter_free_76/bench_${target}.json" --results "$out/results.jsonl" \
        > "$out/drafter_free_76/bench_${target}.txt" 2>&1
    echo "$target: exit $?"
done
echo done
