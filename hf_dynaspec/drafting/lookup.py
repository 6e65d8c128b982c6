"""Prompt lookup: draft by copying what followed an earlier occurrence of the context's last n tokens.

Prompt lookup (Saxena 2023; transformers' `prompt_lookup_num_tokens`) is nearly free and strong exactly where a
learned drafter is weak: summaries, retrieval answers and code edits that repeat spans of the prompt or of the
answer so far. `hf_dynaspec` uses it as a first choice before the drafter (see `EagleCandidateGenerator`):
when the context's last n-gram occurred before, the tokens that followed it are the draft; otherwise the
drafter drafts. Verification is unchanged, so output stays exact.

Written here rather than reusing transformers' `PromptLookupCandidateGenerator` because that class is a whole
candidate generator (its own stopping and length rules) and always falls back to 1-gram matches, which on a
150k vocabulary are mostly common tokens whose continuations lose to the drafter.
"""

from __future__ import annotations

import torch


def lookup_continuation(token_ids: torch.Tensor, max_tokens: int, min_ngram: int = 2, max_ngram: int = 3) -> torch.Tensor:
    """Token ids `[N]` -> the up to `max_tokens` ids `[n]` that followed the most recent earlier occurrence of
    the last m ids, for the largest m in [min_ngram, max_ngram] that has one; `[0]` when none does.

    The most recent occurrence is taken because text that repeats tends to repeat its nearest copy (the line
    of code being edited, the sentence being summarised).
    """
    return lookup_match(token_ids, max_tokens, min_ngram, max_ngram)[0]


def lookup_match(token_ids: torch.Tensor, max_tokens: int, min_ngram: int = 2, max_ngram: int = 3) -> tuple[torch.Tensor, int]:
    """`lookup_continuation` and the size m of the n-gram it matched (0 when none: the planner's acceptance
    estimates are kept per match size)."""
    num_tokens = token_ids.shape[0]
    for size in range(min(max_ngram, num_tokens - 1), min_ngram - 1, -1):
        suffix = token_ids[num_tokens - size :]
        # Window i covers i .. i+size-1 and has a continuation starting at i+size <= N-1; the suffix itself
        # (i = N-size) is excluded by stopping the windows one token short of the end.
        windows = token_ids[: num_tokens - 1].unfold(0, size, 1)
        starts = (windows == suffix).all(dim=1).nonzero()
        if len(starts):
            begin = int(starts[-1]) + size
            return token_ids[begin : begin + max_tokens], size
    return token_ids[:0], 0


def one_hot_logits(token_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Draft ids `[1, n]` -> logits `[1, n, V]` (0 at the id, -inf elsewhere) whose softmax is exactly the
    deterministic distribution a lookup draft is drawn from. The accept/reject step then accepts token x with
    probability p(x) and resamples from p without x, which keeps sampling exact."""
    logits = torch.full((1, token_ids.shape[1], vocab_size), float("-inf"), device=token_ids.device)
    logits.scatter_(2, token_ids[..., None], 0.0)
    return logits
