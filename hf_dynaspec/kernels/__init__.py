"""Kernels for the shortlisted LM head (Triton on GPU, a CPU fast path).

Triton is optional: this is the one place that decides whether it can be used, so that the package imports
and the CPU suite passes without it. The kernels themselves land with the kernels issue; the pure-torch
block-range head in `hf_dynaspec/shortlist/selector.py` (`ClusterHead`) is what runs until then.
"""

from __future__ import annotations

import importlib.util
import os


def triton_available() -> bool:
    """True when Triton is installed and can run here (a CUDA device, or the interpreter on CPU)."""
    if importlib.util.find_spec("triton") is None:
        return False
    if os.environ.get("TRITON_INTERPRET") == "1":
        return True
    import torch

    return torch.cuda.is_available()
