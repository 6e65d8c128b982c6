import time

import torch

from hf_dynaspec.kernels.verify_rows import loader as L

torch.manual_seed(0)
print("threads", torch.get_num_threads(), L.isa())
# the 0.5B's per-layer linears: q 896x896, k,v 128x896, o 896x896, gate/up 4864x896, down 896x4864; 24 layers + head 151936x896
shapes = [(896, 896), (128, 896), (128, 896), (896, 896), (4864, 896), (4864, 896), (896, 4864)] * 24 + [(151936, 896)]
ws = [torch.randn(o, i).bfloat16() for o, i in shapes]
nbytes = sum(w.numel() * 2 for w in ws)


def run(f, R):
    xs = {i: torch.randn(R, i).bfloat16() for i in (896, 4864)}
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for w in ws:
            f(xs[w.shape[1]], w)
        best = min(best, time.perf_counter() - t)
    return best


for R in (1, 2, 5, 9):
    k = run(lambda x, w: L.bf16_rows_matmul(x, w), R)
    n = run(lambda x, w: torch.nn.functional.linear(x, w), R)
    with torch.backends.mkldnn.flags(enabled=False):
        m = run(lambda x, w: torch.nn.functional.linear(x, w), R)
    print(f"R={R} kernel {k * 1e3:.1f} ms ({nbytes / k / 1e9:.1f} GB/s)  native {n * 1e3:.1f}  nomkldnn {m * 1e3:.1f}")
