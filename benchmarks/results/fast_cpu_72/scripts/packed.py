import time

import torch

torch.manual_seed(0)
shapes = [(896, 896), (128, 896), (128, 896), (896, 896), (4864, 896), (4864, 896), (896, 4864)] * 24 + [(151936, 896)]
ws = [torch.randn(o, i).bfloat16() for o, i in shapes]
nbytes = sum(w.numel() * 2 for w in ws)


def run(f, ws, R):
    xs = {i: torch.randn(R, i).bfloat16() for i in (896, 4864)}
    best = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for w in ws:
            f(xs[w.shape[1] if w.dim() == 2 and w.shape[1] in xs else 896], w)
        best = min(best, time.perf_counter() - t)
    return best


for hint in (4, 8, 16):
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, hint) for w in ws]
    ins = [w.shape[1] for w in ws]
    for R in (1, 2, 5, 9, 17):
        xs = {i: torch.randn(R, i).bfloat16() for i in (896, 4864)}
        best = 1e9
        for _ in range(5):
            t = time.perf_counter()
            for p, i in zip(packed, ins):
                torch.ops.mkldnn._linear_pointwise(xs[i], p, None, "none", [], "")
            best = min(best, time.perf_counter() - t)
        n = run(lambda x, w: torch.nn.functional.linear(x, w), ws, R)
        print(f"hint={hint} R={R} packed {best * 1e3:.1f} ms ({nbytes / best / 1e9:.1f} GB/s)  native {n * 1e3:.1f}")
    # check correctness
    x = torch.randn(3, 896).bfloat16()
    print(
        (torch.ops.mkldnn._linear_pointwise(x, packed[0], None, "none", [], "").float() - (x.float() @ ws[0].float().T))
        .abs()
        .max()
    )
