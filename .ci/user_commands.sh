#!/usr/bin/env bash
# CI: the commands a user copies from the README, each in a fresh venv that holds only what its own install line
# installs (CI's own venv holds every extra and would hide a missing one).
#
#   1. The README's first command (its first ```bash block, read from README.md, run as written) in a copy of the
#      checkout with an empty model cache, so the zoo downloads and dequantizes as on a new machine. The demo must
#      print its verdict (bf16: token-identical, or identical up to a near-tie decided in fp32) and a speedup.
#   2. In that venv (the `models` extra): `hf-dynaspec bench` on two prompts and `hf-dynaspec convert` of a replica
#      of a published EAGLE-1 checkpoint (tests/checkpoint_replicas.py).
#   3. A second fresh venv with the `train` extra only (README "Training an assistant", docs/training.md): the three
#      recipes on a few prompts of the package's starter set (features, a few drafter steps, shortlists).
#
# The wheel quickstart runs in its own fresh venv in the test suite (tests/test_wheel.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Outside any venv CI has activated: the user's shell has none.
if [ -n "${VIRTUAL_ENV:-}" ]; then
    PATH=$(printf '%s' "$PATH" | tr ':' '\n' | grep -vxF "$VIRTUAL_ENV/bin" | paste -sd: -)
    unset VIRTUAL_ENV
fi
unset PYTHONPATH PIP_COMPILE PIP_NO_COMPILE  # pip as a user's shell runs it
export HF_DYNASPEC_HOME="$work/home" PIP_DISABLE_PIP_VERSION_CHECK=1

# A copy of the checkout as a clone has it (tracked and untracked-not-ignored files; no venvs, no build output).
mkdir "$work/repo"
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r tar -cf - --ignore-failed-read) \
    | tar -xf - -C "$work/repo"
cd "$work/repo"

first=$(awk '/^```bash$/ { inside = 1; next } inside && /^```$/ { exit } inside' README.md)
[ -n "$first" ] || { echo "user_commands: README.md has no \`\`\`bash block" >&2; exit 1; }
echo "user_commands: the README's first command: $first"
start=$SECONDS
bash -c "set -eo pipefail; $first" 2>&1 | tee "$work/demo.log"
echo "user_commands: first command done in $((SECONDS - start)) s"
# The demo's own verdict (bf16: identical, or a near-tie decided in fp32; a real mismatch already failed the command).
grep -Eq "^outputs: (token-identical|identical up to a numerical near-tie)" "$work/demo.log" \
    || { echo "user_commands: the demo printed no identity verdict" >&2; exit 1; }
grep -Eq '\([0-9]+\.[0-9]+x\)' "$work/demo.log" || { echo "user_commands: the demo printed no speedup" >&2; exit 1; }

# shellcheck disable=SC1091
. .venv/bin/activate
target=qwen2.5-coder-0.5b-instruct  # cached in $HF_DYNASPEC_HOME by the demo
printf '%s\n' '{"question_id": 1, "category": "coding", "turns": ["Write a Python function that reverses a string."]}' \
    '{"question_id": 2, "category": "math_reasoning", "turns": ["What is 17 times 23? Explain briefly."]}' > prompts.jsonl
hf-dynaspec bench --target "$target" --assistant "assistants/$target" --methods vanilla,dynaspec --prompts prompts.jsonl \
    --max-new-tokens 16 --json "$work/bench.json" | tee "$work/bench.log"
python - "$work/bench.json" <<'PY'
import json, sys
methods = json.load(open(sys.argv[1]))["methods"]
assert {"vanilla", "dynaspec"} <= set(methods) and all(m["exact"] for m in methods.values()), methods
print("user_commands: bench", {k: (m["tau"], m["speedup"]) for k, m in methods.items()})
PY
python - "$work" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "tests")
from checkpoint_replicas import eagle1_checkpoint
from transformers import AutoModelForCausalLM, Qwen2Config
work = Path(sys.argv[1])
config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, tie_word_embeddings=False)
target = AutoModelForCausalLM.from_config(config)
target.save_pretrained(work / "tiny-target")
eagle1_checkpoint(work / "published", target, fmt="bin", qkv_bias=True)
PY
hf-dynaspec convert "$work/published" --target "$work/tiny-target" --out "$work/converted"
[ -f "$work/converted/model.safetensors" ] || { echo "user_commands: convert wrote no model.safetensors" >&2; exit 1; }
deactivate

# The training recipes with the `train` extra alone.
python3 -m venv "$work/train-venv"
# shellcheck disable=SC1091
. "$work/train-venv/bin/activate"
pip install -q torch==2.13.0 && pip install -q -e '.[train]'
data=$(python -c "from recipes.user_data import starter_prompts_path; print(starter_prompts_path())")
python -m recipes.self_distill --target "$target" --data "$data" --out "$work/answers" --features-out "$work/features" \
    --dtype fp32 --max-prompts 4 --max-new-tokens 12 --batch-size 4 --prompts-per-file 2
python -m recipes.train_drafter --target "$target" --features "$work/features" --out "$work/drafter" \
    --val-tokens 10 --validate-every 1 --max-steps 2
python -m recipes.build_shortlists --target "$target" --assistant "$work/drafter/assistant" --data "$work/answers" \
    --features "$work/features" --out "$work/assistant" --clusters 8 --router-tokens 40
python -c "import sys, torch; from transformers import AutoModelForCausalLM; from hf_dynaspec import DynaSpecAssistant, zoo
model = AutoModelForCausalLM.from_pretrained(zoo.cached_path('$target'), dtype=torch.float32)
assistant = DynaSpecAssistant.from_pretrained(sys.argv[1], target=model, shortlist='dynaspec')
print('user_commands: the trained assistant loads with its shortlists', assistant.config.drafter_kind)" "$work/assistant"
deactivate
echo "user_commands: every README command ran in a venv holding only what its install line installs"
