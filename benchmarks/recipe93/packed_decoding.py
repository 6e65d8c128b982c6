"""One-token decoding steps of the 0.5B at self-distillation batch sizes, PyTorch's bf16 kernels against prepacked
oneDNN weights (hf_dynaspec.kernels.verify_rows, packed for 1-512 rows): the median of 6 steps over a 320-token cache, in 3 rounds
that alternate the two (a burst of load then slows one round of each, not one of them).

    python benchmarks/recipe93/packed_decoding.py
"""

from __future__ import annotations

import time

import torch

from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.summary import host_kind
from hf_dynaspec.kernels.verify_rows import patch
from hf_dynaspec.loading import load_target

PACKED_ROWS = (1, 512)  # a decoding step's rows: one per answer of the batch


@torch.no_grad()
def step_seconds(model, batch: int, context: int = 320, steps: int = 6) -> float:
    ids = torch.randint(100, 10000, (batch, context), generator=torch.Generator().manual_seed(0))
    cache = model(ids, use_cache=True).past_key_values
    token, times = ids[:, -1:], []
    for _ in range(steps):
        start = time.perf_counter()
        token = model(token, past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1)
        times.append(time.perf_counter() - start)
    return sorted(times)[steps // 2]


def main() -> None:
    model, _ = load_target("qwen2.5-coder-0.5b-instruct", "bf16")
    print(f"host: {host_kind({'host': host_description()})}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for batch in (64, 96):
        for round_number in range(3):
            plain = step_seconds(model, batch)
            patch.enable(model, min_rows=0, max_rows=0, packed_rows=PACKED_ROWS)
            packed = step_seconds(model, batch)
            patch.disable(model)
            print(f"batch {batch}, round {round_number + 1}: PyTorch {plain * 1e3:.0f} ms ({batch / plain:.0f} tok/s), "
                  f"packed oneDNN {packed * 1e3:.0f} ms ({batch / packed:.0f} tok/s): {plain / packed:.2f}x")

if __name__ == "__main__":
    main()
