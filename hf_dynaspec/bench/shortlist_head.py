"""`hf-dynaspec bench-head`: the full LM head against shortlisted paths, interleaved in one process.

The shortlist is made of whole clusters with a skewed (log-normal) size distribution, as spherical k-means
produces on real heads, added in random order until about S rows. Each path includes the argmax.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.bench.runner import DTYPES
from hf_dynaspec.bench.timer import interleaved_medians
from hf_dynaspec.kernels.shortlist_head import triton_available
from hf_dynaspec.kernels.shortlist_head.torch_paths import shortlist_head, shortlist_head_reference


def cluster_blocks(vocab: int, num_clusters: int, shortlist: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Row blocks `[start, end)` of whole clusters totalling about `shortlist` rows."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.exp(torch.randn(num_clusters, generator=generator))  # log-normal cluster sizes
    sizes = (weights / weights.sum() * vocab).floor().long().clamp(min=1)
    sizes[-1] += vocab - sizes.sum()
    offsets = [0] + sizes.cumsum(0).tolist()
    starts, ends, total = [], [], 0
    for c in torch.randperm(num_clusters, generator=generator).tolist():
        if total >= shortlist:
            break
        if total and total + offsets[c + 1] - offsets[c] > 1.1 * shortlist:
            continue  # a cluster that would overshoot "about S" by more than 10%
        starts.append(offsets[c])
        ends.append(offsets[c + 1])
        total += offsets[c + 1] - offsets[c]
    order = sorted(range(len(starts)), key=starts.__getitem__)
    return [starts[i] for i in order], [ends[i] for i in order]


def _compiled_gather_head():
    """torch.compile (dynamic shapes) of gather + matmul + argmax: the compiler's answer to the same problem."""

    def gather_head(hidden, weight, rows):
        return (hidden @ weight.index_select(0, rows).T).argmax(-1)

    return torch.compile(gather_head, dynamic=True)


def triton_path(hidden: torch.Tensor, weight: torch.Tensor, rows: torch.Tensor):
    """The Triton kernel's argmax `[B]` over the head rows `rows` (the operator the runtime head calls)."""
    from hf_dynaspec.kernels.shortlist_head.op import indexed_head_op

    return lambda: indexed_head_op(hidden, weight, rows)[1]


def run(hidden_size: int, vocab: int, shortlist: int, dtype: str, batch: int, clusters: int, repeats: int = 30,
        compiled: bool = True) -> dict:
    """Median milliseconds of each path over `repeats` interleaved rounds; `path` is the fastest shortlisted one.

    On CUDA with Triton the Triton kernel is one of the paths; `compiled` adds torch.compile's version.
    """
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    weight = torch.randn(vocab, hidden_size).to(DTYPES[dtype]).to(device)
    token_order = torch.randperm(vocab).to(device)
    hidden = torch.randn(batch, hidden_size).to(DTYPES[dtype]).to(device)
    starts, ends = cluster_blocks(vocab, clusters, shortlist)
    rows = torch.cat([torch.arange(a, b) for a, b in zip(starts, ends)]).to(device)
    paths = {
        "full": lambda: (hidden @ weight.T).argmax(-1),
        "reference": lambda: shortlist_head_reference(hidden, weight, starts, ends, token_order).scores.argmax(-1),
        "cpu_blocks": lambda: shortlist_head(hidden, weight, starts, ends, token_order).scores.argmax(-1),
    }
    if compiled:
        gather_head = _compiled_gather_head()
        paths["compiled_gather"] = lambda: gather_head(hidden, weight, rows)
    if device == "cuda" and triton_available():
        paths["triton"] = triton_path(hidden, weight, rows)
    with torch.no_grad():
        for fn in paths.values():  # compilation, outside the measurements
            fn()
        median = interleaved_medians({name: (lambda fn=fn: fn) for name, fn in paths.items()}, repeats)
    best = min((name for name in paths if name != "full"), key=median.get)
    return {
        "full_ms": median["full"], "shortlist_ms": median[best], "ratio": median[best] / median["full"], "path": best,
        "paths_ms": median, "hidden": hidden_size, "vocab": vocab, "shortlist_rows": sum(e - s for s, e in zip(starts, ends)),
        "blocks": len(starts), "clusters": clusters, "dtype": dtype, "batch": batch, "repeats": repeats,
        "threads": torch.get_num_threads(), "device": device,
    }


def write(result: dict, json_path: str | None, results_path: str | None = None) -> None:
    """Write `result` as JSON to `json_path` and/or append it to the results table at `results_path`
    (hf_dynaspec.bench.results_table); nothing is written inside the installed package."""
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2))
    if results_path:
        metrics = {k: v for k, v in result.items() if k != "path"}
        append_records(results_path, [make_record("shortlist_head", result["path"], metrics)])
