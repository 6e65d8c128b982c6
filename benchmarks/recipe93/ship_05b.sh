#!/bin/bash
# Issue 93: package scale.sh's drafter (M) as the 0.5B's assistant, version 11, and time it against version 10.
# 1. The router refit on M's features (build_shortlists as version 10's: 256 k-means clusters of the target's head,
#    seed 0, the 4,096 most frequent tokens always scored: the same clusters, so the shipped row budget holds).
# 2. Version 10's options (generation_config.json) with the priors re-measured, greedy and sampled (run on 2026-12-06
#    with the recipe's then default of 16 starter prompts; it now takes all 48: round_93/priors48.txt).
# 3. One interleaved run each, greedy and sampled at the published settings: vanilla, vanilla-fast, both versions'
#    default; the dev prompts (3 per category), 64 new tokens, bf16. Kept as JSON only, not in results.jsonl: the
#    results summary shows a run's first default, which must be the shipped assistant alone (run on 2026-12-06
#    with --results, and the rows taken out again).
# 4. The package (model card with the data, the commands and the greedy run).
# Resumable: every step skips what exists. Usage: ship_05b.sh  (after scale.sh 125)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
O=outputs/recipe93; T=qwen2.5-coder-0.5b-instruct; M=$O/runs/M-125; S=$O/ship; R=benchmarks/results/round_93
FEATS=$O/greedy-38-125
mkdir -p $S
[ -f $S/v11/model.safetensors ] || python -m recipes.build_shortlists --target $T --assistant $M/assistant --features $FEATS \
  --router-tokens 120000 --clusters 256 --core-frequent 4096 --out $S/v11 | tee $S/shortlists.log
python -c "import sys; from safetensors.torch import load_file; a, b = (load_file(f'{d}/model.safetensors') for d in sys.argv[1:])
keys = ['shortlists.cluster_offsets', 'shortlists.cluster_token_order', 'shortlists.always_ids', 'shortlists.frequency_ids']; print('clusters as version 10:', all((a[k] == b[k]).all().item() for k in keys), keys)" \
  assistants/$T $S/v11 | tee -a $S/shortlists.log
[ -f $S/priors.done ] || { cp assistants/$T/generation_config.json $S/v11/generation_config.json
  python -m recipes.measure_acceptance --assistant $S/v11 --target $T --write
  python -m recipes.measure_acceptance --assistant $S/v11 --target $T --sample --write && touch $S/priors.done; }
bench() { out=$1; shift; [ -f $out ] || hf-dynaspec bench --target $T --assistant v10=assistants/$T --assistant v11=$S/v11 \
  --methods vanilla,vanilla-fast,v11/dynaspec+lookup:5+suffix+auto,v10/dynaspec+lookup:5+suffix+auto \
  --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 3 \
  --max-new-tokens 64 --dtype bf16 "$@" --json $out; }
bench $R/ship_05b_v11_greedy.json
bench $R/ship_05b_v11_sampled.json --sample
[ -f $S/package/model.safetensors ] || python -m recipes.package_assistant --assistant $S/v11 --out $S/package --train-dir $M \
  --features $FEATS --commands benchmarks/results/assistant_05b_commands.txt --bench $R/ship_05b_v11_greedy.json \
  --bench-label v11 --data "Version 10 of this assistant (version 8 fine-tuned on the provided responses of \
../shared/data/train, the target's own fp32 greedy answers and three task-format sets; issue 39) continued for one pass \
(issue 93) over 1,162,850 answer tokens of the target's own greedy bf16 answers to 5,632 training prompts it never saw \
(files 38-125 of data/self_distill/qwen2.5-coder-0.5b-instruct-bf16, recipes.self_distill); bf16 features of the target \
(top-16, recipes.build_features), lr 2e-4 warmup-stable-decay, EAGLE-1 loss with a 2-step unroll; chat template; \
benchmarks/results/assistant_05b_commands.txt"
echo done
