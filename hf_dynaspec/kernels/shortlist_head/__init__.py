"""The shortlisted LM head: scores of the rows of a permuted head `[V, D]` that a shortlist selects.

`shortlist_head` (dispatch.py) picks the backend; every backend returns a `ShortlistHeadOutput`.
"""

from hf_dynaspec.kernels.shortlist_head.dispatch import shortlist_head, triton_available
from hf_dynaspec.kernels.shortlist_head.output import ShortlistHeadOutput

__all__ = ["ShortlistHeadOutput", "shortlist_head", "triton_available"]
