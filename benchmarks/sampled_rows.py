"""#75: one sampled draft position's processing, on the whole vocabulary (the old path: widen, then transformers'
processors, softmax, draw) against the shortlist's rows (row_processing: processors on the rows, draw, widen q
once for the verifier), with Qwen2.5-Coder-Instruct's published sampling settings. torch.utils.benchmark, 2 threads.

    python benchmarks/sampled_rows.py --json benchmarks/results/sampled_75/rows_processing.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.utils.benchmark as benchmark
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

import hf_dynaspec.sampling as sampling
from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.drafting.row_processing import process_rows, widen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--rows", default="4096,18000,40000")
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7),
                                      TopKLogitsWarper(20), TopPLogitsWarper(0.8)])
    context = torch.randint(0, args.vocab, (1, args.context))
    results = []
    for size in (int(value) for value in args.rows.split(",")):
        ids = torch.randperm(args.vocab)[:size]
        logits = torch.randn(1, size) * 3

        def whole(logits=logits, ids=ids):
            full = processors(context, widen(logits, ids, args.vocab))
            return sampling.sample(full.softmax(-1)), full

        def rows(logits=logits, ids=ids):
            processed = process_rows(processors, context, logits, ids)
            column = sampling.sample(processed.softmax(-1))
            return ids[column], widen(processed, ids, args.vocab)

        timings = {name: benchmark.Timer("f()", globals={"f": f}, num_threads=2).blocked_autorange(min_run_time=1.0)
                   for name, f in (("whole_vocabulary", whole), ("rows", rows))}
        row = {"rows": size, **{f"{name}_ms": t.median * 1e3 for name, t in timings.items()}}
        row["speedup"] = row["whole_vocabulary_ms"] / row["rows_ms"]
        print(row)
        results.append(row)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"vocab": args.vocab, "context": args.context, "host": host_description(),
                       "torch": torch.__version__, "results": results}, out, indent=2)


if __name__ == "__main__":
    main()
