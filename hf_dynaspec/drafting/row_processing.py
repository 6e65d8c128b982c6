"""transformers' warpers and penalties on the rows a shortlisted head scored, not on the whole vocabulary.

A sampled (or penalised) draft position used to widen the shortlist's logits `[1, S]` to `[1, V]` (-inf outside)
before the processors ran: a sort over 150k-260k entries per position for top-k / top-p, to choose among the
~10-20k rows the head scored. On a row set the processors transformers builds for sampling give the same values
as on the widened logits, because every entry outside the rows is -inf and stays -inf:

- temperature, top-k, top-p, min-p only compare and rescale the finite entries (a top-k larger than the rows keeps
  them all, as it keeps the -inf entries of the widened logits);
- the repetition penalty rescales the logits of the context's ids: the context is mapped into the rows (an id
  outside them to a spare -inf column that the penalty leaves -inf), and transformers' own processor runs on it.

The draft token is drawn from those rows, and the verifier receives q as drawn: the same distribution, widened
once (`widen`), with q = 0 outside the rows, which the residual still reaches. A processor not listed here keeps
the whole-vocabulary path (`on_rows` says which). Exactness: tests/test_enumeration.py, for each processor kind.

The target's own top-k and top-p run over the whole vocabulary in every verified position; after a top-k only k
entries are finite, and `SparseTopP` gives transformers' top-p from those alone (sorting k values instead of
150k-260k), and `SparseTopKTopP` the pair's result from one top-k search: see their docstrings for why the results
are the same, bit for bit.

Legend: S rows scored (padding columns, id -1, are scored -inf), V vocabulary, N context length.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec.sampling import SPARSE_SHARE  # (the sampler's threshold: past it, the whole-row path is as cheap)


def _row_by_row(scores: torch.Tensor, fast_row, whole) -> torch.Tensor:
    """Each row of `scores` `[B, V]` by `fast_row` (`[V]` -> the processed row, or None where it cannot prove its
    result), else by `whole` on that row alone (`[1, V]` -> `[1, V]`, transformers' own call)."""
    rows = []
    for i, row in enumerate(scores):
        processed = fast_row(row)
        rows.append(processed if processed is not None else whole(scores[i : i + 1])[0])
    return torch.stack(rows)


class SparseTopP(TopPLogitsWarper):
    """transformers' `TopPLogitsWarper`, computed from the finite entries of each row where they are few (after a
    top-k) on the CPU, with a result equal bit for bit to transformers'; anywhere else transformers' own call.

    transformers sorts the whole row ascending, takes softmax(sorted).cumsum() and removes the prefix whose
    cumulative probability is <= 1 - top_p (keeping the last `min_tokens_to_keep`). With n finite entries the sorted
    row is V - n entries of -inf, then the n finite values ascending: those values are written into a row of -inf
    at the same places, so softmax and cumsum see the same tensor and give the same floats. Which tokens fill the
    removed prefix is then decided by value, except where the cut falls between equal values: torch.sort is not
    stable, so which of the equal tokens it puts first is its own; there (and for NaN, +inf or a filter value other
    than -inf, which would also rewrite the -inf entries) the row goes to transformers' call. Tested against
    transformers' on random, tied and cut-through-a-tie rows (tests/test_row_processing.py)."""

    @classmethod
    def like(cls, processor: TopPLogitsWarper) -> SparseTopP:
        sparse = cls.__new__(cls)
        sparse.__dict__.update(vars(processor))
        return sparse

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if scores.device.type != "cpu" or scores.dim() != 2 or self.filter_value != float("-inf"):
            return super().__call__(input_ids, scores)
        return _row_by_row(scores, self._sparse_row, lambda one: TopPLogitsWarper.__call__(self, input_ids, one))

    @staticmethod
    def cumulative(values: torch.Tensor, vocab: int) -> torch.Tensor:
        """transformers' softmax(sorted row).cumsum() at the places of the n finite `values` (ascending) `[n]`.
        The softmax sees the whole row: its sum's grouping depends on where the values sit. The cumsum only the
        last n places: the CPU's adds in order, and the V - n zeros before them add nothing."""
        as_sorted = values.new_full((1, vocab), float("-inf"))
        as_sorted[0, vocab - values.shape[0]:] = values
        return as_sorted.softmax(dim=-1)[0, vocab - values.shape[0]:].cumsum(dim=0)

    def _sparse_row(self, row: torch.Tensor) -> torch.Tensor | None:
        """The processed row `[V]`, or None where transformers' own call must decide (see the class docstring)."""
        kept = (row > float("-inf")).nonzero().squeeze(1)  # NaN compares false: caught below
        # One pass for NaN and +inf: the row's sum is -inf only if a -inf is in it and no NaN or +inf (a finite
        # overflow makes it +inf: a fallback, never a wrong row).
        if not bool(row.sum() == float("-inf")):
            return None
        return self.cut(row, kept)

    def cut(self, row: torch.Tensor, kept: torch.Tensor) -> torch.Tensor | None:
        """transformers' top-p of `row` `[V]` whose finite entries are exactly `kept` (their indices), all finite:
        a row of -inf but for the entries top-p keeps, or None where transformers' own call must decide."""
        vocab, n = row.shape[0], kept.shape[0]
        if not 0 < n * SPARSE_SHARE <= vocab:
            return None
        values, order = torch.sort(row[kept])
        removed = self.cumulative(values, vocab) <= (1 - self.top_p)
        removed[max(n - self.min_tokens_to_keep, 0):] = False
        cut = int(removed.sum())  # a prefix: cumulative never decreases
        if 0 < cut < n and values[cut - 1] == values[cut]:
            return None  # the cut splits equal logits: torch.sort's own order decides which are removed
        out = row.new_full((vocab,), self.filter_value)
        out[kept[order[cut:]]] = values[cut:]
        return out


class SparseTopKTopP(LogitsProcessor):
    """transformers' `TopKLogitsWarper` followed by its `TopPLogitsWarper` (adjacent in a call's list, as
    transformers builds them for a published sampling config) in one pass over the row on the CPU, with a result
    equal bit for bit to the pair's; anywhere else the pair's own calls.

    The top-k keeps every entry >= its k-th largest value (ties included) and sets the rest to -inf; `SparseTopP`
    then needs only those entries. Found here with one `topk` of k + 1 entries (where the (k+1)-th is smaller than
    the k-th, the k are all; else one comparison over the row), instead of the top-k's masked copy of the row
    followed by the top-p's search for the finite entries. A NaN or +inf (which `topk` ranks first)
    or a k-th value of -inf (fewer than k finite entries) leaves the row to the pair. Tested against transformers'
    pair on random, tied and cut-through-a-tie rows (tests/test_row_processing.py)."""

    def __init__(self, top_k: TopKLogitsWarper, top_p: TopPLogitsWarper):
        self.top_k, self.top_p = top_k, SparseTopP.like(top_p)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        pair = (self.top_k.filter_value, self.top_p.filter_value)
        def both(some: torch.Tensor) -> torch.Tensor:  # transformers' pair, as the call's list would run it
            return self.top_p(input_ids, self.top_k(input_ids, some))

        if scores.device.type != "cpu" or scores.dim() != 2 or pair != (float("-inf"),) * 2:
            return both(scores)
        return _row_by_row(scores, self._fused_row, both)

    def _fused_row(self, row: torch.Tensor) -> torch.Tensor | None:
        k = min(self.top_k.top_k, row.shape[0])
        top = torch.topk(row, min(k + 1, row.shape[0]))  # one more: is the k-th value tied past the k-th place?
        if not bool(torch.isfinite(top.values[0]) & torch.isfinite(top.values[k - 1])):
            return None
        if top.values.shape[0] > k and bool(top.values[k] < top.values[k - 1]):
            kept = top.indices[:k]  # exactly k entries are >= the k-th value
        else:
            kept = (row >= top.values[k - 1]).nonzero().squeeze(1)
        cut = self.top_p.cut(row, kept)
        if cut is not None:
            return cut
        # A cut not proven (it splits equal logits: 121 of 445 sampled Gemma-3-270M rows, round_93/sampled_round_profile_gemma.txt):
        # transformers' top-p on the top-k's result, `kept` in a row of -inf (no second top-k over the row).
        top_k_result = row.new_full(row.shape, self.top_k.filter_value).index_copy_(0, kept, row[kept])
        return TopPLogitsWarper.__call__(self.top_p, None, top_k_result[None])[0]


# The processors whose result on a row set equals their result on the widened logits, restricted to the rows.
ROW_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, SparseTopP, SparseTopKTopP,
                  MinPLogitsWarper, RepetitionPenaltyLogitsProcessor)


def with_sparse_warpers(processors):
    """`processors` (a LogitsProcessorList or None) with transformers' top-k and top-p, where adjacent, as
    `SparseTopKTopP`, and any other top-p as `SparseTopP`: the same results, computed from the few kept logits."""
    if processors is None or not any(type(p) is TopPLogitsWarper for p in processors):
        return processors
    swapped, pending = LogitsProcessorList(), list(processors)
    while pending:
        processor = pending.pop(0)
        if type(processor) is TopKLogitsWarper and pending and type(pending[0]) is TopPLogitsWarper:
            swapped.append(SparseTopKTopP(processor, pending.pop(0)))
        else:
            swapped.append(SparseTopP.like(processor) if type(processor) is TopPLogitsWarper else processor)
    return swapped


def on_rows(processors) -> bool:
    """Can every processor of `processors` (a LogitsProcessorList, or None) run on a shortlist's rows?"""
    return processors is None or all(type(processor) in ROW_PROCESSORS for processor in processors)


def process_rows(processors, context: torch.Tensor, logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """`processors` applied to a shortlist's `logits` `[1, S]` (`ids` `[S]` their target ids) after `context`
    `[1, N]` -> `[1, S]`, equal to applying them to the widened `[1, V]` logits and reading the rows back."""
    if processors is None or not len(processors):
        return logits
    spare = logits.new_full((logits.shape[0], 1), float("-inf"))
    extended = torch.cat([logits, spare], dim=1)  # column S: every context id outside the rows
    mapped = _rows_of(context, ids) if any(isinstance(p, RepetitionPenaltyLogitsProcessor) for p in processors) \
        else context
    for processor in processors:
        extended = processor(mapped, extended)
    return extended[:, :-1]


def widen(logits: torch.Tensor, ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Row logits `[1, S]` -> `[1, V]`, -inf outside the rows (padding columns land in a spare column, cut off)."""
    full = logits.new_full((logits.shape[0], vocab_size + 1), float("-inf"))
    full[:, torch.where(ids >= 0, ids, vocab_size)] = logits
    return full[:, :vocab_size]


def _rows_of(context: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each context id's column among `ids` `[S]`, or S (the spare column) for an id outside them: `[1, N]`."""
    sorted_ids, order = ids.sort()
    at = torch.searchsorted(sorted_ids, context).clamp(max=ids.shape[0] - 1)
    found = sorted_ids[at] == context
    return torch.where(found, order[at], torch.full_like(context, ids.shape[0]))
