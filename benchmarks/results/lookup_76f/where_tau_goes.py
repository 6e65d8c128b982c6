"""Where the default's tau goes against transformers' prompt lookup: per round of the shipped assistant's default
(auto) on the summarization and RAG dev prompts x 64, bf16, greedy, what was drafted and accepted, beside how many
tokens transformers' rule (earliest 2-gram, else 1-gram occurrence, 10 tokens) would have had accepted at the same
position. Run from the repository root, nothing else running:
python benchmarks/results/lookup_76f/where_tau_goes.py qwen2.5-coder-0.5b-instruct [min_ngram]"""
import sys
from collections import Counter

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_dynaspec import DynaSpecAssistant, zoo
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.drafting.runtime import planner_memory

sys.path.insert(0, "tests")
from plan_simulation import transformers_lookup  # noqa: E402

name = sys.argv[1]
min_ngram = int(sys.argv[2]) if len(sys.argv) > 2 else 2
path = zoo.cached_path(name)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
tok = AutoTokenizer.from_pretrained(path)
prompts = encode_prompts(tok, load_prompts(["../shared/data/eval/spec_bench_dev.jsonl"], 2, ["summarization", "rag"]))
assistant = DynaSpecAssistant.from_pretrained(f"assistants/{name}", target=model, prompt_lookup_min_ngram=min_ngram)
summary = Counter()
for p in prompts:
    ids = p.input_ids
    memory = planner_memory(assistant, False)
    memory.log = []
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False,
                         assistant_model=assistant)
    seq = out[0].tolist()
    pos = ids.shape[1]
    ours_rounds = len(memory.log)
    print(f"== {p.category} prompt {pos} ids, {len(seq) - pos} new, rounds {ours_rounds}")
    for r in memory.log:
        draft = transformers_lookup(seq[:pos], 10)
        theirs = 0
        while theirs < len(draft) and pos + theirs < len(seq) and draft[theirs] == seq[pos + theirs]:
            theirs += 1
        print(f"  at {pos - ids.shape[1]:3d}: {r['source']:15s} drafted {r['drafted']:2d} accepted {r['accepted']:2d}"
              f"{' probe' if r['probe'] else ''}   transformers: drafts {len(draft):2d} accepts {theirs:2d}")
        summary[(p.category, "ours_tokens")] += r["accepted"] + 1
        summary[(p.category, "ours_rounds")] += 1
        summary[(p.category, r["source"])] += 1
        pos += r["accepted"] + 1
    # transformers' own rounds on the same output
    pos = ids.shape[1]
    while pos < len(seq):
        draft = transformers_lookup(seq[:pos], 10)
        theirs = 0
        while theirs < len(draft) and pos + theirs < len(seq) and draft[theirs] == seq[pos + theirs]:
            theirs += 1
        summary[(p.category, "theirs_rounds")] += 1
        summary[(p.category, "theirs_tokens")] += min(theirs + 1, len(seq) - pos)
        pos += theirs + 1
print(dict(summary))
