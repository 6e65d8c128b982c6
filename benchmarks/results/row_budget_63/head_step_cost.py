"""Issue 63: the CPU head step of the k(t) cluster rule (the top-8 clusters whole) against the row budget, for one
random router input on the shipped 0.5B assistant (bf16, 2 threads, AVX-512 BF16 host, 2026-11-28; run from the
repository root; output in head_step_cost.txt)."""

import torch
from torch.utils import benchmark

from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.cluster_rows import block_ranges
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.kernels.shortlist_head import shortlist_head

torch.set_num_threads(2)
T = "qwen2.5-coder-0.5b-instruct"
target, _ = load_target(T, "bf16")
assistant, _ = load_assistant(f"assistants/{T}", target, T)
head = runtime_head(assistant, assistant.generation_config)
generator = torch.Generator().manual_seed(0)
e, h, x = (torch.randn(1, 896, generator=generator).bfloat16() for _ in range(3))
scores = head.router(e, h)
ranking = head.ranking(scores).tolist()
old_chosen = sorted(scores[0].float().topk(8).indices.tolist())
A, N = len(head.always_ids), head.num_clustered


def old_blocks(chosen):
    return [head.offsets[c] for c in chosen] + [N], [head.offsets[c + 1] for c in chosen] + [N + A]


def new_blocks(rows):
    starts, ends = block_ranges(ranking, rows, head.offsets)
    return starts + [N], ends + [N + A]


starts, ends = old_blocks(old_chosen)
print("old rows", sum(b - a for a, b in zip(starts, ends)), "blocks", len(starts))
for rows in (15143, 1755):
    s, t = new_blocks(rows)
    print("new R", rows, "rows", sum(b - a for a, b in zip(s, t)), "blocks", len(s))
cases = [("old8", lambda: shortlist_head(x, head.permuted_weight, starts, ends, head.token_order)),
         ("new15143", lambda: shortlist_head(x, head.permuted_weight, *new_blocks(15143), head.token_order)),
         ("new_rowsonly_15143_rank", lambda: block_ranges(ranking, 15143, head.offsets)),
         ("argsort", lambda: head.ranking(scores).tolist()),
         ("topk8", lambda: sorted(scores[0].float().topk(8).indices.tolist())),
         ("old1", lambda: shortlist_head(x, head.permuted_weight, *old_blocks([old_chosen[0]]), head.token_order)),
         ("new1755", lambda: shortlist_head(x, head.permuted_weight, *new_blocks(1755), head.token_order))]
for name, fn in cases:
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=1.0)
    print(name, round(timer.median * 1e3, 3), "ms")
