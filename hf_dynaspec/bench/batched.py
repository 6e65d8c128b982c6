"""Batched throughput (`hf-dynaspec bench --batch-size 1,4,16`): plain batched `generate()` against batched
speculation, interleaved, per batch size.

The prompts are cut into batches of N rows (cycled so that every batch is full: 7 prompts at 16 rows repeat
prompts), left-padded, and every method decodes every batch, the starting method rotating from batch to batch.
Per (batch, method): new tokens over the batch (each row's tokens up to its first EOS, the pads after it not
counted) per second, the process's peak resident memory during the call above what it held before it (sampled
every 2 ms: the KV cache, activations, the drafts; run with `MALLOC_MMAP_THRESHOLD_=131072` so that freed
buffers go back to the system and one call's peak is not hidden by an earlier call's), and per row whether it is
identical to plain batched generate()'s, or diverges at a near-tie (`check_exactness` on the row's own prompt:
fp32 logits of the two tokens within 1.0), or not.
Assistant chain methods run on the public route (`custom_generate=speculative_generate`), which takes batches;
`-tree` and Medusa methods already do.

Legend: B rows per batch, L padded prompt length.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from hf_dynaspec.bench.harness import interleaved_order
from hf_dynaspec.bench.methods import Method
from hf_dynaspec.bench.prompts import EncodedPrompt
from hf_dynaspec.exactness import check_exactness
from hf_dynaspec.generation.speculative import speculative_generate
from hf_dynaspec.kernels.streams import devices_of, synchronize


def batched_kwargs(method: Method) -> dict:
    """The method's generate() arguments for a batch: `assistant_model=` (batch 1 only) becomes speculative_generate."""
    kwargs = dict(method.generate_kwargs)
    if "assistant_model" in kwargs:
        assistant = kwargs.pop("assistant_model")
        if not hasattr(assistant, "drafter") or "custom_generate" in kwargs:
            raise ValueError(f"method {method.key!r} has no batched form: only hf-dynaspec's own drafters batch")
        kwargs.update(custom_generate=speculative_generate, drafter=assistant)
    return kwargs


def left_padded(prompts: list[torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts `[1, L_b]` -> (input_ids `[B, L]`, attention_mask `[B, L]`), padded on the left."""
    width = max(p.shape[1] for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - prompt.shape[1] :] = prompt[0]
        mask[row, width - prompt.shape[1] :] = 1
    return ids, mask


def row_lengths(new_ids: torch.Tensor, eos_ids: set[int]) -> list[int]:
    """Per row of `[B, n]` new tokens: how many were generated (up to and including the first EOS)."""
    lengths = []
    for row in new_ids.tolist():
        ends = [i for i, token in enumerate(row) if token in eos_ids]
        lengths.append(ends[0] + 1 if ends else len(row))
    return lengths


class PeakMemory:
    """Peak resident memory of this process during a `with` block, above what it held at its start (bytes).
    On CUDA the allocator's peak instead. Linux reads /proc/self/statm; elsewhere `growth` is None."""

    def __init__(self, device: torch.device, interval: float = 0.002):
        self.device, self.interval, self.growth = device, interval, None
        self._stop = threading.Event()

    @staticmethod
    def _rss() -> int | None:
        try:
            return int(Path("/proc/self/statm").read_text().split()[1]) * 4096
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
            return self
        self._start = self._peak = self._rss()
        if self._start is not None:
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            self._peak = max(self._peak, self._rss() or 0)

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            self.growth = torch.cuda.max_memory_allocated(self.device) - self._start
        elif self._start is not None:
            self._stop.set()
            self._thread.join()
            self._peak = max(self._peak, self._rss() or 0)
            self.growth = self._peak - self._start
        return False


def make_batches(prompts: list[EncodedPrompt], size: int) -> list[list[torch.Tensor]]:
    """The prompts in batches of `size` rows, cycled so that the last batch is full too."""
    count = -(-len(prompts) // size) * size
    ids = [prompts[i % len(prompts)].input_ids for i in range(count)]
    return [ids[start : start + size] for start in range(0, count, size)]


def timed_batch(target, kwargs: dict, ids, mask, max_new_tokens: int, pad: int) -> tuple[torch.Tensor, float, int]:
    """One greedy batched call -> (new ids `[B, n]`, seconds, peak memory growth in bytes or None)."""
    device = target.device
    ids, mask = ids.to(device), mask.to(device)
    synchronize(devices_of(target))
    with PeakMemory(device) as memory:
        start = time.perf_counter()
        out = target.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                              pad_token_id=pad, **kwargs)
        synchronize(devices_of(target))
        seconds = time.perf_counter() - start
    return out[:, ids.shape[1] :].cpu(), seconds, memory.growth


def run_batched_benchmark(target, methods: list[Method], prompts: list[EncodedPrompt], batch_sizes: list[int], *,
                          max_new_tokens: int, pad_token_id: int, eos_ids: set[int], progress: bool = True) -> dict:
    """Every method on every batch of every size, interleaved; -> {"batch_sizes": {B: {method: metrics}}}."""
    if methods[0].key != "vanilla":
        raise ValueError("--batch-size needs 'vanilla' first in --methods: plain batched generate() is the reference")
    kwargs = [batched_kwargs(method) for method in methods]
    results = {}
    for size in batch_sizes:
        batches = make_batches(prompts, size)
        warm_ids, warm_mask = left_padded([p[:, :8] for p in batches[0][:2]], pad_token_id)
        for extra in kwargs:  # first calls allocate and measure costs: keep them out of the numbers
            timed_batch(target, extra, warm_ids, warm_mask, 2, pad_token_id)
        totals = {m.key: {"tokens": 0, "seconds": 0.0, "memory": [], "identical": 0, "near_tie": 0, "rows": 0}
                  for m in methods}
        bar = tqdm(total=len(batches) * len(methods), desc=f"bench x{size}", unit="call", disable=not progress)
        for index, batch in enumerate(batches):
            ids, mask = left_padded(batch, pad_token_id)
            outputs = {}
            for m in interleaved_order(index, len(methods)):
                new, seconds, memory = timed_batch(target, kwargs[m], ids, mask, max_new_tokens, pad_token_id)
                outputs[methods[m].key] = new
                total = totals[methods[m].key]
                total["tokens"] += sum(row_lengths(new, eos_ids))
                total["seconds"] += seconds
                total["memory"].append(memory)
                bar.update(1)
            for key, new in outputs.items():
                _count_exact(target, totals[key], batch, outputs["vanilla"], new, eos_ids)
        bar.close()
        results[size] = _summaries(totals)
    return {"batch_sizes": results, "max_new_tokens": max_new_tokens, "n_prompts": len(prompts)}


def _count_exact(target, total: dict, batch: list[torch.Tensor], reference, new, eos_ids: set[int]) -> None:
    """Per row: identical to plain batched generate()'s tokens, or diverging at a near-tie."""
    references, news = row_lengths(reference, eos_ids), row_lengths(new, eos_ids)
    for row, prompt in enumerate(batch):
        divergence = check_exactness(target, prompt.to(target.device), reference[row, : references[row]],
                                     new[row, : news[row]])
        total["identical"] += divergence is None
        total["near_tie"] += divergence is not None and divergence.near_tie
        total["rows"] += 1


def _summaries(totals: dict) -> dict:
    plain = totals["vanilla"]
    plain_rate = plain["tokens"] / plain["seconds"]
    plain_memory = max((m for m in plain["memory"] if m is not None), default=None)
    summary = {}
    for key, total in totals.items():
        memory = max((m for m in total["memory"] if m is not None), default=None)
        rate = total["tokens"] / total["seconds"]
        summary[key] = {
            "tokens_per_s": rate, "speedup": rate / plain_rate, "peak_memory_bytes": memory,
            "memory_ratio": memory / plain_memory if memory is not None and plain_memory else None,
            "rows_identical": total["identical"], "rows_near_tie": total["near_tie"], "rows": total["rows"],
        }
    return summary


def batched_markdown(report: dict) -> str:
    lines = ["| rows | method | tok/s (batch) | speedup | peak memory growth | memory / plain | rows identical / "
             "near-tie |", "| ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for size, methods in report["batch_sizes"].items():
        for key, m in methods.items():
            memory = "-" if m["peak_memory_bytes"] is None else f"{m['peak_memory_bytes'] / 2**20:.0f} MiB"
            ratio = "-" if m["memory_ratio"] is None else f"{m['memory_ratio']:.2f}"
            lines.append(f"| {size} | {key} | {m['tokens_per_s']:.2f} | {m['speedup']:.2f} | {memory} | {ratio} | "
                         f"{m['rows_identical']} / {m['rows_near_tie']} of {m['rows']} |")
    return "\n".join(lines)
