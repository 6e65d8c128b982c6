"""Issue 93: what a second drafter layer would cost a round. Times, on the 0.5B target in bf16 (the precision users
run), one decode step of the whole target and of one of its decoder layers (the drafter's layer has the target's
shape), each with a 300-token KV cache, the appended position dropped after every call, by torch.utils.benchmark
(median of blocks): on PyTorch's kernels and on the fastest plain path (`hf_dynaspec.fast_cpu`, eager).

    python benchmarks/recipe93/layer_cost.py   # results: benchmarks/results/round_93/layer_cost_05b_bf16.txt
"""
import torch
import torch.utils.benchmark as benchmark

from hf_dynaspec import fast_cpu
from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.loading import load_target
from recipes.training_schedule import native_cpu_bf16

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

    def timed(fn) -> float:
        timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=torch.get_num_threads())
        return timer.blocked_autorange(min_run_time=3).median * 1e3

    rows = {"pytorch": (timed(step), timed(one_layer))}
    with fast_cpu(model, compile=False):
        rows["fast_cpu"] = (timed(step), timed(one_layer))
host = host_description()
kind = "AVX-512 BF16" if native_cpu_bf16() else "AVX2 only"
print(f"# host: {host['cpu']}, {kind} (flags {host['cpu_flags']}), {host['cores']} cores, torch {torch.__version__}")
for name, (step_ms, layer_ms) in rows.items():
    print(f"{name}: target step {step_ms:.2f} ms, one decoder layer {layer_ms:.2f} ms, layer / step {layer_ms / step_ms:.3f} "
          f"(1/{step_ms / layer_ms:.1f})")
