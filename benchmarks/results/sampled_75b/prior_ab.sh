#!/usr/bin/env bash
# #75 item 4, the sampled prior alone (AVX-512 BF16 + AMX host, 2 cores): the 0.5B's shipped assistant as committed
# now ("with": expected_acceptance holds greedy and sampled priors) against the same artifact without its sampled
# prior ("without": a sampled call then starts from the greedy prior, as before), sampled, 2 dev prompts per
# category, interleaved. Nothing else ran meanwhile.
set -uo pipefail
cd "$(dirname "$0")/../../.."
. .venv/bin/activate
out=benchmarks/results
prompts=../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl
target=qwen2.5-coder-0.5b-instruct
without=/tmp/without_sampled_prior/$target
rm -rf "$without" && mkdir -p "$without" && cp -r assistants/$target/. "$without/"
python - "$without/generation_config.json" <<'PY'
import json, sys
path = sys.argv[1]
config = json.load(open(path))
del config["expected_acceptance"]["sampled"]
json.dump(config, open(path, "w"), indent=2, sort_keys=True)
PY
method=dynaspec+lookup:5+suffix+auto
hf-dynaspec bench --target "$target" --assistant without="$without" --assistant with=assistants/$target \
    --methods "vanilla,vanilla-fast,without/$method,with/$method" --prompts "$prompts" \
    --limit-per-category 2 --max-new-tokens 64 --dtype bf16 --sample \
    --json "$out/sampled_75b/prior_ab_${target}.json" --results "$out/results.jsonl" \
    > "$out/sampled_75b/prior_ab_${target}.txt" 2>&1
echo "prior a/b $target: exit $?"
