"""Issue 93: what a second drafter layer would cost a round. Times, on the 0.5B target in bf16 (the precision users
run), one decode step of the whole target and of one of its decoder layers (the drafter's layer has the target's
shape), each with a 300-token KV cache, the appended position dropped after every call, by torch.utils.benchmark (median of blocks).

    python benchmarks/recipe93/layer_cost.py   # results: benchmarks/results/round_93/layer_cost_05b_bf16.txt
"""
import platform

import torch
import torch.utils.benchmark as benchmark

from hf_dynaspec.loading import load_target

model, _ = load_target("qwen2.5-coder-0.5b-instruct", "bf16")
torch.manual_seed(0)
context = 300
with torch.no_grad():
    out = model(torch.randint(100, 10000, (1, context)), use_cache=True)
    cache = out.past_key_values
    token = out.logits[:, -1:].argmax(-1)
    position = torch.tensor([[context]])

    def step():
        model(token, past_key_values=cache, position_ids=position, use_cache=True)
        cache.crop(-1)  # drop the one position this call appended

    layer = model.model.layers[-1]
    hidden = model.model.embed_tokens(token)
    rotary = model.model.rotary_emb(hidden, position)

    def one_layer():
        layer(hidden, attention_mask=None, position_ids=position, position_embeddings=rotary, past_key_values=cache)
        cache.crop(-1)  # drop the one position this call appended

    rows = []
    for name, fn in (("target step", step), ("one decoder layer", one_layer)):
        measured = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=3)
        rows.append((name, measured.median * 1e3))
print(f"# host: {platform.processor() or platform.machine()}, torch {torch.__version__}, threads {torch.get_num_threads()}")
for name, ms in rows:
    print(f"{name}: {ms:.2f} ms")
print(f"one layer / target step: {rows[1][1] / rows[0][1]:.3f} (1/{rows[0][1] / rows[1][1]:.1f})")
