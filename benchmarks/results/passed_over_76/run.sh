#!/usr/bin/env bash
# #76 (AVX-512 BF16 + AMX host, 2 cores), 2026-11-29: after lookups passed over learn their first position
# (LookupSources.learn -> record_passed_over), the drafter-free assistant and the shipped default against plain
# decoding and transformers' prompt lookup, greedy, dev prompts, one interleaved run per target, as
# drafter_free_76/run.sh ran them before the change (compare ratios within each run). Nothing else ran.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
for target in qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    methods=vanilla,vanilla-fast,prompt-lookup,drafter-free,dynaspec+lookup:5+suffix+auto
    hf-dynaspec bench --target "$target" --methods "$methods" --prompts "$prompts" \
        --limit-per-category 1 --max-new-tokens 64 --dtype bf16 \
        --json "$out/passed_over_76/bench_${target}.json" --results "$out/results.jsonl" \
        > "$out/passed_over_76/bench_${target}.txt" 2>&1
    echo "$target: exit $?"
done
echo done
