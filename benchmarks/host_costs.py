"""Measure this host's speculation costs (`RoundCosts`: the target's verify forwards over 1..17 tokens, the drafter's
consume pass, first draft, draft step and tree step) for one target, assistant and dtype, as the `auto` planner
measures them during a call (the CPU rows kernel on where it is faster for bf16), and write them as a cost fixture
for the planner simulation tests (tests/fixtures/planner/costs/).

    python benchmarks/host_costs.py --target qwen2.5-coder-0.5b-instruct \
        --assistant assistants/qwen2.5-coder-0.5b-instruct --dtype fp32 --out tests/fixtures/planner/costs/x.json

An AVX2-only host can be imitated on an AVX-512 one by capping the instruction sets of PyTorch's kernels, oneDNN and
MKL (`--imitate-avx2` sets ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2 before
torch loads): the same memory system and clock, the instruction sets of an AVX2 CPU. The fixture says so.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def host_kind() -> str:
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    return "avx512_bf16" if "avx512_bf16" in flags else ("avx512" if "avx512f" in flags else "avx2")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--assistant", required=True, type=Path)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--imitate-avx2", action="store_true")
    args = parser.parse_args(argv)
    if args.imitate_avx2 and any(os.environ.get(k) != v for k, v in AVX2_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2_ENV})  # before torch loads

    import torch

    from hf_dynaspec import DynaSpecAssistant
    from hf_dynaspec.drafting.runtime import runtime_head
    from hf_dynaspec.generation.costs.round_costs import measure_round_costs
    from hf_dynaspec.generation.costs.verify_kernel import target_verify_kernel
    from hf_dynaspec.loading import load_target

    target, _ = load_target(args.target, args.dtype)
    assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=target)
    options = assistant.generation_config
    head = runtime_head(assistant, options)
    with target_verify_kernel(target) as rows:
        costs = measure_round_costs(target, assistant, head, 16, tree_top_k=options.tree_top_k,
                                    tree_total_tokens=options.tree_total_tokens)
    record = {"host": host_kind(), "imitated": "avx2" if args.imitate_avx2 else None,
              "env": {k: os.environ.get(k) for k in AVX2_ENV}, "target": args.target, "dtype": args.dtype,
              "assistant": str(args.assistant), "shortlist": options.shortlist, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "cpu_routes": rows.kernels._asdict(), "costs": asdict(costs),
              "command": " ".join(["python", *sys.argv])}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "costs"}))
    print("verify(1,2,5,9):", [round(costs.verify(n), 4) for n in (1, 2, 5, 9)], "step", round(costs.draft_step_seconds, 4))


if __name__ == "__main__":
    main()
