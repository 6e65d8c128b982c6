#!/bin/bash
# Issue 93: is a sampled answer worth a greedy one? The shipped 0.5B drafter (version 10) continues for one pass over
# the target's own bf16 answers to the same 1,088 prompts (files 38-54), greedy (G: data/self_distill/$T-bf16, 227,838
# answer tokens) or sampled at the published settings (S: $T-bf16-s1, seed 1, 229,205 tokens), or both (GS), as
# continue.sh trains (EAGLE-1 loss, unroll 2, lr 2e-4, warmup-stable-decay, 2,048 tokens per batch). Then, on the
# target's greedy (dev) and sampled (dev-s1) answers to the 28 dev prompts: teacher-forced top-1 agreement at draft
# positions 1-3, simulated greedy tau, and the acceptance of drawn drafts at the published settings (T 0.7, top-k 20,
# top-p 0.8; feature_agreement.py --sampled). Resumable: every step skips what exists.
# Usage: sampled_vs_greedy.sh [PAUSE_PID]  (a background job to stop while this runs, continued at the end)
set -e
cd "$(dirname "$0")/../.." && { [ -f .venv/bin/activate ] && . .venv/bin/activate; true; }
pause=$1; [ -n "$pause" ] && kill -STOP "$pause" && trap 'kill -CONT '"$pause" EXIT
O=outputs/recipe93; T=qwen2.5-coder-0.5b-instruct
. benchmarks/recipe93/dev_answers.sh
dev_answers dev; dev_answers dev-s1 --sample --seed 1
features() { out=$1; data=$2; [ -f $out/done ] || { python -m recipes.build_features --target $T --out $out \
  --conversations data/self_distill/$data --first-file 38 --last-file 54 --dtype bf16 --max-length 1024 \
  --sequences-per-shard 128 && touch $out/done; }; }
features $O/greedy-38-54 $T-bf16
features $O/sampled-38-54 $T-bf16-s1
common="--target $T --init assistants/$T --lr 2e-4 --warmup-steps 10 --tokens-per-batch 2048 --val-tokens 2000 \
  --validate-every 100000 --checkpoint-every 25 --schedule wsd --mixed-precision auto --unroll 2 --reg-weight 1.0"
run() { name=$1; shift; [ -f $O/runs/$name/done ] && return; python -m recipes.train_drafter $common --out $O/runs/$name "$@" && touch $O/runs/$name/done; }
run G --features $O/greedy-38-54 --max-tokens 228000 --decay-tokens 46000
run S --features $O/sampled-38-54 --max-tokens 229000 --decay-tokens 46000
run GS --features $O/greedy-38-54 $O/sampled-38-54 --max-tokens 457000 --decay-tokens 92000
python benchmarks/feature_agreement.py --target $T --assistant shipped=assistants/$T G=$O/runs/G/assistant \
  S=$O/runs/S/assistant GS=$O/runs/GS/assistant --features dev=$O/dev-feat dev-s1=$O/dev-s1-feat --depths 3 \
  --answers-only --chain-tau 2,4 --sampled 0.7,20,0.8 --json benchmarks/results/round_93/sampled_vs_greedy_05b.json
echo done
