"""Cost of one batched fp32 decoding step of the 0.5B target (prefill of 300 random tokens per row, then
six one-token steps, median), by batch size: what recipes/self_distill.py --batch-size trades.

    python benchmarks/self_distill_batch.py   # results: benchmarks/results/self_distill_batch_05b.txt
"""
import time

import torch

from hf_dynaspec.bench.runner import load_target

model, tok = load_target("qwen2.5-coder-0.5b-instruct", "fp32")
torch.manual_seed(0)
for B in [1, 16, 32, 64]:
    ids = torch.randint(100, 10000, (B, 300))
    with torch.no_grad():
        start = time.perf_counter()
        out = model(ids, use_cache=True)
        pre = time.perf_counter() - start
        cache = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(6):
            t = time.perf_counter()
            out = model(nxt, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1:].argmax(-1)
            times.append(time.perf_counter() - t)
    times.sort()
    print(f"B={B} prefill {pre:.1f}s ({B*300/pre:.0f} tok/s)  decode step median {times[3]*1000:.0f} ms "
          f"-> {B/times[3]:.0f} tok/s", flush=True)
