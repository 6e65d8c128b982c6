"""`ShortlistHeadOutput`: what every backend of the shortlisted head returns.

The Triton kernel fuses the row-wise argmax, its token id, max, log-sum-exp and top probability into the
matmul's epilogue and hands them over; the CPU and reference paths compute them from the scores only when asked
(they cost a pass over `[B, S]` that greedy drafting, which reads the scores anyway, does not need).

Legend: B batch, S shortlist rows.
"""

from __future__ import annotations

import torch


class ShortlistHeadOutput:
    """scores `[B, S]` float32, token_ids `[S]` (target id of each column; -1 marks a padding column, scored
    -inf; None when the columns are the whole vocabulary in order), and the reductions over S: `argmax` `[B]`
    (first column on ties), `max` `[B]`, `logsumexp` `[B]` float32, and from them `argmax_token_ids` `[B]` and
    `top_probability` `[B]` (the largest probability of the softmax over the columns scored)."""

    def __init__(self, scores: torch.Tensor, token_ids: torch.Tensor | None, argmax: torch.Tensor | None = None,
                 max: torch.Tensor | None = None, logsumexp: torch.Tensor | None = None,
                 argmax_token_ids: torch.Tensor | None = None, top_probability: torch.Tensor | None = None):
        self.scores = scores
        self.token_ids = token_ids
        self._argmax, self._max, self._logsumexp = argmax, max, logsumexp
        self._argmax_token_ids, self._top_probability = argmax_token_ids, top_probability

    @property
    def argmax(self) -> torch.Tensor:
        if self._argmax is None:
            self._argmax = self.scores.argmax(-1)
        return self._argmax

    @property
    def max(self) -> torch.Tensor:
        if self._max is None:
            self._max = self.scores.gather(-1, self.argmax[:, None])[:, 0]
        return self._max

    @property
    def logsumexp(self) -> torch.Tensor:
        if self._logsumexp is None:
            self._logsumexp = torch.logsumexp(self.scores, dim=-1)
        return self._logsumexp

    @property
    def argmax_token_ids(self) -> torch.Tensor:
        """`[B]` target ids of the best-scored rows."""
        if self._argmax_token_ids is None:
            self._argmax_token_ids = self.argmax if self.token_ids is None else self.token_ids[self.argmax]
        return self._argmax_token_ids

    @property
    def top_probability(self) -> torch.Tensor:
        """`[B]` float32: exp(max - log-sum-exp), the best column's probability over the columns scored."""
        if self._top_probability is None:
            self._top_probability = (self.max - self.logsumexp).exp()
        return self._top_probability

    def __iter__(self):
        """`scores, token_ids = output`: the two tensors every caller reads."""
        return iter((self.scores, self.token_ids))
