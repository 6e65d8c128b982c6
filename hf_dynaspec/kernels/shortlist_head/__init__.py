"""The shortlisted LM head: scores of the rows of a permuted head `[V, D]` that a shortlist selects.

`shortlist_head` (dispatch.py) picks the backend; every backend returns a `HeadScores`.
"""

from hf_dynaspec.kernels.shortlist_head.dispatch import shortlist_head, triton_available

__all__ = ["shortlist_head", "triton_available"]
