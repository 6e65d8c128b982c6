#!/usr/bin/env bash
# #76, 2026-11-29: where the 1.5B's default loses decode speed to transformers' prompt lookup on summarization and
# RAG (run.sh: decode 1.70x vs 1.96x). The same prompts with the drafter-free assistant beside both: is it the
# drafter's rounds? AVX-512 BF16 + AMX host, 2 cores, nothing else running.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results/copies_76
target=qwen2.5-coder-1.5b-instruct
hf-dynaspec bench --target "$target" --methods vanilla,prompt-lookup,dynaspec+lookup:5+suffix+auto,drafter-free \
    --prompts ../shared/data/eval/spec_bench_dev.jsonl --categories summarization,rag --limit-per-category 4 \
    --max-new-tokens 128 --dtype bf16 --json "$out/diag_${target}.json" > "$out/diag_${target}.txt" 2>&1
echo "diag $target: exit $?"
