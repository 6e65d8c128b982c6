"""#76 experiment: prompt lookup copies what followed the earliest occurrence of the context's last n-gram (as
transformers' prompt lookup does) instead of the most recent one. Runs `hf-dynaspec bench` in this process with
that patched in; the arguments are the bench's.

Usage: [MIN_NGRAM=1] python benchmarks/results/lookup_76c/earliest_copy.py BENCH-ARGS...
"""

import os
import sys

import hf_dynaspec.drafting.lookup as lookup

MIN_NGRAM = int(os.environ.get("MIN_NGRAM", "0"))  # set: every lookup tries n-grams down to this size


def lookup_match(token_ids, max_tokens, min_ngram=2, max_ngram=3):
    min_ngram = MIN_NGRAM or min_ngram
    num_tokens = token_ids.shape[0]
    for size in range(min(max_ngram, num_tokens - 1), min_ngram - 1, -1):
        suffix = token_ids[num_tokens - size :]
        windows = token_ids[: num_tokens - 1].unfold(0, size, 1)
        starts = (windows == suffix).all(dim=1).nonzero()
        if len(starts):
            begin = int(starts[0]) + size
            return token_ids[begin : begin + max_tokens], size
    return token_ids[:0], 0


lookup.lookup_match = lookup_match

if __name__ == "__main__":
    from hf_dynaspec.cli import main

    sys.exit(main(sys.argv[1:]))
