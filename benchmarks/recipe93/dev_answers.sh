# Sourced by the issue-93 scripts (with O and T set): the target's own bf16 answers to the 28 dev prompts (4 per
# category of Spec-Bench dev and HumanEval dev) and their features, greedy (`dev_answers dev`) or sampled
# (`dev_answers dev-s1 --sample --seed 1`) into $O/NAME-answers and $O/NAME-feat; skipped when the features exist.
mkdir -p $O
[ -f $O/dev_prompts.jsonl ] || python -c "import json; from hf_dynaspec.bench.prompts import load_prompts; [print(json.dumps({'question_id': p.prompt_id, 'category': p.category, 'turns': [p.text]})) for p in load_prompts(['../shared/data/eval/spec_bench_dev.jsonl', '../shared/data/eval/humaneval_dev.jsonl'], 4)]" > $O/dev_prompts.jsonl
dev_answers() { name=$1; shift; [ -f $O/$name-feat/shard_00000.safetensors ] && return
  python -m recipes.self_distill --target $T --prompts $O/dev_prompts.jsonl --out $O/$name-answers --batch-size 28 \
    --prompts-per-file 28 --max-new-tokens 128 --max-prompt-tokens 2048 --dtype bf16 "$@"
  python -m recipes.build_features --target $T --out $O/$name-feat --conversations $O/$name-answers --dtype bf16 \
    --max-length 4096 --sequences-per-shard 64; }
