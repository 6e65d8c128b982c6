#!/bin/bash
# Issue 93: Gemma-3-270M's drafter, version 2 try: version 1 continued (scale.sh with T=gemma-3-270m) on the target's
# greedy bf16 answers from file 35 on, then as ship_05b.sh: the router refit as version 1's (256 k-means clusters of the
# target's head, seed 0, the 4,096 most frequent tokens always scored, the FR-Spec counts over the answers), version
# 1's options with both priors re-measured on the 48 starter prompts, one interleaved run per mode against version 1
# (vanilla, vanilla-fast, both defaults; 21 dev prompts, 64 new tokens, bf16; JSON only), and the package (license
# gemma: a Model Derivative under the Gemma Terms of Use). Resumable: every step skips what exists.
# Usage: ship_gemma.sh LAST  (LAST: the last answers file scale.sh trained on)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
last=$1; T=gemma-3-270m; O=outputs/recipe93/dev-$T; M=$O/runs/M-$last; S=$O/ship; R=benchmarks/results/round_93
FEATS=$O/greedy-35-$last
mkdir -p $S
[ -f $S/v2/model.safetensors ] || python -m recipes.build_shortlists --target $T --assistant $M/assistant --features $FEATS \
  --data data/self_distill/$T --router-tokens 120000 --clusters 256 --core-frequent 4096 --out $S/v2 | tee $S/shortlists.log
[ -f $S/priors.done ] || { cp assistants/$T/generation_config.json $S/v2/generation_config.json
  python -m recipes.measure_acceptance --assistant $S/v2 --target $T --write
  python -m recipes.measure_acceptance --assistant $S/v2 --target $T --sample --write && touch $S/priors.done; }
bench() { out=$1; shift; [ -f $out ] || hf-dynaspec bench --target $T --assistant v1=assistants/$T --assistant v2=$S/v2 \
  --methods vanilla,vanilla-fast,v2/dynaspec+lookup:5+suffix+auto,v1/dynaspec+lookup:5+suffix+auto \
  --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 3 \
  --max-new-tokens 64 --dtype bf16 "$@" --json $out; }
bench $R/ship_gemma_v2_sampled.json --sample
bench $R/ship_gemma_v2_greedy.json
echo done
