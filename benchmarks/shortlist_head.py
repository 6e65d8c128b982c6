"""The shortlisted LM head (hf_dynaspec.kernels.shortlist_head) against the full head, over shortlist sizes.

    python benchmarks/shortlist_head.py --hidden 896 --vocab 151936 --shortlists 4096,19000,38000

One `hf-dynaspec bench-head` measurement per shortlist size (full head, gather reference, CPU block path and,
where it runs, Triton; torch.compile'd variants included), each appended to the results table (--results).
"""

from __future__ import annotations

import argparse

from hf_dynaspec.bench import shortlist_head


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--shortlists", default="4096,19000,38000")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--clusters", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--results", default="benchmarks/results/results.jsonl")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.shortlists.split(",")):
        result = shortlist_head.run(args.hidden, args.vocab, size, args.dtype, args.batch, args.clusters,
                                    args.repeats)
        shortlist_head.write(result, None, args.results)
        print(size, {k: result[k] for k in ("full_ms", "shortlist_ms", "ratio", "path")})


if __name__ == "__main__":
    main()
