"""Issue 93: whole greedy and sampled generate_batch calls of Gemma-3-270M on the same 64 prompts (file 50), 48 new
tokens, bf16, batch 64, then a cProfile of the sampled call (round_93/sampled_draw_2026-12-06.txt).

    python benchmarks/recipe93/sampled_vs_greedy_call.py
"""
# ruff: noqa
import torch, time, json, cProfile, pstats
from recipes.self_distill import generate_batch, sampling_settings
from hf_dynaspec.loading import load_target
model, tok = load_target("gemma-3-270m", "bf16")
prompts = [json.loads(l)["prompt"] for l in open("data/self_distill/gemma-3-270m/responses_00050.jsonl")][:64]
s = sampling_settings("gemma-3-270m", model)
print(s)
for name, sampling in [("greedy", None), ("sampled", s), ("greedy", None), ("sampled", s)]:
    t = time.perf_counter(); generate_batch(model, tok, prompts, 48, 512, sampling=sampling); print(name, round(time.perf_counter() - t, 1), "s for 48 steps")
pr = cProfile.Profile(); pr.enable(); generate_batch(model, tok, prompts, 48, 512, sampling=s); pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(10)
