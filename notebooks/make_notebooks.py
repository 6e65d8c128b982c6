"""Writes the notebooks from these cell lists (edit here, then run: python notebooks/make_notebooks.py).

Each notebook runs on Colab with a GPU (install cell, Hub ids) and in CI on CPU against the offline zoo:
`HF_DYNASPEC_NOTEBOOK_TARGET` (set by tests/test_notebooks.py) replaces the Hub id, and small sizes are used
when `HF_DYNASPEC_NOTEBOOK_QUICK=1`.
"""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

SETUP = '''import glob, os, sys
try:
    import hf_dynaspec
except ImportError:  # e.g. a fresh Colab runtime (pick a GPU one). hf-dynaspec is not on PyPI: install the wheel
    # built in a checkout (`python -m build --wheel` -> dist/hf_dynaspec-*.whl), uploaded next to this notebook,
    # or a checkout itself (`pip install -e path/to/checkout`).
    wheels = sorted(glob.glob("hf_dynaspec-*.whl") + glob.glob("/content/hf_dynaspec-*.whl"))
    if not wheels:
        raise SystemExit("hf-dynaspec is not installed: upload dist/hf_dynaspec-*.whl (built in a checkout with "
                         "`python -m build --wheel`) next to this notebook, or pip install a checkout, then rerun.")
    !pip install -q "{wheels[-1]}[models]"
# A Hub id of a supported model (llama, qwen2/3, mistral, phi3, gemma3_text), a local directory, or a zoo name.
TARGET = os.environ.get("HF_DYNASPEC_NOTEBOOK_TARGET", "Qwen/Qwen2.5-Coder-0.5B-Instruct")
QUICK = os.environ.get("HF_DYNASPEC_NOTEBOOK_QUICK") == "1"  # CI: tiny sizes so the notebook runs in minutes'''

QUICKSTART = [
    new_markdown_cell("# hf-dynaspec quickstart\n\nSpeculative decoding with an EAGLE drafter and a DynaSpec "
                      "shortlisted head, as a drop-in `assistant_model` for `generate()`. Greedy output is the "
                      "target's own; `assistant.stats` says how many tokens each target pass committed."),
    new_code_cell(SETUP),
    new_code_cell('''import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from hf_dynaspec import DynaSpecAssistant, check_exactness, speculative_generate
from hf_dynaspec.bench.runner import no_trained_assistant_message, shipped_assistant_dir
from hf_dynaspec.zoo import resolve_model_path
from pathlib import Path

device = "cuda" if torch.cuda.is_available() else "cpu"
# bf16 on GPUs with bf16 tensor cores (sm_80+), fp16 on older cards (a Colab T4 reports bf16 as supported: emulated), fp32 on the CPU (exact and fast without AVX-512 BF16)
dtype = (torch.bfloat16 if torch.cuda.get_device_capability() >= (8, 0) else torch.float16) if device == "cuda" else torch.float32
path = resolve_model_path(TARGET)  # a Hub id, a local directory or an hf-dynaspec zoo name
model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device)
tokenizer = AutoTokenizer.from_pretrained(path)
# A trained assistant: a directory (assistants/<target> of a checkout, or your own training run) or a Hub repo id
# you pushed one to (assistant.push_to_hub). From a checkout, the shipped one for the target is found by itself.
shipped = os.environ.get("HF_DYNASPEC_NOTEBOOK_ASSISTANT") or shipped_assistant_dir(Path(TARGET).name.lower())
if shipped is None:  # never a silent untrained assistant (exact, but it drafts almost nothing)
    raise SystemExit(no_trained_assistant_message(TARGET))
assistant = DynaSpecAssistant.from_pretrained(shipped, target=model)'''),
    new_code_cell('''messages = [{"role": "user", "content": "Write a Python function that checks whether a number is prime."}]
inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True).to(device)
new_tokens = 16 if QUICK else 128
plain = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False)
assisted = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, assistant_model=assistant)
prompt_length = inputs["input_ids"].shape[1]
print(tokenizer.decode(assisted[0, prompt_length:], skip_special_tokens=True))
print("tau:", assistant.stats.tau)
divergence = check_exactness(model, inputs["input_ids"], plain[0, prompt_length:], assisted[0, prompt_length:])
print("identical" if divergence is None else divergence)
assert divergence is None or divergence.near_tie'''),
    new_markdown_cell("## Shortlist strategies\n\nThe drafter's LM head can score a dynamic shortlist "
                      "(`dynaspec`), a fixed number of clusters (`dynaspec-fixed`) or a frequent-token list "
                      "(`frspec`); verification always uses the full vocabulary."),
    new_code_cell('''if shipped and assistant.config.num_clusters:
    for strategy in ["full", "frspec", "dynaspec"]:
        variant = DynaSpecAssistant.from_pretrained(shipped, target=model, shortlist=strategy)
        out = model.generate(**inputs, max_new_tokens=new_tokens, do_sample=False, assistant_model=variant)
        assert torch.equal(out, assisted) or check_exactness(model, inputs["input_ids"], assisted[0, prompt_length:], out[0, prompt_length:]).near_tie
        print(strategy, "tau", round(variant.stats.tau, 2), "avg shortlist", variant.stats.avg_shortlist)'''),
    new_markdown_cell("## Draft trees (EAGLE-2)\n\nThe drafter proposes a tree of alternatives and the target "
                      "verifies all of them in one pass (tree attention mask); the output is again the target's "
                      "own. On a GPU, larger trees (`tree_top_k=8, tree_depth=6, tree_total_tokens=24`) pay off."),
    new_code_cell('''tree_out = model.generate(**inputs, custom_generate=speculative_generate, trees=True, drafter=assistant,
                          max_new_tokens=new_tokens, do_sample=False, tree_top_k=4, tree_depth=4, tree_total_tokens=8)
print("tree tau:", round(assistant.stats.tau, 2))
assert torch.equal(tree_out, assisted) or check_exactness(model, inputs["input_ids"], assisted[0, prompt_length:], tree_out[0, prompt_length:]).near_tie'''),
]

TRAIN = [
    new_markdown_cell("# Train an assistant for your own model\n\nThe target answers a set of prompts itself "
                      "(self-distillation: the drafter learns the target's own continuations, and the hidden states "
                      "the generation computes become the training features), the drafter trains on them, the "
                      "DynaSpec shortlists are built, and a benchmark checks exactness and speed. `DATA` defaults to "
                      "48 starter prompts shipped with the package (Apache-2.0), enough to see the pipeline run, not "
                      "for a good drafter: point it at your own chats (a JSONL file or a `datasets` name, see "
                      "recipes/user_data.py). On Colab use a GPU runtime; `accelerate launch -m "
                      "recipes.train_drafter ...` scales to several GPUs."),
    # the training notebook installs the train extra too (recipes: accelerate, datasets)
    new_code_cell(SETUP.replace('[models]"', '[models,train]"') + '''
import subprocess
import torch
from recipes.user_data import starter_prompts_path
DATA = os.environ.get("HF_DYNASPEC_NOTEBOOK_DATA") or str(starter_prompts_path())
OUT = "outputs/notebook"
STEPS = ["--max-steps", "2"] if QUICK else ["--epochs", "4"]
# bf16 on GPUs with bf16 tensor cores (sm_80+), fp16 on older cards (a Colab T4 reports bf16 as supported: emulated), fp32 on the CPU
DTYPE = ("bf16" if torch.cuda.get_device_capability() >= (8, 0) else "fp16") if torch.cuda.is_available() else "fp32"

def run(*args):
    print("$", " ".join(args))
    subprocess.run([sys.executable, "-m", *args], check=True)'''),
    new_code_cell('''run("recipes.self_distill", "--target", TARGET, "--data", DATA, "--out", f"{OUT}/answers",
    "--features-out", f"{OUT}/features", "--dtype", DTYPE, "--max-prompts", "4" if QUICK else "100000",
    "--max-new-tokens", "12" if QUICK else "256", "--batch-size", "4" if QUICK else "16",
    "--prompts-per-file", "2" if QUICK else "16")'''),
    new_code_cell('''run("recipes.train_drafter", "--target", TARGET, "--features", f"{OUT}/features", "--out", f"{OUT}/drafter",
    "--val-tokens", "10" if QUICK else "1000", "--validate-every", "1" if QUICK else "50", *STEPS)'''),
    new_code_cell('''# The target's answers (responses_*.jsonl) are the conversations the shortlists count tokens over.
run("recipes.build_shortlists", "--target", TARGET, "--assistant", f"{OUT}/drafter/assistant",
    "--data", f"{OUT}/answers", "--features", f"{OUT}/features", "--out", f"{OUT}/assistant",
    "--clusters", "8" if QUICK else "256", "--router-tokens", "40" if QUICK else "200000")'''),
    new_code_cell('''import json
prompts = [{"question_id": 1, "category": "coding", "turns": ["Write a Python function that merges two sorted lists."]},
           {"question_id": 2, "category": "qa", "turns": ["Why is the sky blue? Answer in two sentences."]}]
with open("prompts.jsonl", "w") as f:  # Spec-Bench format; use the Spec-Bench question file for real numbers
    f.writelines(json.dumps(p) + "\\n" for p in prompts)
run("hf_dynaspec.cli", "bench", "--target", TARGET, "--assistant", f"{OUT}/assistant",
    "--methods", "vanilla,eagle,dynaspec", "--prompts", "prompts.jsonl",
    "--max-new-tokens", "8" if QUICK else "128", "--dtype", DTYPE, "--json", f"{OUT}/bench.json")
report = json.load(open(f"{OUT}/bench.json"))
assert all(m["exact"] for m in report["methods"].values())
{k: (m["tau"], m["speedup"]) for k, m in report["methods"].items()}'''),
]


def main():
    here = Path(__file__).resolve().parent
    for name, cells in [("quickstart.ipynb", QUICKSTART), ("train_your_assistant.ipynb", TRAIN)]:
        for index, cell in enumerate(cells):  # stable ids: regenerating an unchanged notebook changes nothing
            cell["id"] = f"{Path(name).stem}-{index}"
        notebook = new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                      "language": "python"},
                                                       "accelerator": "GPU", "colab": {"provenance": []}})
        nbformat.write(notebook, here / name)


if __name__ == "__main__":
    main()
