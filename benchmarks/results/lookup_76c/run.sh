#!/usr/bin/env bash
# #76 diagnosis (AVX-512 BF16 + AMX host, 2 cores, 2026-11-29, a host running at a varying fraction of its usual
# speed: compare taus, and speeds only within one run): why the default's tau trails transformers' prompt lookup
# on RAG and summarization. Per target, the dev prompts of those two categories (1 each) x 64 new tokens, greedy,
# bf16: the default as shipped (prompt lookup copies after the most recent occurrence of the last n-gram), then
# with the earliest occurrence (as transformers' prompt lookup), then earliest with 1-grams too (earliest_copy.py).
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
here=benchmarks/results/lookup_76c
methods=vanilla,prompt-lookup,dynaspec+lookup:5+suffix+auto
for target in qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    common=(--target "$target" --methods "$methods" --prompts ../shared/data/eval/spec_bench_dev.jsonl
            --categories summarization,rag --limit-per-category 1 --max-new-tokens 64 --dtype bf16)
    hf-dynaspec bench "${common[@]}" --json "$here/${target}_recent.json" > "$here/${target}_recent.txt" 2>&1
    python "$here/earliest_copy.py" bench "${common[@]}" --json "$here/${target}_earliest.json" \
        > "$here/${target}_earliest.txt" 2>&1
    MIN_NGRAM=1 python "$here/earliest_copy.py" bench "${common[@]}" --json "$here/${target}_earliest_1gram.json" \
        > "$here/${target}_earliest_1gram.txt" 2>&1
    echo "$target: done"
done
