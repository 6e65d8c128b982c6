"""#76 bar 3: what the planner sees in the 0.5B default's rounds (its measured verify costs, per step; each lookup
candidate's per-position estimates as the request sees them; the plan), on the second summarization dev prompt x 64,
bf16, greedy. Host: AVX-512 BF16 without AMX, 2026-11-30, nothing else running. From the repository root:
python benchmarks/results/lookup_76f/planner_view.py > benchmarks/results/lookup_76f/planner_view.txt"""
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import hf_dynaspec.drafting.planning.planner as P
from hf_dynaspec import DynaSpecAssistant, zoo
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts

name = "qwen2.5-coder-0.5b-instruct"
path = zoo.cached_path(name)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).eval()
tok = AutoTokenizer.from_pretrained(path)
prompts = encode_prompts(tok, load_prompts(["../shared/data/eval/spec_bench_dev.jsonl"], 2, ["summarization"]))
assistant = DynaSpecAssistant.from_pretrained(f"assistants/{name}", target=model)
orig = P.SpeculationPlanner.plan_round
shown = {"costs": False}
def plan_round(self, lookups, room):
    plan = orig(self, lookups, room)
    if not shown["costs"]:
        shown["costs"] = True
        c = self.costs
        step = c.verify(1)
        print("verify/step", [round(c.verify(n) / step, 2) for n in range(1, 18)], "step ms", round(step * 1000, 1),
              "consume", round(c.consume_seconds / step, 2), "first", round(c.first_draft_seconds / step, 2),
              "step", round(c.draft_step_seconds / step, 2))
    for cand in lookups:
        pr = self.lookup_probabilities(cand)[:12]
        print(f"  {cand.source[:10]} m={cand.match_length} n={cand.num_tokens} p={[round(x,2) for x in pr]}")
    print(f"-> {plan.source} {plan.num_tokens}{' probe' if plan.probe else ''}")
    return plan
P.SpeculationPlanner.plan_round = plan_round
for p in prompts[1:]:
    ids = p.input_ids
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False, assistant_model=assistant)
