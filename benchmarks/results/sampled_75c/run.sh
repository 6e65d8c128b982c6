#!/usr/bin/env bash
# #75 (AVX-512 BF16 + AMX host, 2 cores): the target's sampling at the cost of its few tokens (SparseTopP, the
# sparse race, empty rounds drawn by the package's sampler). Per target, back to back with nothing else running:
# greedy (unchanged by this work), sampled with this commit ("after"), sampled with the code before it ("before":
# `git worktree add --detach /tmp/before75 4cb1c3d`, put first on PYTHONPATH). 14 dev prompts (2 per category) x 64
# new tokens, bf16, the shipped assistant with the defaults users get, the checkpoint's own sampling settings.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
here=$out/sampled_75c
shared=$(cd ../shared && pwd)
prompts=$shared/data/eval/spec_bench_dev.jsonl,$shared/data/eval/humaneval_dev.jsonl
root=$(pwd)
before=${BEFORE_TREE:-/tmp/before75}
method=dynaspec+lookup:5+suffix+auto
common=(--methods "vanilla,vanilla-fast,$method" --prompts "$prompts" --limit-per-category 2 --max-new-tokens 64 --dtype bf16)
for target in ${TARGETS:-qwen2.5-coder-0.5b-instruct qwen2.5-coder-1.5b-instruct}; do
    hf-dynaspec bench --target "$target" "${common[@]}" \
        --json "$here/${target}_greedy.json" --results "$out/results.jsonl" > "$here/${target}_greedy.txt" 2>&1
    echo "greedy $target: exit $?"
    hf-dynaspec bench --target "$target" "${common[@]}" --sample \
        --json "$here/${target}_sampled_after.json" --results "$out/results.jsonl" > "$here/${target}_sampled_after.txt" 2>&1
    echo "sampled after $target: exit $?"
    # from inside the worktree: `python -m` puts the current directory first on sys.path
    (cd "$before" && PYTHONPATH=$before python -m hf_dynaspec.cli bench --target "$target" "${common[@]}" --sample \
        --json "$root/$here/${target}_sampled_before.json" --results "$root/$out/results.jsonl" \
        > "$root/$here/${target}_sampled_before.txt" 2>&1)
    echo "sampled before $target: exit $?"
done
echo done
