"""One token row times a bf16 weight: PyTorch's own bf16 matmul against the CPU kernel (hf_dynaspec.kernels.verify_rows.loader).

    python benchmarks/kernel_one_row.py --json benchmarks/results/kernel_one_row.json

Shapes of the 0.5B drafter's step (its MLP and attention projections) and of shortlisted-head blocks;
variants interleaved, median of --repeats. Decides whether the drafter's one-token steps and the shortlisted
head should go through the kernel too (cpu_verify reroutes only 2+ rows, for verification).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from hf_dynaspec.kernels.verify_rows import loader as cpu_rows

SHAPES = {  # name: (out_features, in_features)
    "drafter mlp up (4864x896)": (4864, 896),
    "drafter mlp down (896x4864)": (896, 4864),
    "drafter fc (896x1792)": (896, 1792),
    "head block 2,048 rows": (2048, 896),
    "head 22,000 rows": (22000, 896),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.manual_seed(0)
    results = {}
    for name, (out_features, in_features) in SHAPES.items():
        weight = torch.randn(out_features, in_features).to(torch.bfloat16)
        x = torch.randn(1, in_features).to(torch.bfloat16)
        native, kernel = [], []
        for _ in range(args.repeats):
            start = time.perf_counter()
            torch.nn.functional.linear(x, weight)
            native.append(time.perf_counter() - start)
            start = time.perf_counter()
            cpu_rows.bf16_rows_matmul(x, weight).to(torch.bfloat16)
            kernel.append(time.perf_counter() - start)
        results[name] = {"native_us": statistics.median(native) * 1e6, "kernel_us": statistics.median(kernel) * 1e6}
        print(f"{name}: native {results[name]['native_us']:.0f} us, kernel {results[name]['kernel_us']:.0f} us")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"threads": torch.get_num_threads(), "repeats": args.repeats, "median": results}, out, indent=2)


if __name__ == "__main__":
    main()
