"""The fused top-k/top-p (`SparseTopKTopP`) on a row whose top-p cut it cannot prove (the cut splits equal logits):
before, the row went back to transformers' whole pair (a second top-k over the vocabulary, a second sparse attempt,
then the sort); now transformers' top-p runs on the top-k result the fused path already has. Both versions on the
same rows, interleaved (torch.utils.benchmark, median):

    python benchmarks/sparse_warper_fallback.py [--vocab 262144] [--top-k 64] [--top-p 0.95] [--before REV]

Rows: bf16-valued logits (many equal, as a bf16 target's), scaled by 3, tempered by 1.0 (Gemma-3's published
settings: top-k 64, top-p 0.95). The rows whose cut splits equal logits are found by the fused path itself.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.utils.benchmark as benchmark
from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

from hf_dynaspec.drafting import row_processing


def module_at(rev: str, path: str):
    """The module `path` as it was at git revision `rev`."""
    source = subprocess.run(["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True).stdout
    file = Path(tempfile.mkdtemp()) / Path(path).name
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(f"before_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab", type=int, default=262_144)
    parser.add_argument("--top-k", type=int, default=64)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--before", default="HEAD", help="the git revision of the version before")
    parser.add_argument("--rows", type=int, default=200)
    args = parser.parse_args(argv)
    before = module_at(args.before, "hf_dynaspec/drafting/row_processing.py")
    pair = (TopKLogitsWarper(args.top_k), TopPLogitsWarper(args.top_p))
    ids = torch.zeros(1, 1, dtype=torch.long)
    now, then = row_processing.SparseTopKTopP(*pair), before.SparseTopKTopP(*pair)
    split, whole = [], []
    for seed in range(args.rows):
        row = (torch.randn(1, args.vocab, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
        expected = pair[1](ids, pair[0](ids, row.clone()))
        assert torch.equal(now(ids, row.clone()), expected) and torch.equal(then(ids, row.clone()), expected)
        (whole if then._fused_row(row[0]) is not None else split).append(row)
    print(f"vocab {args.vocab}, top-k {args.top_k}, top-p {args.top_p}: {len(split)} of {args.rows} random rows "
          f"split equal logits at the cut; threads {torch.get_num_threads()}")
    for label, rows in (("cut splits equal logits", split[:5]), ("cut proven (sparse path)", whole[:5])):
        for name, warper in (("before", then), ("now", now)):
            timer = benchmark.Timer("for row in rows: warper(ids, row)", globals=dict(rows=rows, warper=warper, ids=ids))
            per_row = timer.blocked_autorange(min_run_time=1.0).median / len(rows)
            print(f"{label:26s} {name:7s} {1000 * per_row:7.3f} ms per row")


if __name__ == "__main__":
    sys.exit(main())
