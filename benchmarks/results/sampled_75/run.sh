#!/usr/bin/env bash
# #75 / #76 measurements (AVX-512 BF16 + AMX host, 2 cores): five demo runs in bf16 (the verdict each time), then
# one sampled interleaved bench per target with the target's published sampling settings. Nothing else ran meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
for i in 1 2 3 4 5; do
    hf-dynaspec demo --json "$out/demo_bf16_76/run$i.json" > "$out/demo_bf16_76/run$i.txt" 2>&1
    echo "demo run $i: exit $? $(grep '^outputs:' "$out/demo_bf16_76/run$i.txt") $(grep '^assisted:' "$out/demo_bf16_76/run$i.txt")"
done
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
for target in qwen2.5-coder-0.5b-instruct gemma-3-270m qwen2.5-coder-1.5b-instruct; do
    hf-dynaspec bench --target "$target" --methods vanilla,vanilla-fast,dynaspec+lookup:5+suffix+auto --prompts "$prompts" \
        --limit-per-category 1 --max-new-tokens 64 --dtype bf16 --sample \
        --json "$out/sampled_75/bench_${target}_sampled.json" --results "$out/results.jsonl" \
        > "$out/sampled_75/bench_${target}_sampled.txt" 2>&1
    echo "bench $target: exit $?"
done
echo done
