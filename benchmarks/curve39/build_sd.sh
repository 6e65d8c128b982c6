#!/bin/bash
# The "target's own answers" kind for the 0.5B target: every kept self-distilled answer set, teacher-forced in bf16.
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
for set in qwen2.5-coder-0.5b-instruct qwen2.5-coder-0.5b-instruct-tasks qwen2.5-coder-0.5b-instruct-tasks-seed1 qwen2.5-coder-0.5b-instruct-tasks-seed2; do
  python -m recipes.build_features --target qwen2.5-coder-0.5b-instruct --out outputs/curve39/features-05b-sd/$set \
    --conversations data/self_distill/$set --dtype bf16 --max-length 1024 --sequences-per-shard 128
done
echo done
