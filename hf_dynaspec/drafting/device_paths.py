"""Which form drafting takes on a device.

Off the CPU, drafting takes its accelerator form: the device-side cluster shortlist (drafting/selector.py)
and host decisions deferred to the end of a round (drafting/chain.py), so that a draft step never waits on the
device. On the CPU, where reading a value costs nothing, it takes the host-friendly form (contiguous blocks of
a permuted head, an early confidence stop). `accelerator_paths_on_cpu()` runs the accelerator form on the CPU:
how the CPU suite checks its exactness and counts its host syncs (tests/test_sync_budget.py).
"""

from __future__ import annotations

import contextlib

import torch

_forced = False


def use_accelerator_paths(device: torch.device) -> bool:
    return _forced or torch.device(device).type != "cpu"


@contextlib.contextmanager
def accelerator_paths_on_cpu():
    global _forced
    previous, _forced = _forced, True
    try:
        yield
    finally:
        _forced = previous
