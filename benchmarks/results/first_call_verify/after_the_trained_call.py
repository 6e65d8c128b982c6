"""docs/quickstart.md's claim: after the trained assistant's first call, `for_target`'s first call times only its
longest copies (size 33), on a fresh hf-dynaspec cache (the zoo's models linked in). Prints the verify sizes timed
after each call. Run from the repository root:
    python benchmarks/results/first_call_verify/after_the_trained_call.py"""
import os
import tempfile
from pathlib import Path

home = Path(tempfile.mkdtemp())
(home / "models").symlink_to(Path.home() / ".cache" / "hf-dynaspec" / "models")
os.environ["HF_DYNASPEC_HOME"] = str(home)

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from hf_dynaspec import DynaSpecAssistant, zoo  # noqa: E402
from hf_dynaspec.generation.costs import timing, verify_costs  # noqa: E402

calls = []


def counted(target, ids, cache, sizes, device):
    calls.append(list(sizes))
    return timing.verify_seconds(target, ids, cache, sizes, device)


verify_costs.verify_seconds = counted
path = zoo.fetch("qwen2.5-coder-0.5b-instruct")
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
inputs = AutoTokenizer.from_pretrained(path)("def f(x):", return_tensors="pt")
trained = DynaSpecAssistant.from_pretrained("assistants/qwen2.5-coder-0.5b-instruct", target=model)
model.generate(**inputs, assistant_model=trained, max_new_tokens=8)
print("after trained", calls)
model.generate(**inputs, assistant_model=DynaSpecAssistant.for_target(model), max_new_tokens=8)
print("after copier", calls)
