"""The shipped assistant's default (auto) with prompt_lookup_min_ngram 2 (as shipped) and 1, at this session's
planner (the request's view of the lookup tables): the summarization and RAG dev prompts x 64 new tokens, greedy,
bf16, after one untimed 4-token call each (the costs are measured then), each prompt run by both in turn, the order
alternating, two passes (the first pass's calls also teach each assistant's tables, as a user's first calls would).
Host kind named in the output file. Run from the repository root, nothing else running:
python benchmarks/results/lookup_76f/default_min1.py qwen2.5-coder-1.5b-instruct > benchmarks/results/lookup_76f/default_min1_15b.txt"""
import subprocess
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_dynaspec import DynaSpecAssistant, zoo
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts

name = sys.argv[1]
flags = subprocess.run("lscpu | grep -o 'avx512_bf16\\|amx' | sort -u", shell=True, capture_output=True, text=True)
print(f"host flags: {flags.stdout.split()} torch {torch.__version__} threads {torch.get_num_threads()}")
path = zoo.cached_path(name)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
tok = AutoTokenizer.from_pretrained(path)
prompts = encode_prompts(tok, load_prompts(["../shared/data/eval/spec_bench_dev.jsonl"], 2, ["summarization", "rag"]))
A = {m: DynaSpecAssistant.from_pretrained(f"assistants/{name}", target=model, prompt_lookup_min_ngram=m) for m in (2, 1)}
for a in A.values():  # untimed: the first call measures this machine's costs (cached for the rest)
    model.generate(prompts[0].input_ids, attention_mask=torch.ones_like(prompts[0].input_ids), max_new_tokens=4,
                   do_sample=False, assistant_model=a)
tot = {m: [0, 0, 0.0] for m in A}
for rep in range(2):
    for i, p in enumerate(prompts):
        for m in ((2, 1) if (rep + i) % 2 == 0 else (1, 2)):
            a, ids = A[m], p.input_ids
            t = time.perf_counter()
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False,
                                 assistant_model=a)
            dt = time.perf_counter() - t
            n = out.shape[1] - ids.shape[1]
            tot[m][0] += n
            tot[m][1] += a.stats.verify_passes
            tot[m][2] += dt
            print(f"pass {rep} min_ngram {m} {p.category:13s} tau {a.stats.tau:.2f} {n / dt:.2f} tok/s "
                  f"{a.stats.passes_by_source}", flush=True)
for m, (n, passes, s) in tot.items():
    print(f"min_ngram {m}: tau {n / passes:.2f}  {n / s:.2f} tok/s over both passes")
