#!/usr/bin/env bash
# #75, a second measurement of the sampled/greedy ratio with this commit's code (AVX-512 BF16 + AMX host, 2 cores,
# nothing else running): per target a greedy and a sampled bench back to back, the 0.5B on 21 dev prompts (3 per
# category), the 1.5B on 14 (2 per category), 64 new tokens, bf16, the shipped assistant's defaults, the
# checkpoint's own sampling settings. These are the README's rows.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
here=$out/sampled_75c
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
method=dynaspec+lookup:5+suffix+auto
for spec in qwen2.5-coder-0.5b-instruct:3 qwen2.5-coder-1.5b-instruct:2; do
    target=${spec%%:*} per=${spec##*:}
    for mode in greedy sampled; do
        flag=(); [ "$mode" = sampled ] && flag=(--sample)
        hf-dynaspec bench --target "$target" --methods "vanilla,vanilla-fast,$method" --prompts "$prompts" \
            --limit-per-category "$per" --max-new-tokens 64 --dtype bf16 "${flag[@]}" \
            --json "$here/confirm_${target}_${mode}.json" --results "$out/results.jsonl" \
            > "$here/confirm_${target}_${mode}.txt" 2>&1
        echo "$mode $target: exit $?"
    done
done
echo done
