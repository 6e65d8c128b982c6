#!/bin/bash
# Issue 93: the data curve's next point. The shipped 0.5B drafter (version 10) continues for one pass over all the
# new own answers in the repository: the target's greedy bf16 answers, files 38 to LAST_GREEDY of
# data/self_distill/$T-bf16, and its sampled ones (published settings, seed 1), files 38 to LAST_SAMPLED of $T-bf16-s1.
# Trained as continue.sh and sampled_vs_greedy.sh train (EAGLE-1 loss, unroll 2, lr 2e-4, warmup-stable-decay with
# the last fifth decaying, 2,048 tokens per batch); then teacher-forced agreement at draft positions 1-3, simulated
# greedy tau and drawn-draft acceptance at the published warpers on the dev answers (greedy and sampled), beside the
# shipped drafter. Resumable: every step skips what exists, and training resumes from its last checkpoint.
# Usage: scale.sh LAST_GREEDY [LAST_SAMPLED]  (without LAST_SAMPLED greedy answers only; training runs one pass: as
#   many tokens as the feature sets hold)
# Another target (each has its defaults below; the 0.5B's are the ones above):
#   T=gemma-3-270m O=outputs/recipe93/dev-gemma-3-270m FIRST=35 ANSWERS=gemma-3-270m WARPERS=1.0,64,0.95 scale.sh LAST
# FIRST_SAMPLED: the sampled answers' first file where it is not FIRST; AGREEMENT: the record's path (a new one for a
# new try, so that an earlier try's record stays); FP32_LAST: also the greedy fp32 answers written on hosts without bf16
# units, files FP32_FIRST (default 132) to FP32_LAST of data/self_distill/$T-fp32 (the same prompt order).
# The 0.5B's next step from version 11 (everything it has not seen; 2026-12-08):
#   FIRST=126 FIRST_SAMPLED=38 FP32_LAST=<last fp32 file> AGREEMENT=benchmarks/results/round_93/scale_05b_v12_agreement.json \
#     benchmarks/recipe93/scale.sh 131 94
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
lg=$1; ls=$2; T=${T:-qwen2.5-coder-0.5b-instruct}; O=${O:-outputs/recipe93}; FIRST=${FIRST:-38}
ANSWERS=${ANSWERS:-$T-bf16}; WARPERS=${WARPERS:-0.7,20,0.8}  # the answers' folder; the published top-k/top-p warpers
FIRST_SAMPLED=${FIRST_SAMPLED:-$FIRST}
default_record=benchmarks/results/round_93/scale_05b_agreement.json
[ $T = qwen2.5-coder-0.5b-instruct ] || default_record=benchmarks/results/round_93/scale_${T}_agreement.json
AGREEMENT=${AGREEMENT:-$default_record}
FP32_FIRST=${FP32_FIRST:-132}
sets=$O/greedy-$FIRST-$lg; [ -n "$ls" ] && sets="$sets $O/sampled-$FIRST_SAMPLED-$ls"
[ -n "$FP32_LAST" ] && sets="$sets $O/fp32-$FP32_FIRST-$FP32_LAST"
. benchmarks/recipe93/dev_answers.sh
features() { out=$1; data=$2; first=$3; last=$4; [ -f $out/done ] || { python -m recipes.build_features --target $T --out $out \
  --conversations data/self_distill/$data --first-file $first --last-file $last --dtype bf16 --max-length 1024 \
  --max-tokens 100000000 --sequences-per-shard 128 && touch $out/done; }; }
features $O/greedy-$FIRST-$lg $ANSWERS $FIRST $lg
[ -n "$ls" ] && features $O/sampled-$FIRST_SAMPLED-$ls $ANSWERS-s1 $FIRST_SAMPLED $ls
[ -n "$FP32_LAST" ] && features $O/fp32-$FP32_FIRST-$FP32_LAST $T-fp32 $FP32_FIRST $FP32_LAST
dev_answers dev; dev_answers dev-s1 --sample --seed 1
name=M-$lg${ls:+-$ls}${FP32_LAST:+-f$FP32_LAST}
max=$(python -c "import sys; from pathlib import Path; from safetensors import safe_open
print(sum(safe_open(str(p), 'pt').get_slice('input_ids').get_shape()[0] for d in sys.argv[1:] for p in Path(d).glob('shard_*.safetensors')))" \
  $sets)
echo "one pass: $max tokens"
[ -f $O/runs/$name/done ] || { python -m recipes.train_drafter --target $T --init assistants/$T --lr 2e-4 --warmup-steps 10 \
  --tokens-per-batch 2048 --val-tokens 2000 --validate-every 100000 --checkpoint-every 25 --schedule wsd \
  --mixed-precision auto --unroll 2 --reg-weight 1.0 --features $sets \
  --max-tokens $max --decay-tokens $((max / 5)) --out $O/runs/$name && touch $O/runs/$name/done; }
python benchmarks/feature_agreement.py --target $T --assistant shipped=assistants/$T $name=$O/runs/$name/assistant \
  --features dev=$O/dev-feat dev-s1=$O/dev-s1-feat --depths 3 --answers-only --chain-tau 2,4 --sampled $WARPERS \
  --json $AGREEMENT
echo done
