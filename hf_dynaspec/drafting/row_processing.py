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

The target's own top-p runs over the whole vocabulary in every verified position; after a top-k only k entries are
finite, and `SparseTopP` gives transformers' result from those alone (sorting k values instead of 150k-260k):
see its docstring for why the result is the same, bit for bit.

Legend: S rows scored (padding columns, id -1, are scored -inf), V vocabulary, N context length.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec.sampling import SPARSE_SHARE  # (the sampler's threshold: past it, the whole-row path is as cheap)


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
        rows = []
        for i, row in enumerate(scores):
            processed = self._sparse_row(row)
            rows.append(processed if processed is not None else super().__call__(input_ids, scores[i : i + 1])[0])
        return torch.stack(rows)

    @staticmethod
    def cumulative(values: torch.Tensor, vocab: int) -> torch.Tensor:
        """transformers' softmax(sorted row).cumsum() at the places of the n finite `values` (ascending) `[n]`."""
        as_sorted = values.new_full((1, vocab), float("-inf"))
        as_sorted[0, vocab - values.shape[0]:] = values
        return as_sorted.softmax(dim=-1).cumsum(dim=-1)[0, vocab - values.shape[0]:]

    def _sparse_row(self, row: torch.Tensor) -> torch.Tensor | None:
        """The processed row `[V]`, or None where transformers' own call must decide (see the class docstring)."""
        vocab = row.shape[0]
        kept = (row > float("-inf")).nonzero().squeeze(1)  # NaN compares false: caught below
        n = kept.shape[0]
        # One pass for NaN and +inf: with a -inf present (n < vocab), the row's sum is -inf unless a NaN or a +inf
        # makes it NaN (or a finite overflow makes it +inf: a fallback, never a wrong row).
        if not 0 < n * SPARSE_SHARE <= vocab or not bool(row.sum() == float("-inf")):
            return None
        values, order = torch.sort(row[kept])
        removed = self.cumulative(values, vocab) <= (1 - self.top_p)
        removed[max(n - self.min_tokens_to_keep, 0):] = False
        cut = int(removed.sum())  # a prefix: cumulative never decreases
        if 0 < cut < n and values[cut - 1] == values[cut]:
            return None  # the cut splits equal logits: torch.sort's own order decides which are removed
        out = row.clone()
        out[kept[order[:cut]]] = self.filter_value
        return out


# The processors whose result on a row set equals their result on the widened logits, restricted to the rows.
ROW_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, SparseTopP, MinPLogitsWarper,
                  RepetitionPenaltyLogitsProcessor)


def with_sparse_top_p(processors):
    """`processors` (a LogitsProcessorList or None) with transformers' top-p as `SparseTopP` (the same results)."""
    if processors is None or not any(type(p) is TopPLogitsWarper for p in processors):
        return processors
    return LogitsProcessorList(SparseTopP.like(p) if type(p) is TopPLogitsWarper else p for p in processors)


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
