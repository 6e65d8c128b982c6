#!/usr/bin/env bash
# The current release end to end on an AVX2-only host (2-core AMD EPYC: avx2, no AVX-512, no native bf16 matmul),
# 2026-12-07: the shipped assistants' default against plain decoding and plain decoding on the fastest kernels
# (vanilla-fast), bf16 as users load the checkpoints, greedy and at the published sampling settings; fp32 beside it
# (the dtype an AVX2 host decodes fastest). Each run alone, nothing else on the cores. From the repository root:
#   [LIMIT=N] bash benchmarks/results/avx2_2026-12-07/run.sh [RUN...]   (runs: 05b_bf16 05b_bf16_llama 05b_bf16_sampled 05b_fp32 gemma_bf16;
#   LIMIT: prompts per category, 3 by default: 21 prompts)
# As run: `run.sh 05b_bf16` (47 min: plain bf16 decodes at ~1-1.5 tokens/s here, prefill included), then
# `LIMIT=1 run.sh 05b_fp32`, then llama.cpp beside them (its binding built with `pip install llama-cpp-python==0.3.36`,
# a bf16 GGUF of the cached 0.5B made with the converter it ships, docs/cli.md):
# `LIMIT=1 LLAMA_GGUF_05B=/work/llama/qwen2.5-coder-0.5b-instruct-bf16.gguf run.sh 05b_bf16_llama`.
# Last, `LIMIT=1 run.sh gemma_bf16`. The sampled runs did not fit the session.
set -euo pipefail
here=benchmarks/results/avx2_2026-12-07
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
common=(--prompts "$prompts" --limit-per-category "${LIMIT:-3}" --max-new-tokens 64 --results benchmarks/results/results.jsonl)
default=dynaspec+lookup:5+suffix+auto
llama=${LLAMA_GGUF_05B:+,llama.cpp:$LLAMA_GGUF_05B}  # a bf16 GGUF of the 0.5B (docs/cli.md), when one was made
lscpu | grep -o 'avx512_bf16\|amx\|avx2' | sort -u | tr '\n' ' ' > "$here/host_flags.txt"
for run in "${@:-05b_bf16 05b_bf16_sampled 05b_fp32 gemma_bf16}"; do
  for name in $run; do
    echo "== $name $(date -u +%H:%M:%S)"
    case $name in
      05b_bf16) hf-dynaspec bench --target qwen2.5-coder-0.5b-instruct --methods "vanilla,vanilla-fast,$default,drafter-free$llama" \
                  --dtype bf16 "${common[@]}" --json "$here/05b_bf16_greedy.json" ;;
      05b_bf16_llama) hf-dynaspec bench --target qwen2.5-coder-0.5b-instruct --methods "vanilla,vanilla-fast,$default,llama.cpp:$LLAMA_GGUF_05B" \
                  --dtype bf16 "${common[@]}" --json "$here/05b_bf16_llama_cpp.json" ;;
      05b_bf16_sampled) hf-dynaspec bench --target qwen2.5-coder-0.5b-instruct --methods "vanilla,vanilla-fast,$default" \
                  --dtype bf16 --sample "${common[@]}" --json "$here/05b_bf16_sampled.json" ;;
      05b_fp32) hf-dynaspec bench --target qwen2.5-coder-0.5b-instruct --methods "vanilla,vanilla-fast,$default" \
                  --dtype fp32 "${common[@]}" --json "$here/05b_fp32_greedy.json" ;;
      gemma_bf16) hf-dynaspec bench --target gemma-3-270m --methods "vanilla,vanilla-fast,$default" \
                  --dtype bf16 "${common[@]}" --json "$here/gemma_bf16_greedy.json" ;;
      *) echo "unknown run $name" >&2; exit 2 ;;
    esac
  done
done
