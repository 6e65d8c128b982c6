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

from hf_dynaspec.drafting.row_processing import (
    SparseTopKTopP,
    SparseTopP,
    on_rows,
    process_rows,
    widen,
    with_sparse_warpers,
)

VOCAB = 50
KINDS = {
    "temperature": [TemperatureLogitsWarper(0.7)],
    "top-k inside the rows": [TopKLogitsWarper(3)],
    "top-k past the rows": [TopKLogitsWarper(40)],
    "top-p": [TemperatureLogitsWarper(1.3), TopPLogitsWarper(0.7)],
    "min-p": [MinPLogitsWarper(0.2)],
    "repetition": [RepetitionPenaltyLogitsProcessor(1.7)],
    "a published config": [RepetitionPenaltyLogitsProcessor(1.1), TemperatureLogitsWarper(0.7), TopKLogitsWarper(20),
                           TopPLogitsWarper(0.8)],
}
KINDS["a published config, as the package runs it"] = with_sparse_warpers(KINDS["a published config"])
KINDS["repetition past the prompt"] = [RepetitionPenaltyLogitsProcessor(1.7, prompt_ignore_length=4)]
try:  # per-row prompt lengths; releases before them refuse a tensor (5.8.0 does), and have no such case
    KINDS["repetition, per-row prompt"] = [RepetitionPenaltyLogitsProcessor(1.7, prompt_ignore_length=torch.tensor([3]))]
except ValueError:
    pass


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


# The warpers of a published config as the package runs them (the penalty, which reads the context, is left out: the
# spare column's count is a warper's matter; the penalty's mapping of the context is checked above).
KINDS["published warpers, fused"] = with_sparse_warpers(LogitsProcessorList(
    [TemperatureLogitsWarper(0.7), TopKLogitsWarper(20), TopPLogitsWarper(0.8)]))


@pytest.mark.parametrize("kind", ["top-k inside the rows", "top-p", "min-p", "published warpers, fused"])
def test_the_spare_column_stays_out_of_every_warper(kind):
    """The spare column (every context id outside the rows) must be -inf for the warpers: were it finite, top-k /
    top-p / min-p would count it. Rows scored below 0 make a finite 0 there the largest entry: the case where it
    changes the rows' processed distribution, asserted to happen, and the rows must still equal the widened
    vocabulary's."""
    generator = torch.Generator().manual_seed(7)
    ids = torch.randperm(VOCAB, generator=generator)[:12]
    logits = torch.randn(1, 12, generator=generator) - 6.0  # every row below 0
    context = ids[:3][None]
    processors = LogitsProcessorList(KINDS[kind])
    rows = process_rows(processors, context, logits.clone(), ids)
    full = processors(context, widen(logits, ids, VOCAB))
    assert torch.equal(rows, full[:, ids]), kind
    counted = processors(context, torch.cat([logits, torch.zeros(1, 1)], dim=1))[:, :-1]  # a finite spare column
    assert not torch.equal(counted.softmax(-1), full[:, ids].softmax(-1)), "the case: a finite spare column counts"


def test_an_unknown_processor_keeps_the_whole_vocabulary_path():
    assert not on_rows(LogitsProcessorList([TemperatureLogitsWarper(0.7), NoRepeatNGramLogitsProcessor(2)]))
    assert on_rows(None) and on_rows(LogitsProcessorList())


# -- SparseTopP: transformers' top-p from the entries a top-k left ----------------------------------------------------
ROW = 4096  # with top-k <= 64, under 1 / SPARSE_SHARE of the row is finite: the sparse path runs


def _after_top_k(rows: int, top_k: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    """Logits as a sampled verification position has them: bf16 values (many equal), tempered, top-k'd."""
    logits = (torch.randn(rows, ROW, generator=torch.Generator().manual_seed(seed)) * scale).bfloat16().float()
    ids = torch.zeros(rows, 1, dtype=torch.long)
    return TopKLogitsWarper(top_k)(ids, TemperatureLogitsWarper(0.7)(ids, logits))


def _recorded_calls(monkeypatch, cls=None, method: str = "_sparse_row") -> list:
    """Each row the sparse (or fused: `cls`, `method`) path processed: its result (None where it left the row to
    transformers)."""
    cls = cls or SparseTopP
    results = []
    processed_row = getattr(cls, method)

    def recorded(self, row):
        results.append(processed_row(self, row))
        return results[-1]

    monkeypatch.setattr(cls, method, recorded)
    return results


def _sparse_calls(monkeypatch) -> list:
    return _recorded_calls(monkeypatch)


@pytest.mark.parametrize("top_p, min_tokens_to_keep", [(0.8, 1), (0.95, 1), (0.5, 1), (0.3, 6)])
def test_sparse_top_p_equals_transformers_top_p_bit_for_bit(top_p, min_tokens_to_keep, monkeypatch):
    """Random rows with many equal logits (bf16 values), three top-k sizes, batches of rows: the result equals
    transformers' own, and the sparse path (not the fallback) produced most of them."""
    calls = _sparse_calls(monkeypatch)
    original = TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)
    sparse = SparseTopP.like(original)
    for seed, top_k in enumerate((5, 20, 64) * 20):
        scores = _after_top_k(3, top_k, seed)
        expected = original(torch.zeros(3, 1, dtype=torch.long), scores.clone())
        assert torch.equal(sparse(torch.zeros(3, 1, dtype=torch.long), scores.clone()), expected), (seed, top_k)
    assert len(calls) == 180 and sum(result is not None for result in calls) > 0.5 * len(calls)


def test_the_cumulative_probabilities_are_transformers_own_floats():
    """At a real vocabulary size (152k), the cumulative probabilities the sparse path compares with 1 - top_p are
    the floats transformers computes over its sorted row, bit for bit (the masks compared above could miss a
    difference in the last bits)."""
    vocab = 151_936
    for seed in range(5):
        logits = (torch.randn(1, vocab, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
        scores = TopKLogitsWarper(20)(torch.zeros(1, 1, dtype=torch.long), logits)[0]
        values = scores[scores > float("-inf")].sort().values
        reference = torch.sort(scores[None]).values.softmax(-1).cumsum(-1)[0, vocab - values.shape[0]:]
        assert torch.equal(SparseTopP.cumulative(values, vocab), reference)


def test_a_cut_through_equal_logits_is_left_to_transformers(monkeypatch):
    """Five equal logits where top-p's cut falls between them: which are removed is torch.sort's own (unstable)
    order, so the sparse path must hand the row to transformers' call, whose result is then returned."""
    calls = _sparse_calls(monkeypatch)
    scores = torch.full((1, ROW), float("-inf"))
    scores[0, [3, 900, 1700, 2500, 4000]] = 1.0  # five equal tokens, 0.2 each
    scores[0, 50] = 2.0
    original = TopPLogitsWarper(0.5)
    expected = original(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    kept = int((expected > float("-inf")).sum())
    assert 1 < kept < 6, "the cut must fall among the equal tokens for this test to test anything"
    assert torch.equal(SparseTopP.like(original)(torch.zeros(1, 1, dtype=torch.long), scores.clone()), expected)
    assert calls == [None]


@pytest.mark.parametrize("case", ["nan", "+inf", "dense", "filter value"])
def test_rows_the_sparse_path_cannot_prove_go_to_transformers(case, monkeypatch):
    calls = _sparse_calls(monkeypatch)
    scores = _after_top_k(1, 20, seed=3)
    original = TopPLogitsWarper(0.8, filter_value=-1e4 if case == "filter value" else float("-inf"))
    if case == "nan":
        scores[0, 0] = float("nan")
    elif case == "+inf":
        scores[0, scores[0].argmax()] = float("inf")
    elif case == "dense":
        scores = torch.randn(1, ROW)
    expected = original(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    got = SparseTopP.like(original)(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
    assert calls == ([] if case == "filter value" else [None])


def test_every_top_p_of_a_call_becomes_sparse_and_nothing_else_changes():
    """An adjacent top-k and top-p become one `SparseTopKTopP`, any other top-p a `SparseTopP`; other processors
    stay the very objects given, in their order."""
    processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.1), TopKLogitsWarper(20),
                                      TopPLogitsWarper(0.8, min_tokens_to_keep=2), TemperatureLogitsWarper(0.7),
                                      TopKLogitsWarper(7), TemperatureLogitsWarper(0.9),
                                      TopPLogitsWarper(0.6)])
    swapped = with_sparse_warpers(processors)
    assert [type(p) for p in swapped] == [RepetitionPenaltyLogitsProcessor, SparseTopKTopP, TemperatureLogitsWarper,
                                          TopKLogitsWarper, TemperatureLogitsWarper, SparseTopP]
    assert all(swapped[i] is processors[j] for i, j in ((0, 0), (2, 3), (3, 4), (4, 5)))
    assert swapped[1].top_k is processors[1] and vars(swapped[1].top_p) == vars(processors[2])
    assert vars(swapped[5]) == vars(processors[6])
    assert with_sparse_warpers(swapped[:1]) is not None and on_rows(swapped)


# -- SparseTopKTopP: transformers' top-k then top-p, from one top-k search --------------------------------------------
def _fused_calls(monkeypatch) -> list:
    return _recorded_calls(monkeypatch, SparseTopKTopP, "_fused_row")


def _tempered(rows: int, seed: int, vocab: int = ROW) -> torch.Tensor:
    """Logits as a verification position has them before its top-k: bf16 values (many equal), tempered."""
    logits = (torch.randn(rows, vocab, generator=torch.Generator().manual_seed(seed)) * 3).bfloat16().float()
    return TemperatureLogitsWarper(0.7)(torch.zeros(rows, 1, dtype=torch.long), logits)


@pytest.mark.parametrize("top_p, min_tokens_to_keep", [(0.8, 1), (0.95, 1), (0.5, 1), (0.3, 6)])
def test_fused_top_k_top_p_equals_transformers_pair_bit_for_bit(top_p, min_tokens_to_keep, monkeypatch):
    """Random rows with many equal logits, the k-th value tied past the k-th place included (a k of 1 to 64 over
    bf16 values), in batches: the result equals transformers' top-k then top-p, and the fused path produced most of them."""
    calls = _fused_calls(monkeypatch)
    ties_past_kth = 0
    for seed, top_k in enumerate((1, 5, 20, 64) * 15):
        scores = _tempered(3, seed)
        pair = [TopKLogitsWarper(top_k, min_tokens_to_keep=min_tokens_to_keep),
                TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)]
        expected = LogitsProcessorList(pair)(torch.zeros(3, 1, dtype=torch.long), scores.clone())
        got = SparseTopKTopP(*pair)(torch.zeros(3, 1, dtype=torch.long), scores.clone())
        assert torch.equal(got, expected), (seed, top_k)
        kth = scores.topk(pair[0].top_k).values[:, -1:]
        ties_past_kth += int(((scores >= kth).sum(-1) > pair[0].top_k).sum())
    assert len(calls) == 180 and sum(result is not None for result in calls) > 0.5 * len(calls)
    assert ties_past_kth > 0, "no row had its k-th value tied past the k-th place: that case went untested"


def test_fused_top_k_top_p_at_a_real_vocabulary():
    vocab = 151_936
    pair = [TopKLogitsWarper(20), TopPLogitsWarper(0.8)]
    for seed in range(4):
        scores = _tempered(1, seed, vocab)
        expected = LogitsProcessorList(pair)(torch.zeros(1, 1, dtype=torch.long), scores.clone())
        assert torch.equal(SparseTopKTopP(*pair)(torch.zeros(1, 1, dtype=torch.long), scores.clone()), expected)


def _dense_top_p_calls(monkeypatch) -> list:
    """The rows transformers' own top-p was called on (`[B, V]` copies), in order."""
    rows, dense = [], TopPLogitsWarper.__call__

    def recorded(self, input_ids, scores):
        rows.append(scores.clone())
        return dense(self, input_ids, scores)

    monkeypatch.setattr(TopPLogitsWarper, "__call__", recorded)
    return rows


@pytest.mark.parametrize("case", ["cut through equal logits", "dense"])
def test_a_top_p_the_fused_path_cannot_prove_is_transformers_own_on_the_top_k(case, monkeypatch):
    """Where the top-p cut falls between equal logits (torch.sort's own order decides) or the top-k keeps too many
    for the sparse cut, the fused path finds the top-k itself and hands its result to transformers' top-p, once:
    the row it hands over is the top-k's, bit for bit, and the result the pair's."""
    calls, dense = _fused_calls(monkeypatch), _dense_top_p_calls(monkeypatch)
    if case == "dense":
        scores, top_k, top_p = _tempered(1, seed=5), TopKLogitsWarper(ROW // 4), TopPLogitsWarper(0.8)
    else:
        scores = torch.full((1, ROW), -5.0)
        scores[0, [3, 900, 1700, 2500, 4000]] = 1.0  # five equal tokens, 0.2 each of the kept mass
        scores[0, 50] = 2.0
        top_k, top_p = TopKLogitsWarper(6), TopPLogitsWarper(0.5)
    ids = torch.zeros(1, 1, dtype=torch.long)
    after_top_k = top_k(ids, scores.clone())
    expected = top_p(ids, after_top_k.clone())
    if case != "dense":
        assert 1 < int((expected > float("-inf")).sum()) < 6, "the cut must fall among the equal tokens"
    dense.clear()
    got = SparseTopKTopP(top_k, top_p)(ids, scores.clone())
    assert torch.equal(got, expected) and len(calls) == 1 and calls[0] is not None
    assert len(dense) == 1 and torch.equal(dense[0], after_top_k)


@pytest.mark.parametrize("case", ["nan", "+inf", "fewer finite than k", "filter value"])
def test_rows_the_fused_path_cannot_prove_go_to_transformers(case, monkeypatch):
    calls = _fused_calls(monkeypatch)
    scores = _tempered(1, seed=5)
    top_k = TopKLogitsWarper(20)
    top_p = TopPLogitsWarper(0.8, filter_value=-1e4 if case == "filter value" else float("-inf"))
    if case == "nan":
        scores[0, 7] = float("nan")
    elif case == "+inf":
        scores[0, scores[0].argmax()] = float("inf")
    elif case == "fewer finite than k":
        scores[0, 10:] = float("-inf")
    expected = LogitsProcessorList([top_k, top_p])(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    got = SparseTopKTopP(top_k, top_p)(torch.zeros(1, 1, dtype=torch.long), scores.clone())
    assert torch.equal(got.isnan(), expected.isnan()) and torch.equal(got.nan_to_num(), expected.nan_to_num())
    assert calls == ([] if case == "filter value" else [None])


def test_the_assistant_model_route_verifies_through_the_fused_warpers(monkeypatch):
    """A sampled `assistant_model=` call hands the target's top-k and top-p to the verifier as one
    `SparseTopKTopP` (the same tokens as transformers' pair, without its sort over the vocabulary): asserted on
    the processors the verification really called, since the output cannot tell."""
    from conftest import imitating_assistant, one_layer_target

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.5, seed=4, draft_plan="fixed", num_assistant_tokens=3)
    called = []
    fused_call = SparseTopKTopP.__call__
    pair_call = TopPLogitsWarper.__call__

    def fused(self, input_ids, scores):
        called.append(("fused", scores.shape[0]))
        return fused_call(self, input_ids, scores)

    def pair(self, input_ids, scores):
        called.append(("top-p", scores.shape[0]))
        return pair_call(self, input_ids, scores)
    monkeypatch.setattr(SparseTopKTopP, "__call__", fused)
    monkeypatch.setattr(TopPLogitsWarper, "__call__", pair)
    ids = torch.randint(0, target.config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    target.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, do_sample=True, top_k=20,
                    top_p=0.8, temperature=0.7, max_new_tokens=12)
    assert assistant.stats.drafted > 0  # the case: verification of drafted positions happened
    # Every verified position (each pass's drafts and the target's own token) went through the fused warpers.
    positions = sum(drafted + 1 for drafted in assistant.stats.drafted_per_pass)
    assert sum(kind == "fused" for kind, _ in called) >= positions, (positions, called)
