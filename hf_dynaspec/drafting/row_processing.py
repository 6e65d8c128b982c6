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

Legend: S rows scored (padding columns, id -1, are scored -inf), V vocabulary, N context length.
"""

from __future__ import annotations

import torch
from transformers.generation.logits_process import (
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

# The processors whose result on a row set equals their result on the widened logits, restricted to the rows.
ROW_PROCESSORS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper,
                  RepetitionPenaltyLogitsProcessor)


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
