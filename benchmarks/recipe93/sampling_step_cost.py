"""What one sampled step of `recipes.self_distill --sample` costs beside the forward, at batch 64, on the 0.5B's
vocabulary (151,936, its published top-k 20 / top-p 0.8) and Gemma 3's (262,144, top-k 64 / top-p 0.95): float32
logits holding bf16 values (as a bf16 target's are, ties included), timed with torch.utils.benchmark:

    python benchmarks/recipe93/sampling_step_cost.py

transformers' path (top-k, top-p, softmax, torch.multinomial), the recipe's before 2026-12-06 (the sparse top-k/top-p
pair `SparseTopKTopP`, then the package's race over softmax of the whole row, a one-hot row and greedy's argmax) and
now (`recipes.sampled_answers.KeptDraw`: top-k, top-p and the race over the top-k's entries, then greedy's argmax).
Each case includes a copy of the logits. Prints the host kind beside the numbers.
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as benchmark
from transformers import TopKLogitsWarper, TopPLogitsWarper

import hf_dynaspec.sampling as sampling
from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.summary import host_kind
from hf_dynaspec.drafting.row_processing import SparseTopKTopP
from recipes.sampled_answers import KeptDraw


def before(pair, context, logits):
    kept = pair(context, logits.clone())
    token = sampling.sample(kept.softmax(-1))
    return torch.full_like(kept, float("-inf")).scatter_(1, token, 0.0).argmax(-1)


def transformers_path(top_k, top_p, context, logits):
    kept = TopPLogitsWarper(top_p)(context, TopKLogitsWarper(top_k)(context, logits.clone()))
    return torch.multinomial(kept.softmax(-1), 1)


def main() -> None:
    torch.manual_seed(0)
    print(f"host: {host_kind({'host': host_description()})}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for vocab, top_k, top_p in [(151936, 20, 0.8), (262144, 64, 0.95)]:
        logits = (torch.randn(64, vocab) * 3).bfloat16().float()
        context = torch.randint(0, vocab, (64, 300))
        pair = SparseTopKTopP(TopKLogitsWarper(top_k), TopPLogitsWarper(top_p))
        draw = KeptDraw(top_k, top_p)
        cases = {
            "transformers: top-k, top-p, torch.multinomial": "transformers_path(top_k, top_p, context, logits)",
            "before: SparseTopKTopP, the race over the row, argmax": "before(pair, context, logits)",
            "now: KeptDraw, argmax": "draw(context, logits.clone()).argmax(-1)",
        }
        names = dict(globals(), top_k=top_k, top_p=top_p, context=context, logits=logits, pair=pair, draw=draw)
        for name, statement in cases.items():
            measured = benchmark.Timer(stmt=statement, globals=names).blocked_autorange(min_run_time=2)
            print(f"{name}: {measured.median * 1e3:.1f} ms per step (batch 64, V = {vocab:,}, top-k {top_k}, "
                  f"top-p {top_p})")


if __name__ == "__main__":
    main()
