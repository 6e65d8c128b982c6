"""Issue 93: the sampled step on Gemma-3-270M's real rows (6 greedy steps of the 64 prompts of
data/self_distill/gemma-3-270m/responses_00050.jsonl, float32 scores of the bf16 target), batch 64, top-k 64 / top-p 0.95:
transformers' path, the recipe's before KeptDraw, and KeptDraw (round_93/sampled_draw_2026-12-06.txt).

    python benchmarks/recipe93/sampling_step_real_rows.py
"""
# ruff: noqa
import torch, time, json
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList, TopKLogitsWarper, TopPLogitsWarper
from hf_dynaspec.zoo import resolve_model_path
from hf_dynaspec.drafting.row_processing import SparseTopKTopP
import hf_dynaspec.sampling as sampling
from recipes.sampled_answers import KeptDraw
torch.manual_seed(0)
path = resolve_model_path("gemma-3-270m")
tok = AutoTokenizer.from_pretrained(path); model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
rows = [json.loads(l)["prompt"] for l in open("data/self_distill/gemma-3-270m/responses_00050.jsonl")][:64]
kept = []
class Grab(LogitsProcessor):
    def __call__(self, ids, scores):
        kept.append(scores.clone()); return scores
tok.padding_side = "left"
enc = tok(rows, return_tensors="pt", padding=True, truncation=True, max_length=128)
model.generate(**enc, max_new_tokens=6, do_sample=False, logits_processor=LogitsProcessorList([Grab()]))
batches = kept  # 6 steps of [64, V]
def old(s):
    s = SparseTopKTopP(TopKLogitsWarper(64), TopPLogitsWarper(0.95))(None, s)
    t = sampling.sample(s.float().softmax(-1)); out = torch.full_like(s, float("-inf")).scatter_(1, t, 0.0); return out.argmax(-1)
def new(s):
    return KeptDraw(64, 0.95)(None, s).argmax(-1)
def hf(s):
    s = TopPLogitsWarper(0.95)(None, TopKLogitsWarper(64)(None, s)); return torch.multinomial(s.softmax(-1), 1)
for name, f in [("transformers top-k+top-p+multinomial", hf), ("SparseTopKTopP+DrawnToken+argmax (before)", old), ("KeptDraw+argmax (now)", new)]:
    f(batches[0].clone())
    t = time.perf_counter()
    for b in batches: f(b.clone())
    print(f"{name}: {(time.perf_counter()-t)/len(batches)*1000:.1f} ms per step (batch 64, V = {batches[0].shape[1]:,}, incl. a 64xV copy)")
