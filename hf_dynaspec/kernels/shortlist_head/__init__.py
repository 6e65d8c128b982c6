"""The shortlisted LM head: scores of the head rows a shortlist selects.

`shortlist_head` (blocks of a permuted head: the CPU form, one backend, torch_paths.py) and `ranked_head_for` (the
row budget's step from the router's ranking, accelerators), which picks its backend (dispatch.py); every backend
returns a `ShortlistHeadOutput`.
"""

from hf_dynaspec.kernels.shortlist_head.dispatch import ranked_head_for, triton_available
from hf_dynaspec.kernels.shortlist_head.torch_paths import ShortlistHeadOutput, shortlist_head

__all__ = [
    "ShortlistHeadOutput", "ranked_head_for", "shortlist_head", "triton_available",
]
