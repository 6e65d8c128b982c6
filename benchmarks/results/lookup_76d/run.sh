#!/usr/bin/env bash
# #76 bar 3 with prompt lookup's earliest occurrence as a planned source (the commit after c0a203c): per target, the
# summarization and RAG dev prompts (2 each) x 64 new tokens, greedy, bf16, one interleaved run: plain, transformers'
# prompt lookup, the drafter-free assistant and (where one ships) the shipped assistant's default; then the same
# run of the drafter-free and default methods at c0a203c (before the new source; a worktree at /tmp/before76).
# Host: AVX-512 BF16 without AMX, 2 cores, 2026-11-29, nothing else running (after sampled_75f/run.sh).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=$PWD/benchmarks/results/lookup_76d
prompts=$PWD/../shared/data/eval/spec_bench_dev.jsonl
for target in smollm2-135m-instruct gemma-3-270m qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    methods=vanilla,prompt-lookup,drafter-free
    [ -d "assistants/$target" ] && methods="$methods,dynaspec+lookup:5+suffix+auto"
    common=(--target "$target" --prompts "$prompts" --categories summarization,rag --limit-per-category 2
            --max-new-tokens 64 --dtype bf16)
    hf-dynaspec bench "${common[@]}" --methods "$methods" --json "$here/${target}.json" > "$here/${target}.txt" 2>&1
    echo "$target: exit $? $(date +%T)"
    (cd /tmp/before76 && PYTHONPATH=/tmp/before76 hf-dynaspec bench "${common[@]}" --methods "vanilla,${methods#vanilla,prompt-lookup,}" \
        --json "$here/${target}_before.json" > "$here/${target}_before.txt" 2>&1)
    echo "$target before: exit $? $(date +%T)"
done
