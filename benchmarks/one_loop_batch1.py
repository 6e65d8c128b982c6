"""Batch 1 through the public loop (run_rounds) against the same prompt through the batched loop (forced), interleaved:
what one loop for both would cost at batch 1 (issue 62, item 4). bf16, 0.5B, the shipped assistant, chain_generate,
7 dev prompts (one per Spec-Bench category), 64 new tokens, each call a first call (forget_learnt_state).

    python benchmarks/one_loop_batch1.py > benchmarks/results/one_loop_batch1_DATE.json   # from the repository root
"""

import json
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_dynaspec import DynaSpecAssistant, chain_generate, zoo
from hf_dynaspec.generation import public_loop
from hf_dynaspec.runtime_store import forget_learnt_state

path = zoo.cached_path("qwen2.5-coder-0.5b-instruct")
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
tok = AutoTokenizer.from_pretrained(path)
assistant = DynaSpecAssistant.from_pretrained("assistants/qwen2.5-coder-0.5b-instruct", target=model)
rows = [json.loads(line) for line in open("../shared/data/eval/spec_bench_dev.jsonl")]
seen, prompts = set(), []
for r in rows:
    if r["category"] not in seen:
        seen.add(r["category"])
        prompts.append(r["turns"][0])
prompts = prompts[:7]
original = public_loop.is_batched
times = {"public loop": [], "batched loop": []}
outs = {}
for i, text in enumerate(prompts):
    ids = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    for name in (["public loop", "batched loop"] if i % 2 == 0 else ["batched loop", "public loop"]):
        public_loop.is_batched = original if name == "public loop" else (lambda *a: True)
        forget_learnt_state(assistant)
        start = time.perf_counter()
        out = model.generate(**ids, custom_generate=chain_generate, drafter=assistant, max_new_tokens=64, do_sample=False)
        times[name].append(time.perf_counter() - start)
        outs.setdefault(i, []).append(out[0].tolist())
public_loop.is_batched = original
same = all(a == b for a, b in outs.values())
total = {k: sum(v) for k, v in times.items()}
print(json.dumps({"seconds": total, "ratio_batched_over_public": total["batched loop"] / total["public loop"],
                  "identical_outputs": same, "per_prompt": times}, indent=1))
