"""How a cost is measured: one call timed with every device synchronised around it, the minimum of a few repeats
(noise on a shared machine only ever adds time), and the target's verify forwards over n new tokens on a cache
of `CONTEXT` random tokens (speed does not depend on the text).

Legend: N calibration context, n tokens per forward.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from hf_dynaspec.generation.tree_verify import cache_kwargs
from hf_dynaspec.kernels.streams import devices_of, synchronize

CONTEXT = 256  # cache length the costs are measured at: a typical prompt
MEASURED_SIZES = (1, 2, 3, 5, 9, 17)  # tokens per verify forward; others are interpolated
REPEATS = 3  # the minimum of repeats is kept


def time_once(thunk, devices: tuple[torch.device, ...]) -> float:
    """Seconds of one call (every CUDA device of `devices` synchronised around it)."""
    synchronize(devices)
    start = time.perf_counter()
    thunk()
    synchronize(devices)
    return time.perf_counter() - start


def min_seconds(thunk, devices: tuple[torch.device, ...]) -> float:
    """Minimum over REPEATS of one call's seconds."""
    return min(time_once(thunk, devices) for _ in range(REPEATS))


def random_ids(target, vocab_size: int, device, largest: int = max(MEASURED_SIZES)) -> torch.Tensor:
    """`[1, N + max(largest, MEASURED_SIZES) + 2]` ids below both vocabularies (room for a verify forward over
    `largest` tokens), from their own generator (the caller's sampling RNG is untouched)."""
    generator = torch.Generator().manual_seed(0)
    vocab = min(target.config.vocab_size, vocab_size)
    length = CONTEXT + max(largest, *MEASURED_SIZES) + 2
    return torch.randint(0, vocab, (1, length), generator=generator).to(device)


def verify_seconds(target, ids, cache, sizes, device) -> dict[int, float]:
    """{n: seconds of a forward over n new tokens} on `cache` (holding CONTEXT tokens, restored after each).

    The repeats go round the sizes (1, 2, .., 1, 2, ..) rather than size by size: a burst of load on a shared
    machine then slows one repeat of every size instead of every repeat of one size, which would make that
    size look expensive and could turn the planner off drafting."""
    def verify(size):
        target(input_ids=ids[:, CONTEXT : CONTEXT + size], **cache_kwargs(target, cache), use_cache=True,
               position_ids=torch.arange(CONTEXT, CONTEXT + size, device=device)[None])
        cache.crop(-size)  # negative: remove the last `size` entries (every transformers release)

    devices = devices_of(target)
    for size in sizes:
        verify(size)  # warm-up: first calls at a new size pay for allocation
    measured = dict.fromkeys(sizes, float("inf"))
    for _ in range(REPEATS):
        for size in sizes:
            measured[size] = min(measured[size], time_once(lambda size=size: verify(size), devices))
    return measured


def interpolate(measured: dict[int, float], largest: int) -> list[float]:
    """{n: seconds} at some n -> seconds for n = 1..largest, linear between measured sizes (the last one's past
    them)."""
    sizes = sorted(measured)
    return np.interp(range(1, largest + 1), sizes, [measured[n] for n in sizes]).tolist()
