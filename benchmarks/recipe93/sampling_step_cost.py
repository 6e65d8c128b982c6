"""What one sampled step of `recipes.self_distill --sample` costs beside the forward, at batch 64 on the 0.5B's
vocabulary (151,936; float32 logits as generate() processes them), timed with torch.utils.benchmark:

    python benchmarks/recipe93/sampling_step_cost.py

transformers' path (top-k, top-p, softmax, torch.multinomial) against the recipe's (`sparse_sampling`: the sparse
top-k/top-p pair, then `DrawnToken`'s race and greedy's argmax), the repetition penalty shared by both. Prints the
host kind beside the numbers.
"""

from __future__ import annotations

import torch
import torch.utils.benchmark as benchmark
from transformers import RepetitionPenaltyLogitsProcessor, TopKLogitsWarper, TopPLogitsWarper

from hf_dynaspec.bench.results_table import host_description
from hf_dynaspec.bench.summary import host_kind
from hf_dynaspec.drafting.row_processing import SparseTopKTopP
from recipes.self_distill import DrawnToken


def main() -> None:
    torch.manual_seed(0)
    logits = torch.randn(64, 151936) * 3
    context = torch.randint(0, 151936, (64, 300))
    top_k, top_p = TopKLogitsWarper(20), TopPLogitsWarper(0.8)
    pair, draw = SparseTopKTopP(TopKLogitsWarper(20), TopPLogitsWarper(0.8)), DrawnToken()
    kept = pair(context, logits.clone())
    cases = {
        "transformers: top-k + top-p": lambda: top_p(context, top_k(context, logits.clone())),
        "transformers: softmax + torch.multinomial": lambda: torch.multinomial(kept.softmax(-1), 1),
        "recipe: SparseTopKTopP": lambda: pair(context, logits.clone()),
        "recipe: DrawnToken + argmax": lambda: draw(context, kept).argmax(-1),
        "both: repetition penalty": lambda: RepetitionPenaltyLogitsProcessor(1.1)(context, logits.clone()),
        "(a copy of the logits, in every case above)": lambda: logits.clone(),
    }
    print(f"host: {host_kind({'host': host_description()})}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for name, call in cases.items():
        measured = benchmark.Timer(stmt="call()", globals={"call": call}).blocked_autorange(min_run_time=2)
        print(f"{name}: {measured.median * 1e3:.1f} ms per step (batch 64, V = 151,936)")


if __name__ == "__main__":
    main()
