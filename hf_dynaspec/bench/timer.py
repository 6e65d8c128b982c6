"""The one timer of the benchmarks: single calls, interleaved over cases, medians reported.

    medians = interleaved_medians({"native": lambda: lambda: f(x), "kernel": lambda: lambda: g(x)}, repeats=30)

Each case is a *factory*: called (untimed) before every measurement, it does the case's set-up (a fresh cache,
a drafter prefill, switching a kernel on) and returns the thunk that is timed. Within a repeat every case runs
once, the starting case rotating from repeat to repeat, so that slow drifts of a shared machine hit every case
alike; the report is the median over repeats, in milliseconds.

Why not `torch.utils.benchmark.Timer` for the call itself: its `timeit` runs the statement a few extra times
as warm-up, and most cases here are stateful single shots (a drafter session consumes the positions it was
given; a cache grows), which cannot be repeated without their set-up. The call is timed with
`time.perf_counter`, with every CUDA device synchronised before and after when CUDA is in use (each by name:
`torch.cuda.synchronize()` alone waits for the current device only).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from hf_dynaspec.kernels.streams import synchronize

Factory = Callable[[], Callable[[], object]]


def time_once_ms(thunk: Callable[[], object]) -> float:
    """Milliseconds of one call of `thunk`."""
    devices = cuda_in_use()
    synchronize(devices)
    start = time.perf_counter()
    thunk()
    synchronize(devices)
    return (time.perf_counter() - start) * 1000


def cuda_in_use() -> list[torch.device]:
    """Every CUDA device, once CUDA is initialised (the cases may run on any of them); none before."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return []
    return [torch.device("cuda", index) for index in range(torch.cuda.device_count())]


def interleaved_samples(cases: dict[str, Factory], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Milliseconds of every case in every repeat (`warmup` untimed rounds first)."""
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            cases[name]()()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        for offset in range(len(names)):
            name = names[(repeat + offset) % len(names)]
            samples[name].append(time_once_ms(cases[name]()))
    return samples


def interleaved_medians(cases: dict[str, Factory], repeats: int, warmup: int = 1) -> dict[str, float]:
    """Median milliseconds of every case (see the module docstring)."""
    return {name: statistics.median(values) for name, values in interleaved_samples(cases, repeats, warmup).items()}
