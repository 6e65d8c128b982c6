"""transformers' processors on a shortlist's rows give, on those rows, what they give on the widened vocabulary
(-inf outside the rows), for every processor the rows path takes; other processors are left to the full path."""

from __future__ import annotations

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec.drafting.row_processing import on_rows, process_rows, widen

VOCAB = 50
KINDS = {
    "temperature": [TemperatureLogitsWarper(0.7)],
    "top-k inside the rows": [TopKLogitsWarper(3)],
    "top-k past the rows": [TopKLogitsWarper(40)],
    "top-p": [TemperatureLogitsWarper(1.3), TopPLogitsWarper(0.7)],
    "min-p": [MinPLogitsWarper(0.2)],
    "repetition": [RepetitionPenaltyLogitsProcessor(1.7)],
    "repetition past the prompt": [RepetitionPenaltyLogitsProcessor(1.7, prompt_ignore_length=4)],
    "repetition, per-row prompt": [RepetitionPenaltyLogitsProcessor(1.7, prompt_ignore_length=torch.tensor([3]))],
    "a published config": [RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7), TopKLogitsWarper(20),
                           TopPLogitsWarper(0.8)],
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_processing_the_rows_equals_processing_the_widened_vocabulary(kind):
    generator = torch.Generator().manual_seed(len(kind))
    ids = torch.cat([torch.randperm(VOCAB, generator=generator)[:12], torch.full((4,), -1)])  # 4 padding columns
    logits = torch.randn(1, ids.shape[0], generator=generator) * 3
    logits[:, ids < 0] = float("-inf")  # how the head scores padding columns
    # The context repeats ids inside the rows and outside them, and ids of both kinds before and after the prompt.
    context = torch.cat([ids[:3], torch.tensor([i for i in range(VOCAB) if i not in ids.tolist()][:3]), ids[5:7]])[None]
    processors = LogitsProcessorList(KINDS[kind])
    assert on_rows(processors)
    rows = process_rows(processors, context, logits.clone(), ids)
    full = processors(context, widen(logits, ids, VOCAB))
    real = ids >= 0
    assert torch.equal(rows[:, real], full[:, ids[real]]), kind
    assert torch.isinf(rows[:, ~real]).all() and (rows[:, ~real] < 0).all()
    outside = torch.ones(VOCAB, dtype=torch.bool)
    outside[ids[real]] = False
    assert (full[:, outside] == float("-inf")).all()  # nothing outside the rows becomes drawable


def test_an_unknown_processor_keeps_the_whole_vocabulary_path():
    assert not on_rows(LogitsProcessorList([TemperatureLogitsWarper(0.7), NoRepeatNGramLogitsProcessor(2)]))
    assert on_rows(None) and on_rows(LogitsProcessorList())
