#!/usr/bin/env bash
# #76 at this session's request calibration (planning.core.RequestLookup: a call's own lookup outcomes scale the session's
# estimates) and position priors from the longer match's first position: per target, the
# summarization and RAG dev prompts (2 each) x 64 new tokens, greedy, bf16, one interleaved run of plain decoding,
# transformers' prompt lookup, the drafter-free assistant and (where one ships) the shipped assistant's default.
# Host: AVX-512 BF16 without AMX, 2 cores, 2026-11-30, nothing else running.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=$PWD/benchmarks/results/lookup_76f
prompts=$PWD/../shared/data/eval/spec_bench_dev.jsonl
for target in smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    methods=vanilla,prompt-lookup,drafter-free
    [ -d "assistants/$target" ] && methods="$methods,dynaspec+lookup:5+suffix+auto"
    hf-dynaspec bench --target "$target" --prompts "$prompts" --categories summarization,rag --limit-per-category 2 \
        --max-new-tokens 64 --dtype bf16 --methods "$methods" --json "$here/${target}.json" > "$here/${target}.txt" 2>&1
    echo "$target: exit $? $(date +%T)"
done
