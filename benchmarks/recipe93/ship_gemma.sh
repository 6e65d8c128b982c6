#!/bin/bash
# Issue 93: package scale.sh's Gemma-3-270M drafter (version 2 continued over greedy files 35-55 again and the new
# sampled answers, files 56-LAST of data/self_distill/gemma-3-270m-s1) as the assistant's version 3, timed against
# version 2, as ship_05b.sh does for the 0.5B:
# 1. the router refit on the run's features (256 k-means clusters of the target's head, seed 0, the 4,096 most
#    frequent tokens always scored, as version 2);
# 2. version 2's options (generation_config.json) with the priors re-measured, greedy and sampled (48 starter prompts);
# 3. one interleaved run, sampled at the published settings (the mode with a bar on this target): vanilla,
#    vanilla-fast, both versions' default; dev prompts (3 per category), 64 new tokens, bf16; JSON only;
# 4. the package (model card: data, commands, the sampled run).
# Resumable: every step skips what exists. Usage: ship_gemma.sh LAST  (after scale.sh 55 LAST)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
last=$1; O=outputs/recipe93/dev-gemma-3-270m; T=gemma-3-270m; M=$O/runs/M-55-$last; S=$O/ship
R=benchmarks/results/round_93; FEATS="$O/greedy-35-55 $O/sampled-56-$last"
[ -f $S/v3/model.safetensors ] || python -m recipes.build_shortlists --target $T --assistant $M/assistant --features $FEATS \
  --data data/self_distill/$T --router-tokens 120000 --clusters 256 --core-frequent 4096 --out $S/v3 | tee $S/shortlists-v3.log
[ -f $S/priors-v3.done ] || { cp assistants/$T/generation_config.json $S/v3/generation_config.json
  python -m recipes.measure_acceptance --assistant $S/v3 --target $T --write
  python -m recipes.measure_acceptance --assistant $S/v3 --target $T --sample --write && touch $S/priors-v3.done; }
[ -f $R/ship_gemma_v3_sampled.json ] || hf-dynaspec bench --target $T --assistant v2=assistants/$T --assistant v3=$S/v3 \
  --methods vanilla,vanilla-fast,v3/dynaspec+lookup:5+suffix+auto,v2/dynaspec+lookup:5+suffix+auto \
  --prompts ../shared/data/eval/spec_bench_dev.jsonl,../shared/data/eval/humaneval_dev.jsonl --limit-per-category 3 \
  --max-new-tokens 64 --dtype bf16 --sample --json $R/ship_gemma_v3_sampled.json
[ -f $S/package-v3/model.safetensors ] || python -m recipes.package_assistant --assistant $S/v3 --out $S/package-v3 \
  --train-dir $M --features $FEATS --commands benchmarks/results/assistant_gemma270m_commands.txt --license gemma \
  --bench $R/ship_gemma_v3_sampled.json --bench-label v3 --data "Version 2 of this assistant (version 1, trained on \
the target's own greedy bf16 answers to 2,240 training prompts, continued for one pass over its greedy answers to \
1,344 more) continued for one more pass (issue 93) over those 1,344 greedy answers (files 35-55 of \
data/self_distill/gemma-3-270m) and the target's answers sampled at its published settings (top-k 64, top-p 0.95, \
seed 1) to the next training prompts, files 56-$last of data/self_distill/gemma-3-270m-s1 (recipes.self_distill \
--sample); plain-text prompts (a base model), bf16 features of the target (top-16, recipes.build_features), lr 2e-4 \
warmup-stable-decay, EAGLE-1 loss with a 2-step unroll; benchmarks/results/assistant_gemma270m_commands.txt"
echo done
