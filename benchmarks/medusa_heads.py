"""Time Medusa heads scoring their full vocabulary against their shortlist (the FR-Spec list stored with them).

    python benchmarks/medusa_heads.py --target qwen2.5-coder-0.5b-instruct --heads outputs/medusa-05b/heads \
        --sizes 32768,16384,8192 --json benchmarks/results/medusa_heads_05b.json

One draft round of Medusa scores K heads on one row: K residual blocks and K vocabulary projections. Timed with
torch.utils.benchmark (blocked autorange) in the target's dtype, interleaved: full heads, then each shortlist
size (the heads' own list cut to its S most frequent... here: its first S ids, which are sorted by id, so the
cut is a cost measurement, not a quality one). Reports milliseconds per round and the ratio to full heads.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
from torch.utils import benchmark

from hf_dynaspec.loading import load_target
from hf_dynaspec.modeling.medusa import MedusaAssistant


def time_heads(heads: MedusaAssistant, hidden: torch.Tensor, shortlist: bool, min_run_time: float) -> float:
    timer = benchmark.Timer(stmt="heads.head_logits(hidden, shortlist=shortlist)",
                            globals={"heads": heads, "hidden": hidden, "shortlist": shortlist})
    with torch.no_grad():
        heads.head_logits(hidden, shortlist=shortlist)  # gathers the shortlist rows once
        return timer.blocked_autorange(min_run_time=min_run_time).median * 1e3


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--heads", required=True)
    parser.add_argument("--sizes", default="32768,16384,8192")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--min-run-time", type=float, default=2.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    target, _ = load_target(args.target, args.dtype)
    heads = MedusaAssistant.from_pretrained(args.heads, target=target)
    stored = heads.frequency_ids.clone()
    hidden = torch.randn(1, heads.config.hidden_size, dtype=target.dtype)
    rows = {"full": time_heads(heads, hidden, False, args.min_run_time)}
    for size in (int(s) for s in args.sizes.split(",")):
        heads.frequency_ids = stored[:size]
        heads.attach(target)  # drops the gathered rows of the previous size
        rows[f"shortlist:{size}"] = time_heads(heads, hidden, True, args.min_run_time)
    report = {
        "target": args.target, "heads": args.heads, "num_heads": heads.config.num_heads, "dtype": args.dtype,
        "host": platform.processor() or platform.machine(), "torch": torch.__version__,
        "ms_per_round": {k: round(v, 3) for k, v in rows.items()},
        "ratio_to_full": {k: round(v / rows["full"], 3) for k, v in rows.items()},
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return report


if __name__ == "__main__":
    main()
