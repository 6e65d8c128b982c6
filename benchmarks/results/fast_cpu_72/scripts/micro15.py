import time

import torch

from hf_dynaspec.kernels.verify_rows import loader as L

torch.manual_seed(0)
H, F, KV, V, NL = 1536, 8960, 256, 151936, 28
shapes = [(H, H), (KV, H), (KV, H), (H, H), (F, H), (F, H), (H, F)]
ws = [torch.randn(o, i).bfloat16() for o, i in shapes]
head = torch.randn(V, H).bfloat16()


def run(f, w, R, n=5):
    x = torch.randn(R, w.shape[1]).bfloat16()
    best = 1e9
    for _ in range(n):
        t = time.perf_counter()
        f(x, w)
        best = min(best, time.perf_counter() - t)
    return best


for R in (1, 9):
    tot_k = tot_n = 0
    for w in ws + [head]:
        k = run(L.bf16_rows_matmul, w, R)
        n = run(torch.nn.functional.linear, w, R)
        print(
            f"R={R} {tuple(w.shape)} kernel {k * 1e3:.2f} ms ({w.numel() * 2 / k / 1e9:.1f} GB/s) "
            f"native {n * 1e3:.2f} ms ({w.numel() * 2 / n / 1e9:.1f} GB/s)"
        )
