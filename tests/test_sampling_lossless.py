"""Sampling with the assistant must leave the target's distribution unchanged, through whole
`generate(assistant_model=...)` calls: several rounds, with the drafter's state carried between them.

- Every option, exactly. Each call's random choices are enumerated (tests/enumeration.py: the drafts, the
  verifier's accept tests, the residual and bonus draws), at top-k 3 on an 8-token vocabulary, so that a call of
  4 new tokens has at most a few thousand paths. The distribution of the 4 tokens must equal the target's joint
  distribution to 1e-6 (a 5% shift of one cell was what a chi-square fit of 6,000 samples could see). Broken
  rules (the old confidence rule, lookup drafts verified as certain) are seen far above that. The residual over
  the whole vocabulary is enumerated round by round in test_enumeration.py, for every option.
- The real draws, sampled. 6,000 whole calls at temperature 0.8 and no top-k must fit the target's exact
  distribution (chi-square). The same fit must reject two deliberately broken samplers from 1,500 samples, which
  shows it is strong enough to catch a wrong residual distribution or draft logits that are not the ones the
  draft was sampled from.
"""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import transformers.generation.utils as generation_utils
from conftest import imitating_assistant, one_layer_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint
from scipy.stats import chisquare
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper

from hf_dynaspec.drafting.chain import ChainDraftSession

VOCAB = 8
PROMPT = torch.tensor([[1, 4, 2]])
# Enough to see a 5% shift of a cell's probability (the old confidence rule, a shift of 0.05 on a 0.5 cell, fit
# with p = 0.058 at 1,500 samples and was rejected at 6,000).
NUM_SAMPLES = 6000
# A broken sampler far from the target's distribution is rejected from fewer samples; rejecting it at 1,500 is the
# harder bar (power only grows with the sample count), so the matching test's 6,000 would reject it too.
FEWER_SAMPLES = 1500
TEMPERATURE = 0.8
# The enumerated calls: top-k 3 bounds each draw to 3 branches (a whole call ~1,000 paths, ~6 ms each).
TOP_K = 3
NEW_TOKENS = 4
MAX_PATHS = 6000
TOLERANCE = 1e-6


def sampling_target():
    return one_layer_target("llama", seed=5, vocab_size=VOCAB)


@torch.no_grad()
def exact_distribution(target) -> torch.Tensor:
    """P(x2, x3) `[VOCAB, VOCAB]` of the 2nd and 3rd generated tokens (the ones the drafts cover)."""
    sequences = torch.tensor(list(itertools.product(range(VOCAB), repeat=2)))  # (x1, x2)
    inputs = torch.cat([PROMPT.expand(len(sequences), -1), sequences], dim=1)
    logits = target(inputs).logits[:, -3:].float() / TEMPERATURE
    probs = logits.softmax(-1)  # next-token distributions after prompt, after x1, after x2
    p1 = probs[:, 0, :]  # same for every row
    joint = torch.zeros(VOCAB, VOCAB, VOCAB)
    for row, (x1, x2) in enumerate(sequences.tolist()):
        joint[x1, x2, :] = p1[row, x1] * probs[row, 1, x2] * probs[row, 2, :]
    return joint.sum(0)


def sampled_counts(target, assistant, num_samples: int = NUM_SAMPLES) -> tuple[torch.Tensor, float]:
    """Counts of (x2, x3) `[VOCAB, VOCAB]` over `num_samples` assisted generations, and the acceptance rate."""
    counts = torch.zeros(VOCAB, VOCAB)
    drafted = accepted = 0
    torch.manual_seed(1)  # the same samples on every run of the same code
    for _ in range(num_samples):
        out = target.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), assistant_model=assistant, do_sample=True,
                              temperature=TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=4)
        x2, x3 = out[0, PROMPT.shape[1] + 1 : PROMPT.shape[1] + 3].tolist()
        counts[x2, x3] += 1
        drafted += assistant.stats.drafted
        accepted += assistant.stats.accepted
    return counts, accepted / drafted


def fit_p_value(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square goodness of fit, pooling cells expected below 5 samples."""
    expected = probs.flatten() * counts.sum()
    observed = counts.flatten()
    small = expected < 5
    if small.any():
        observed = torch.cat([observed[~small], observed[small].sum()[None]])
        expected = torch.cat([expected[~small], expected[small].sum()[None]])
    return float(chisquare(observed.numpy(), expected.numpy() * observed.sum().item() / expected.sum().item()).pvalue)


@pytest.fixture(scope="module")
def setup():
    target = sampling_target()
    # A drafter that is right often but not always, with a distribution clearly different from the target's.
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2)
    return target, assistant, exact_distribution(target)


def test_sampling_matches_the_target_distribution(setup):
    target, assistant, probs = setup
    counts, acceptance_rate = sampled_counts(target, assistant)
    # The drafts must be doing something: some accepted, some rejected.
    assert 0.2 < acceptance_rate < 0.95, acceptance_rate
    assert fit_p_value(counts, probs) > 1e-3


def _resample_from_target_on_rejection(candidate_input_ids, candidate_logits, candidate_length, new_logits, **kw):
    """A broken accept rule: on rejection, sample from p instead of norm(max(0, p - q)). (A round that drafted
    nothing comes here too, with empty draft logits.)"""
    drafts = candidate_input_ids[:, candidate_input_ids.shape[1] - candidate_length:]
    q = candidate_logits.softmax(-1)
    p = new_logits.softmax(-1)
    positions = torch.arange(candidate_length)
    ratio = p[0, positions, drafts[0]] / q[0, positions, drafts[0]]
    accepted = torch.rand_like(ratio) <= ratio
    n = int((~accepted).cumsum(-1).lt(1).sum())
    token = torch.multinomial(p[0, n], 1)[None]
    return torch.cat([drafts[:, :n], token], dim=1), n


def test_fit_rejects_a_wrong_residual(setup, monkeypatch):
    target, assistant, probs = setup
    monkeypatch.setattr(generation_utils, "_speculative_sampling", _resample_from_target_on_rejection)
    assert fit_p_value(sampled_counts(target, assistant, FEWER_SAMPLES)[0], probs) < 1e-3


def test_fit_rejects_draft_logits_that_were_not_sampled_from(setup, monkeypatch):
    target, assistant, probs = setup
    choose = ChainDraftSession._choose

    def sharpened(self, *args, **kwargs):  # returns logits of another distribution than the sampled one
        token_id, logits, confident, top = choose(self, *args, **kwargs)
        return token_id, None if logits is None else logits * 3.0, confident, top

    monkeypatch.setattr(ChainDraftSession, "_choose", sharpened)
    assert fit_p_value(sampled_counts(target, assistant, FEWER_SAMPLES)[0], probs) < 1e-3


# -- every option, enumerated -----------------------------------------------------------------------------------
def enumerated_calls(target, assistant) -> tuple[float, list]:
    """The largest difference between the exact distribution of a whole call's new tokens and the target's joint
    distribution (both at TEMPERATURE and top-k TOP_K), and (probability, the assistant's statistics) of each path."""
    stats = []  # one per call, in the order enumerate_paths returns the paths

    def call():
        out = target.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), assistant_model=assistant, do_sample=True,
                              temperature=TEMPERATURE, top_k=TOP_K, top_p=1.0, max_new_tokens=NEW_TOKENS)
        stats.append(copy.copy(assistant.stats))
        return tuple(out[0, PROMPT.shape[1]:].tolist())

    paths = enumerate_paths(call, max_paths=MAX_PATHS)
    oracle = TargetOracle(target, LogitsProcessorList([TemperatureLogitsWarper(TEMPERATURE), TopKLogitsWarper(TOP_K)]))
    error = max_error(outcome_distribution(paths), target_joint(oracle, PROMPT[0].tolist(), NEW_TOKENS))
    return error, [(weight, path_stats) for (weight, _), path_stats in zip(paths, stats, strict=True)]


def some_accepted_and_some_rejected(paths) -> bool:
    """The drafts must be doing something: on some paths a drafted token is accepted, on others rejected."""
    return any(s.accepted > 0 for _, s in paths) and any(s.drafted > s.accepted for _, s in paths)


def expected_drafted(paths) -> float:
    return sum(weight * s.drafted for weight, s in paths)


@pytest.fixture
def options(setup):
    """The module's assistant with drafting options set for one test, and set back after it."""
    config, saved = setup[1].generation_config, {}

    def apply(**values):
        for name, value in values.items():
            saved.setdefault(name, getattr(config, name))
            setattr(config, name, value)
        return setup[1]

    yield apply
    for name, value in saved.items():
        setattr(config, name, value)


def test_every_call_is_exact(setup, options):
    target, _, _ = setup
    error, paths = enumerated_calls(target, options())
    assert some_accepted_and_some_rejected(paths)
    assert error < TOLERANCE, error


def test_calls_with_a_confidence_threshold_are_exact(setup, options):
    """Rounds cut short (or left empty) by the drafter's own confidence must not bias the tokens."""
    target, _, _ = setup
    unstopped = expected_drafted(enumerated_calls(target, options())[1])
    error, paths = enumerated_calls(target, options(assistant_confidence_threshold=0.5))
    assert some_accepted_and_some_rejected(paths)
    assert expected_drafted(paths) < 0.9 * unstopped, "the threshold must cut rounds short"
    assert error < TOLERANCE, error


def test_enumeration_sees_the_old_confidence_rule(setup, options, monkeypatch):
    """The rule shipped before: draw x from q, then stop the draft when q(x) < threshold (the draw decides)."""
    from test_enumeration import _old_confidence_rule

    target, _, _ = setup
    monkeypatch.setattr(ChainDraftSession, "_choose", _old_confidence_rule)
    error, _ = enumerated_calls(target, options(assistant_confidence_threshold=0.5))
    assert error > 1e-3, error


def test_calls_with_prompt_lookup_are_exact(setup, options):
    """Lookup drafts are deterministic (one-hot q): accepting x with p(x) and resampling from p without x on
    rejection must leave the distribution unchanged. With 1-grams on 8 tokens, lookup drafts on many paths."""
    target, _, _ = setup
    error, paths = enumerated_calls(target, options(prompt_lookup_num_tokens=2, prompt_lookup_min_ngram=1))
    assert any(s.lookup_passes > 0 for _, s in paths) and some_accepted_and_some_rejected(paths)
    assert error < TOLERANCE, error


def test_calls_with_vetoed_prompt_lookup_are_exact(setup, options):
    """The drafter overrules some lookup drafts. The choice reads its argmax, not a sample, so each round's draft
    still comes from the distribution its logits describe (one-hot for lookup, the drafter's otherwise). At 0.4
    the drafter overrules the copy on 126 of the 459 paths and lets it draft on 141 (at 0.2: every copy)."""
    target, _, _ = setup
    assistant = options(prompt_lookup_num_tokens=2, prompt_lookup_min_ngram=1, prompt_lookup_veto=0.4)
    error, paths = enumerated_calls(target, assistant)
    assert any(s.lookup_passes > 0 for _, s in paths) and any(s.lookup_vetoes > 0 for _, s in paths)
    assert some_accepted_and_some_rejected(paths)
    assert error < TOLERANCE, error


def test_enumeration_sees_lookup_drafts_treated_as_certain(setup, options, monkeypatch):
    """The same comparison must catch lookup drafts verified as if the target agreed with them (q = p)."""
    import hf_dynaspec.drafting.lookup as drafting

    target, _, _ = setup
    # Uniform q instead of one-hot: accepts x with min(1, p(x) * V) -- far too often.
    monkeypatch.setattr(drafting, "one_hot_logits", lambda ids, vocab: torch.zeros(1, ids.shape[1], vocab))
    error, _ = enumerated_calls(target, options(prompt_lookup_num_tokens=2, prompt_lookup_min_ngram=1))
    assert error > 1e-3, error


@pytest.mark.parametrize("strategy", ["frspec", "dynaspec"])
def test_calls_through_a_shortlist_are_exact(setup, tmp_path, strategy):
    """Drafts come from a shortlist (-inf outside it): the residual must still restore the target's distribution."""
    from hf_dynaspec import DynaSpecAssistant
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    target, assistant, _ = setup
    head = target.get_output_embeddings().weight.detach()
    assistant.shortlists.set_frequency_list(torch.tensor([3, 5, 6, 2]), kind="frspec")
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 3, always_ids=[0], seed=0))
    with torch.no_grad():
        for p in assistant.shortlists.router.parameters():
            p.normal_(0, 1.0)
    assistant.save_pretrained(tmp_path)
    shortlisted = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, max_clusters=1)
    error, paths = enumerated_calls(target, shortlisted)
    assert some_accepted_and_some_rejected(paths)
    assert all(s.avg_shortlist < VOCAB for _, s in paths if s.drafted)
    assert error < TOLERANCE, error
