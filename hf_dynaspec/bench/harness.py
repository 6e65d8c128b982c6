"""Run decoding methods side by side on the same prompts, interleaved, and aggregate what users compare.

For every prompt, all methods run one after another, the starting method rotating from prompt to prompt,
so that slow drifts of a shared machine hit every method equally. Per (prompt, method) we record the
generated ids, end-to-end seconds, the time to the end of the target's first forward (prefill; decode-only
speed excludes it) and the number of target forward passes (a forward hook on the target).

tau = generated tokens / target forward passes, for every method alike: the prefill pass counts as a pass
that committed one token, which is what it costs (our EAGLE drafter needs that pass's hidden states before
it can draft). Exactness: each output is compared to vanilla's on the same prompt with
`hf_dynaspec.exactness.check_exactness` (near-tie when the fp32 logits of the two tokens at the first
divergence are within 1.0); in fp32 runs only token-identical outputs count as exact.

Sampled runs (`sampling`: the generation settings, e.g. the target's published temperature / top-p / top-k /
repetition penalty) draw every (prompt, method) from its own seed (`run_seed`), so each method's outputs are a fair
sample and a run repeats exactly. Outputs then differ by construction: a sampled method's exactness (it keeps the
target's distribution) is proven by the suite's exact enumeration of output distributions, not by a bench; the
report says so (`exact` is None) and keeps speed, tau and acceptance as for greedy.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm

from hf_dynaspec.bench.methods import Method
from hf_dynaspec.bench.prompts import EncodedPrompt
from hf_dynaspec.drafting.runtime import forget_learnt_state
from hf_dynaspec.exactness import check_exactness
from hf_dynaspec.kernels.streams import devices_of, synchronize


@dataclass
class Run:
    new_ids: torch.Tensor  # [N]
    seconds: float
    prefill_seconds: float  # until the target's first forward returned
    target_passes: int
    stats: dict

    @property
    def tokens_per_s(self) -> float:
        return len(self.new_ids) / self.seconds

    @property
    def decode_tokens_per_s(self) -> float:
        """Tokens after the first, per second after the first target forward."""
        decode = self.seconds - self.prefill_seconds
        return (len(self.new_ids) - 1) / decode if decode > 0 and len(self.new_ids) > 1 else float("nan")


SAMPLED_EXACTNESS = ("sampled: outputs differ by draw; that sampling keeps the target's distribution is proven by "
                     "the test suite's exact enumeration of output distributions (tests/test_enumeration.py and the "
                     "sampled tests of each route), not by this bench")


def run_seed(seed: int, prompt_index: int, method_index: int) -> int:
    """The seed of one sampled (prompt, method) run: its own per prompt and per method, fixed by `seed`."""
    return seed + 1000 * prompt_index + method_index


def timed_run(target, method: Method, input_ids: torch.Tensor, max_new_tokens: int, sampling: dict | None = None,
              seed: int = 0) -> Run:
    """Generate with `method` (greedy, or sampled with the settings `sampling` from `seed`), timed, counting the
    target's forward passes. On CUDA the clock is read after a synchronisation at the start, at the end of the
    prefill (the first forward) and at the end."""
    if method.run is not None:  # another engine (llama.cpp): its own clock, one pass per token
        start = time.perf_counter()
        new_ids, first = method.run(input_ids, max_new_tokens)
        return Run(new_ids, time.perf_counter() - start, first, max(len(new_ids), 1), {})
    input_ids = input_ids.to(target.device)
    devices = devices_of(target)  # every card the target spans: its last layers may run on another than its first
    forward_ends: list[float] = []

    @torch.compiler.disable  # a compiled step (vanilla-fast's) runs the hook outside its graph, never guards on it
    def on_forward(*_):
        if not forward_ends:  # only the prefill's end is timed: later passes are only counted (no extra waits)
            synchronize(devices)
        forward_ends.append(time.perf_counter())

    context = method.context(target) if method.context is not None else contextlib.nullcontext()
    handle = target.register_forward_hook(on_forward)
    decoding = {"do_sample": True, **sampling} if sampling else {"do_sample": False}
    if sampling:
        torch.manual_seed(seed)
    synchronize(devices)
    start = time.perf_counter()
    try:
        with context:
            out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_new_tokens,
                                  **decoding, **method.generate_kwargs)
        synchronize(devices)
    finally:
        end = time.perf_counter()
        handle.remove()
    first = forward_ends[0] - start if forward_ends else 0.0
    return Run(out[0, input_ids.shape[1]:].cpu(), end - start, first, len(forward_ends), method.stats())


def interleaved_order(prompt_index: int, num_methods: int) -> list[int]:
    """Method indices for one prompt: a rotation that starts one method later on each prompt."""
    return [(prompt_index + offset) % num_methods for offset in range(num_methods)]


def widest_run(prompts: list[EncodedPrompt], max_new_tokens: int) -> torch.Tensor:
    """Ids as long as the longest prompt with its `max_new_tokens` (the longest prompt repeated), less the two a
    warm-up decodes."""
    longest = max((prompt.input_ids for prompt in prompts), key=lambda ids: ids.shape[1])
    length = longest.shape[1] + max(max_new_tokens - 2, 0)
    return longest.repeat(1, -(-length // longest.shape[1]))[:, :length]


def geometric_mean(values: list[float]) -> float | None:
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def run_benchmark(target, methods: list[Method], prompts: list[EncodedPrompt], *, max_new_tokens: int,
                  dtype: str, target_name: str, progress: bool = True,
                  on_run=None, sampling: dict | None = None, seed: int = 0) -> dict:
    """Measure every method on every prompt (interleaved) and return the JSON-ready report.

    `methods` must contain `vanilla` (the reference of speedups and exactness). `on_run(prompt, method, run)`
    is called after each measurement (tests use it to observe the order). `sampling`: sample with these generation
    settings (None: greedy), each run from `run_seed(seed, prompt, method)`.
    """
    keys = [m.key for m in methods]
    if "vanilla" not in keys:
        raise ValueError("the methods must include 'vanilla': speedups and exactness are measured against it")
    # First calls allocate caches, build heads and compile (vanilla-fast's steps: one graph at the first cache
    # capacity, one with the capacity symbolic at the second, and one where a sliding-window layer's static cache is
    # full and rolls, which Gemma-3's 512-token window meets on long prompts): keep them all out of the numbers. The
    # last warm-up is as long as the longest timed run (its prompt and new tokens), so none meets a wider or fuller
    # cache than a warm-up did.
    for input_ids in (prompts[0].input_ids[:, :8], prompts[0].input_ids[:, :16], widest_run(prompts, max_new_tokens)):
        for method in methods:
            timed_run(target, method, input_ids, 2, sampling, seed)
    for method in methods:  # ...but not what they taught the planner and the suffix cache about prompt 0
        if method.assistant is not None:
            forget_learnt_state(method.assistant)
    runs: dict[str, list[Run]] = {key: [] for key in keys}
    bar = tqdm(total=len(prompts) * len(methods), desc="bench", unit="run", disable=not progress)
    for index, prompt in enumerate(prompts):
        for m in interleaved_order(index, len(methods)):
            run = timed_run(target, methods[m], prompt.input_ids, max_new_tokens, sampling, run_seed(seed, index, m))
            runs[methods[m].key].append(run)
            if on_run is not None:
                on_run(prompt, methods[m], run)
            bar.set_postfix(method=methods[m].key, tok_s=f"{run.tokens_per_s:.1f}")
            bar.update(1)
    bar.close()
    return {
        "target": target_name,
        "dtype": dtype,
        "device": str(target.device),
        "n_prompts": len(prompts),
        "max_new_tokens": max_new_tokens,
        "mode": "sampled" if sampling else "greedy",
        "sampling": sampling, "seed": seed if sampling else None, "exactness": SAMPLED_EXACTNESS if sampling else None,
        "methods": {m.key: {**_aggregate(m.key, runs[m.key], runs["vanilla"], prompts, target, dtype,
                                         sampled=bool(sampling)),
                            **({"weight_format": m.weight_format} if m.weight_format else {})} for m in methods},
    }


def _summary(key: str, runs: list[Run], vanilla: list[Run]) -> dict:
    tokens = sum(len(r.new_ids) for r in runs)
    passes = sum(r.target_passes for r in runs)
    drafted = [r.stats.get("drafted", 0) for r in runs]

    def weighted(name: str) -> float | None:
        pairs = [(r.stats.get(name), w) for r, w in zip(runs, drafted) if r.stats.get(name) is not None and w]
        return sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else None

    lookup_passes = sum(r.stats.get("lookup_passes", 0) for r in runs)
    lookup_drafted = sum(r.stats.get("lookup_drafted", 0) for r in runs)
    lookup_vetoes = sum(r.stats.get("lookup_vetoes", 0) for r in runs)
    return {
        "tau": None if key == "vanilla" else tokens / passes,
        # Draft tokens the target accepted, of those it checked (our assistant's methods only).
        "acceptance": weighted("acceptance_rate"),
        "avg_shortlist": weighted("avg_shortlist"),
        "coverage": weighted("coverage"),
        # Passes whose draft came from prompt lookup (share of decoding passes), and how much of it was accepted.
        "lookup_share": lookup_passes / sum(r.stats["verify_passes"] for r in runs) if lookup_passes else None,
        "lookup_acceptance": (sum(r.stats.get("lookup_accepted", 0) for r in runs) / lookup_drafted
                              if lookup_drafted else None),
        # Lookup matches the drafter overruled (prompt_lookup_veto), as a share of all lookup matches.
        "lookup_vetoed": lookup_vetoes / (lookup_vetoes + lookup_passes) if lookup_vetoes else None,
        # Draft tokens the target checked per decoding pass (our assistant's methods only; lookup drafts included).
        "drafted_per_pass": (sum(drafted) / sum(r.stats["verify_passes"] for r in runs)
                             if any(r.stats for r in runs) else None),
        # Which source drafted the decoding passes ("drafter", "prompt-lookup", "suffix-request", ..., "none").
        "passes_by_source": _summed(r.stats.get("passes_by_source") for r in runs),
        "accepted_by_source": _summed(r.stats.get("accepted_by_source") for r in runs),
        "tokens_per_s": tokens / sum(r.seconds for r in runs),
        "decode_tokens_per_s": sum(len(r.new_ids) - 1 for r in runs) / sum(r.seconds - r.prefill_seconds for r in runs),
        "speedup": geometric_mean([r.tokens_per_s / v.tokens_per_s for r, v in zip(runs, vanilla)]),
        "decode_speedup": geometric_mean([r.decode_tokens_per_s / v.decode_tokens_per_s for r, v in zip(runs, vanilla)]),
    }


def _summed(counts) -> dict | None:
    total: dict = {}
    for count in counts:
        for name, value in (count or {}).items():
            total[name] = total.get(name, 0) + value
    return total or None


def _aggregate(key: str, runs: list[Run], vanilla: list[Run], prompts: list[EncodedPrompt], target, dtype: str,
               sampled: bool = False) -> dict:
    divergences = []
    for prompt, run, reference in zip(prompts, runs, vanilla):
        if run is reference or sampled:  # sampled outputs differ by draw: exactness is the enumeration tests'
            continue
        found = check_exactness(target, prompt.input_ids, reference.new_ids, run.new_ids)
        if found is not None:
            divergences.append({"prompt_id": prompt.prompt_id, "category": prompt.category, **found.as_dict()})
    exact = (None if sampled else not divergences if dtype == "fp32" else all(d["near_tie"] for d in divergences))
    categories = sorted({p.category for p in prompts})
    per_category = {}
    for category in categories:
        chosen = [i for i, p in enumerate(prompts) if p.category == category]
        summary = _summary(key, [runs[i] for i in chosen], [vanilla[i] for i in chosen])
        per_category[category] = {name: summary[name] for name in ("tau", "acceptance", "avg_shortlist", "speedup",
                                                                   "decode_speedup")}
        per_category[category]["n_prompts"] = len(chosen)
    return {**_summary(key, runs, vanilla), "exact": exact, "n_mismatch": len(divergences),
            "divergences": divergences, "per_category": per_category}
