#!/usr/bin/env bash
# #75 (AVX-512 BF16 + AMX host, 2 cores; on 2026-11-29 this host ran plain decoding at ~half its earlier speed:
# 0.5B vanilla 5.05 tok/s against 10.17 the session before; compare only within this run). Sampled drafting as
# shipped against point-mass drafts (point_mass_drafts.py), back to back, then greedy, on the 0.5B: 14 dev prompts
# (2 per category) x 64 new tokens, bf16, the shipped assistant with its defaults, the checkpoint's sampling settings.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
here=$out/sampled_75d
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
method=dynaspec+lookup:5+suffix+auto
target=${TARGET:-qwen2.5-coder-0.5b-instruct}
common=(--target "$target" --methods "vanilla,vanilla-fast,$method" --prompts "$prompts" --limit-per-category 2
        --max-new-tokens 64 --dtype bf16)
hf-dynaspec bench "${common[@]}" --sample --json "$here/${target}_sampled_drawn.json" > "$here/${target}_sampled_drawn.txt" 2>&1
echo "sampled drawn: exit $?"
python "$here/point_mass_drafts.py" bench "${common[@]}" --sample --json "$here/${target}_sampled_point_mass.json" \
    > "$here/${target}_sampled_point_mass.txt" 2>&1
echo "sampled point mass: exit $?"
hf-dynaspec bench "${common[@]}" --json "$here/${target}_greedy.json" > "$here/${target}_greedy.txt" 2>&1
echo "greedy: exit $?"
echo done
