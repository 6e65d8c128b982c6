"""One-token steps of the 0.5B (bf16, fast kernels, 200-token context), interleaved x40: eager over a DynamicCache,
eager over a 256-slot StaticCache, compiled over 256 slots with static shapes, compiled over `--capacity` slots
(`--dynamic`: the capacity symbolic), with each compile's time (#91). Output: ../capacity_and_dynamic_05b.txt
(run 1: --capacity 2048; run 3: --capacity 512 --dynamic)."""

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

import hf_dynaspec
from hf_dynaspec import zoo

parser = argparse.ArgumentParser()
parser.add_argument("--capacity", type=int, default=512)
parser.add_argument("--dynamic", action="store_true")
args = parser.parse_args()
model = AutoModelForCausalLM.from_pretrained(zoo.resolve_model_path("qwen2.5-coder-0.5b-instruct"),
                                             dtype=torch.bfloat16).eval()
hf_dynaspec.fast_cpu(model, compile=False)
ids, token = torch.randint(0, 1000, (1, 200)), torch.tensor([[5]])


def filled(capacity):
    cache = StaticCache(config=model.config, max_cache_len=capacity)
    model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(200), use_cache=True)
    return cache


def static_step(cache, forward):
    def run():
        for layer in cache.layers:  # transformers 5.2x's static layers write at their own running length
            layer.cumulative_length.fill_(200)
        return forward(cache)
    return run


def forward(cache):
    return model(input_ids=token, past_key_values=cache, cache_position=torch.tensor([200]), use_cache=True).logits


with torch.inference_mode():
    caches = {256: filled(256), args.capacity: filled(args.capacity)}
    dynamic = DynamicCache(config=model.config)
    model(input_ids=ids, past_key_values=dynamic, use_cache=True)

    def eager_dynamic():
        extra = dynamic.get_seq_length() - 200
        if extra:
            dynamic.crop(-extra)
        return model(input_ids=token, past_key_values=dynamic, use_cache=True).logits

    cases = {"eager-dynamic": eager_dynamic, "eager-static256": static_step(caches[256], forward)}
    for capacity, symbolic in ((256, False), (args.capacity, args.dynamic)):
        case = static_step(caches[capacity], torch.compile(forward, fullgraph=True, dynamic=symbolic))
        started = time.perf_counter()
        case()
        print(f"compile C={capacity}: {time.perf_counter() - started:.1f} s", flush=True)
        cases[f"compiled{capacity}"] = case
    times = {name: [] for name in cases}
    for case in cases.values():
        case()
    for _ in range(40):
        for name, case in cases.items():
            started = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - started)
    reference = eager_dynamic().float()
    for name, case in cases.items():
        print(name, "max|diff| vs eager-dynamic", (case().float() - reference).abs().max().item())
base = statistics.median(times["eager-dynamic"])
for name, values in times.items():
    print(f"{name}: median {statistics.median(values) * 1000:.1f} ms  ratio {statistics.median(values) / base:.3f}")
