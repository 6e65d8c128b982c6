"""The 0.5B default (shipped assistant, auto) with prompt_lookup_min_ngram 2 (shipped) and 1, each prompt run by
both in turn: the summarization and RAG dev prompts x 64, bf16. Run from the repository root after run.sh, nothing
else running: python benchmarks/results/lookup_76e/default_min1.py qwen2.5-coder-0.5b-instruct"""
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_dynaspec import DynaSpecAssistant, zoo
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts

name = sys.argv[1]
path = zoo.cached_path(name)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
tok = AutoTokenizer.from_pretrained(path)
prompts = encode_prompts(tok, load_prompts(["/work/shared/data/eval/spec_bench_dev.jsonl"], 2, ["summarization", "rag"]))
A = {m: DynaSpecAssistant.from_pretrained(f"/work/main/assistants/{name}", target=model, prompt_lookup_min_ngram=m) for m in (2, 1)}
tot = {m: [0, 0, 0.0] for m in A}
for rep in (1,):
    for p in prompts:
        for m, a in A.items():
            ids = p.input_ids
            t = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False, assistant_model=a)
            dt = time.perf_counter() - t
            n = out.shape[1] - ids.shape[1]
            if rep:
                tot[m][0] += n
                tot[m][1] += a.stats.verify_passes
                tot[m][2] += dt
                print(m, p.category, f"tau {a.stats.tau:.2f} {n/dt:.2f} tok/s", flush=True)
for m, (n, passes, s) in tot.items():
    print(f"min_ngram {m}: tau {n/passes:.2f}  {n/s:.2f} tok/s")
