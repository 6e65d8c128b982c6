#!/usr/bin/env bash
# #76 item 3: copies as long as they pay. The default (`auto` with prompt lookup and the suffix cache) against
# transformers' prompt lookup on the summarization and RAG dev prompts, one interleaved run per target, bf16, on
# the AVX-512 BF16 + AMX host (2 cores); nothing else ran meanwhile. A target with no shipped assistant
# (SmolLM2-135M) runs its default, the drafter-free assistant. 2026-11-29: run for the 0.5B and Gemma-3-270M, then
# with TARGETS="qwen2.5-coder-1.5b-instruct smollm2-135m-instruct".
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results/copies_76
for target in ${TARGETS:-qwen2.5-coder-0.5b-instruct gemma-3-270m}; do
    default=dynaspec+lookup:5+suffix+auto
    [ -d "assistants/$target" ] || default=drafter-free
    hf-dynaspec bench --target "$target" --methods "vanilla,prompt-lookup,$default" \
        --prompts ../shared/data/eval/spec_bench_dev.jsonl --categories summarization,rag --limit-per-category 4 \
        --max-new-tokens 128 --dtype bf16 --json "$out/bench_${target}.json" --results benchmarks/results/results.jsonl \
        > "$out/bench_${target}.txt" 2>&1
    echo "bench $target: exit $?"
done
echo done
