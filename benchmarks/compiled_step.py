"""One-token steps of a target on the fast CPU kernels, eager against compiled, interleaved (#91's step bars).

Cases, each a forward after a `--context`-token cache, medians of `--repeats` interleaved runs:
- `eager`: today's routed step (`fast_cpu(model, compile=False)`, a DynamicCache), what `vanilla-fast` ran before;
- `compiled`: the same kernels inside `torch.compile` over a StaticCache of `--capacity` (what `fast_cpu`'s
  default has generate() run), the rows kernel as the `hf_dynaspec::rows_matmul` operator;
- `verify9`: the eager routed forward of 9 tokens (a K = 8 chain's verification).

    python benchmarks/compiled_step.py --target qwen2.5-coder-0.5b-instruct --repeats 40
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, DynamicCache, StaticCache

import hf_dynaspec
from hf_dynaspec import zoo
from hf_dynaspec.generation.tree_verify import cache_kwargs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--context", type=int, default=200)
    parser.add_argument("--capacity", type=int, default=264, help="the static cache's capacity (prompt + new)")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(zoo.resolve_model_path(args.target), dtype=torch.bfloat16).eval()
    handle = hf_dynaspec.fast_cpu(model, compile=False)
    ids = torch.randint(0, 1000, (1, args.context), generator=torch.Generator().manual_seed(0))
    token, nine = torch.tensor([[5]]), torch.arange(5, 14)[None]
    static = StaticCache(config=model.config, max_cache_len=args.capacity)
    dynamic = DynamicCache(config=model.config)
    # the forward's cache keyword, read once outside the compiled step (transformers 5.2x renamed it)
    static_cache, dynamic_cache = cache_kwargs(model, static), cache_kwargs(model, dynamic)
    with torch.inference_mode():
        model(input_ids=ids, **static_cache, cache_position=torch.arange(args.context), use_cache=True)
        model(input_ids=ids, **dynamic_cache, use_cache=True)

    def rewind_dynamic():
        extra = dynamic.get_seq_length() - args.context
        if extra:
            dynamic.crop(-extra)

    def eager():
        rewind_dynamic()
        return model(input_ids=token, **dynamic_cache, use_cache=True).logits

    def verify9():
        rewind_dynamic()
        return model(input_ids=nine, **dynamic_cache, use_cache=True).logits

    def static_step():
        return model(input_ids=token, **static_cache, cache_position=torch.tensor([args.context]),
                     use_cache=True).logits

    step = torch.compile(static_step, fullgraph=True, dynamic=False)

    def compiled():
        for layer in static.layers:  # transformers 5.2x's static layers write at their own running length
            layer.cumulative_length.fill_(args.context)
        return step()

    cases = {"eager": eager, "compiled": compiled, "verify9": verify9}
    with torch.inference_mode():
        started = time.perf_counter()
        compiled()
        print(f"compile: {time.perf_counter() - started:.1f} s (kernels {handle.kernels})", flush=True)
        gap = (compiled().float() - eager().float()).abs().max().item()
        times = {name: [] for name in cases}
        for _ in range(2):
            for fn in cases.values():
                fn()
        for _ in range(args.repeats):
            for name, fn in cases.items():
                started = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    print(f"{args.target} bf16, {args.context}-token cache, static capacity {args.capacity}, "
          f"{torch.get_num_threads()} threads, medians of {args.repeats} interleaved runs")
    for name, ms in medians.items():
        print(f"  {name:9s} {ms:6.1f} ms")
    print(f"  compiled / eager step: {medians['compiled'] / medians['eager']:.3f}")
    print(f"  verify9 / compiled step: {medians['verify9'] / medians['compiled']:.3f}")
    print(f"  max |compiled - eager| logit: {gap:.4f} (bf16 rounding of differently fused sums)")


if __name__ == "__main__":
    main()
