"""What verification costs on a CPU, and what the bf16 rows kernel (hf_dynaspec.kernels.verify_rows) saves.

    python benchmarks/verify_rows.py --what target --target qwen2.5-coder-0.5b-instruct
    python benchmarks/verify_rows.py --what linear

- `target`: one target forward over k new tokens on a 200-token cache, k in --tokens, for each variant: the bf16
  target on PyTorch's default kernels (`native`: oneDNN where the CPU has native bf16), on PyTorch's own product
  with oneDNN off (`nomkldnn`), through the rows kernel at every row count (`kernel`), prepacked oneDNN weights
  (`packed`, AMX / AVX-512 BF16 hosts) or fp32 shadow weights (`shadow`), on the routes measured fastest here
  (`routed`: what `hf_dynaspec.fast_cpu` and an assisted call use), and the fp32 target on its default kernels
  (`fp32`), through the rows kernel (`fp32-kernel`) and routed (`fp32-routed`). Speculative decoding pays off
  when k tokens cost little more than one; on CPUs without native bf16 products PyTorch pays about one weight
  pass per row. Also: the largest |logit| difference of each rerouted variant from its dtype's default (summation
  order only) and whether every argmax agrees.
- `linear`: one token row times a bf16 weight of the drafter's and the head's shapes, PyTorch against the kernel.

Timed by hf_dynaspec.bench.timer (single calls, interleaved, set-up untimed, medians in ms); each (what, case) becomes
a record of the results table (--results). Replaces cpu_verify.py, step_costs.py and kernel_one_row.py (their
JSON results stay in benchmarks/results/).
"""

from __future__ import annotations

import argparse

import torch
from transformers import DynamicCache

from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.bench.timer import interleaved_medians
from hf_dynaspec.generation.costs import verify_kernel
from hf_dynaspec.kernels.verify_rows import loader as rows_kernel
from hf_dynaspec.kernels.verify_rows import patch as rows_patch

CACHE_TOKENS = 200
LINEAR_SHAPES = {  # name: (out_features, in_features), the 0.5B drafter's and head blocks'
    "drafter mlp up (4864x896)": (4864, 896),
    "drafter mlp down (896x4864)": (896, 4864),
    "drafter fc (896x1792)": (896, 1792),
    "head block 2,048 rows": (2048, 896),
    "head 22,000 rows": (22000, 896),
}


def route(model, variant: str) -> None:
    rows_patch.disable(model)
    if variant in ("kernel", "shadow", "fp32-kernel"):
        rows_patch.enable(model, max_rows=rows_patch.ANY_ROWS, method=variant.removeprefix("fp32-"), min_rows=1,
                          float32=True)
    elif variant == "packed":
        rows_patch.enable(model, min_rows=0, max_rows=0, packed_rows=(1, 64))
    elif variant in ("routed", "fp32-routed"):
        verify_kernel.enable_kernels(model, verify_kernel.measured_kernels(model))


@torch.no_grad()
def target_costs(target_name: str, variants: list[str], tokens: list[int], repeats: int) -> tuple[dict, dict]:
    models = {"bf16": load_target(target_name, "bf16")[0]}
    if any(v.startswith("fp32") for v in variants):
        models["fp32"] = load_target(target_name, "fp32")[0]
    prefix = torch.randint(0, 10000, (1, CACHE_TOKENS), generator=torch.Generator().manual_seed(0))
    caches = {}
    for dtype, model in models.items():
        caches[dtype] = DynamicCache(config=model.config)
        model(input_ids=prefix, past_key_values=caches[dtype])
    logits = {}

    def case(variant: str, k: int):
        dtype = "fp32" if variant.startswith("fp32") else "bf16"
        model, cache = models[dtype], caches[dtype]
        new = torch.randint(0, 10000, (1, k), generator=torch.Generator().manual_seed(k))

        def factory():
            route(model, variant)
            extra = cache.get_seq_length() - CACHE_TOKENS
            if extra:  # drop the previous measurement's tokens (crop takes a negative count here)
                cache.crop(-extra)

            def forward():
                with torch.backends.mkldnn.flags(enabled=variant != "nomkldnn"):
                    logits[variant, k] = model(input_ids=new, past_key_values=cache, logits_to_keep=k).logits.float()
            return forward
        return factory
    medians = interleaved_medians({f"{v} {k} tokens": case(v, k) for k in tokens for v in variants}, repeats)
    for model in models.values():
        rows_patch.disable(model)
    agreement = {}
    for k in tokens:
        for v in variants:
            base = "fp32" if v.startswith("fp32") else "native"
            if v != base and base in variants:
                diff = (logits[v, k] - logits[base, k]).abs().max().item()
                same = bool((logits[v, k].argmax(-1) == logits[base, k].argmax(-1)).all())
                agreement[f"{v} {k} tokens"] = {"max_abs_logit_diff": diff, "same_argmax": same}
    return medians, agreement


def linear_costs(repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    cases = {}
    for name, (out_features, in_features) in LINEAR_SHAPES.items():
        weight = torch.randn(out_features, in_features).to(torch.bfloat16)
        x = torch.randn(1, in_features).to(torch.bfloat16)
        cases[f"{name} native"] = lambda x=x, w=weight: lambda: torch.nn.functional.linear(x, w)
        cases[f"{name} kernel"] = lambda x=x, w=weight: lambda: rows_kernel.bf16_rows_matmul(x, w).to(torch.bfloat16)
    return interleaved_medians(cases, repeats)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", choices=["target", "linear"], required=True)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--variants", default="native,nomkldnn,kernel,packed,routed,shadow,fp32,fp32-kernel,fp32-routed")
    parser.add_argument("--tokens", default="1,2,3,4,6,8")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--results", default="benchmarks/results/results.jsonl")
    args = parser.parse_args(argv)
    agreement = {}
    if args.what == "target":
        medians, agreement = target_costs(args.target, args.variants.split(","),
                                          [int(k) for k in args.tokens.split(",")], args.repeats)
    else:
        medians = linear_costs(args.repeats)
    for case, ms in medians.items():
        print(f"{case}: {ms:.3f} ms", agreement.get(case, ""))
    records = [make_record(f"verify_rows/{args.what}", case,
                           {"median_ms": ms, "repeats": args.repeats, **agreement.get(case, {})},
                           target=args.target if args.what == "target" else None) for case, ms in medians.items()]
    append_records(args.results, records)


if __name__ == "__main__":
    main()
