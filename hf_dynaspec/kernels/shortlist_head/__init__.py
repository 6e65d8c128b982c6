"""The shortlisted LM head: scores of the head rows a shortlist selects.

`shortlist_head` (blocks of a permuted head, CPU), `indexed_head` (row ids into the head, accelerators) and
`ranked_head_for` (the row budget's step from the router's ranking) pick the backend (dispatch.py); every
backend returns a `ShortlistHeadOutput`.
"""

from hf_dynaspec.kernels.shortlist_head.dispatch import (
    indexed_head,
    indexed_head_for,
    ranked_head_for,
    shortlist_head,
    triton_available,
)
from hf_dynaspec.kernels.shortlist_head.torch_paths import ShortlistHeadOutput

__all__ = [
    "ShortlistHeadOutput", "indexed_head", "indexed_head_for", "ranked_head_for", "shortlist_head", "triton_available",
]
