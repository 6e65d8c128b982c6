#!/usr/bin/env bash
# #75 items 4-5 (AVX-512 BF16 + AMX host, 2 cores): per target, one greedy and one sampled interleaved bench on the
# dev prompts, back to back. "before" is the shipped assistant as committed before its sampled prior was measured
# (generation_config.json from git HEAD at the start of the run), "after" carries it; +block verifies sampled drafts
# as a block. Nothing else ran meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
base=${BEFORE_REV:-HEAD}
for target in qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct; do
    before=/tmp/before_assistants/$target
    rm -rf "$before" && mkdir -p "$before" && cp -r assistants/$target/. "$before/"
    git show "$base:assistants/$target/generation_config.json" > "$before/generation_config.json"
    method=dynaspec+lookup:5+suffix+auto
    hf-dynaspec bench --target "$target" --methods "vanilla,vanilla-fast,$method" --prompts "$prompts" \
        --limit-per-category 1 --max-new-tokens 64 --dtype bf16 \
        --json "$out/sampled_75b/bench_${target}_greedy.json" --results "$out/results.jsonl" \
        > "$out/sampled_75b/bench_${target}_greedy.txt" 2>&1
    echo "greedy $target: exit $?"
    hf-dynaspec bench --target "$target" --assistant before="$before" --assistant after=assistants/$target \
        --methods "vanilla,vanilla-fast,before/$method,after/$method,after/$method+block" --prompts "$prompts" \
        --limit-per-category 1 --max-new-tokens 64 --dtype bf16 --sample \
        --json "$out/sampled_75b/bench_${target}_sampled.json" --results "$out/results.jsonl" \
        > "$out/sampled_75b/bench_${target}_sampled.txt" 2>&1
    echo "sampled $target: exit $?"
done
echo done
