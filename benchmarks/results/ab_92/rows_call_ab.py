"""Issue 92, stop 110: the CPU rows kernel's Python wrappers before and after they shared one call (`_rows_call`),
in one process, alternating old, new, old, new (torch.utils.benchmark, median of >= 1 s per measurement):

    git worktree add /tmp/old 4d5b7a6
    python benchmarks/results/ab_92/rows_call_ab.py /tmp/old/hf_dynaspec/kernels/verify_rows/loader.py

Shapes: a Qwen2.5-0.5B MLP projection (4864 x 896), 1, 3 and 9 rows, bf16 and float32 weights. The outputs are
asserted bit-identical before anything is timed.
"""

import importlib.util
import sys

import torch
from torch.utils import benchmark

from hf_dynaspec.kernels.verify_rows import loader as new

spec = importlib.util.spec_from_file_location("old_loader", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
print("kernel form:", new.isa())
torch.manual_seed(0)
for dtype, name in ((torch.bfloat16, "bf16_rows_matmul"), (torch.float32, "f32_rows_matmul")):
    weight = torch.randn(4864, 896).to(dtype)
    for rows in (1, 3, 9):
        x = torch.randn(1, rows, 896).to(dtype)
        assert torch.equal(getattr(old, name)(x, weight), getattr(new, name)(x, weight))
        times = []
        for label, module in (("old", old), ("new", new), ("old", old), ("new", new)):
            timer = benchmark.Timer("f(x, w)", globals={"f": getattr(module, name), "x": x, "w": weight})
            times.append(f"{label} {timer.blocked_autorange(min_run_time=1.0).median * 1e6:.1f} us")
        print(str(dtype).removeprefix("torch."), rows, "rows:", ", ".join(times))
