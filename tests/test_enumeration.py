"""Exact losslessness: one speculative round's output distribution, enumerated, equals the target's to 1e-6.

No sampling noise: every draft the drafter can make is followed with its probability, and every accept,
reject and residual outcome of the verifier with its own (tests/enumeration.py). Each option that touches
drafting (confidence stop, prompt lookup and its veto, shortlists, temperature / top-k / top-p / min-p /
repetition-penalty processors, on a shortlist's rows and on the whole vocabulary, EAGLE-3's reduced vocabulary)
and both decoders (chain and tree) are covered. The last tests plant known rule violations and check that the
same comparison sees them, far above the tolerance.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import imitating_assistant, one_layer_target
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint, tree_round
from transformers import (
    LogitsProcessorList,
    MinPLogitsWarper,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu
from hf_dynaspec.modeling.shortlist import cluster_vocabulary

VOCAB = 6
# The last token is the one the prefill produced; "2 4" occurs twice, so 1-gram lookup finds a continuation.
PROMPT = [1, 4, 2, 5, 2]
TOLERANCE = 1e-6


def processors(kind: str) -> LogitsProcessorList:
    if kind == "plain":
        return LogitsProcessorList()
    if kind == "temperature":
        return LogitsProcessorList([TemperatureLogitsWarper(0.7)])
    if kind == "top-k":
        return LogitsProcessorList([TemperatureLogitsWarper(1.3), TopKLogitsWarper(4)])
    if kind == "top-p":
        return LogitsProcessorList([TopPLogitsWarper(0.8)])
    if kind == "top-k-2":  # fewer than a shortlist's rows: the cut falls inside them
        return LogitsProcessorList([TemperatureLogitsWarper(1.3), TopKLogitsWarper(2)])
    if kind == "min-p":
        return LogitsProcessorList([TemperatureLogitsWarper(0.9), MinPLogitsWarper(0.3)])
    if kind == "repetition":  # the context's ids penalised, inside and outside a shortlist's rows
        return LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.8), TemperatureLogitsWarper(0.8)])
    if kind == "unknown":  # a processor the rows path does not know: the whole-vocabulary path
        return LogitsProcessorList([NoRepeatNGramLogitsProcessor(2), TemperatureLogitsWarper(0.8)])
    raise ValueError(kind)


@pytest.fixture(scope="module")
def target():
    return one_layer_target("llama", seed=5, vocab_size=VOCAB)


def noisy_assistant(target, **overrides):
    """Right often, not always, and with a distribution clearly unlike the target's."""
    return imitating_assistant(target, noise=1.0, seed=3, **overrides)


def shortlisted(target, tmp_path, strategy: str):
    assistant = noisy_assistant(target, num_assistant_tokens=2)
    head = target.get_output_embeddings().weight.detach()
    assistant.shortlists.set_frequency_list(torch.tensor([3, 5, 2]), kind="frspec")
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 3, always_ids=[0], seed=0))
    with torch.no_grad():
        for p in assistant.shortlists.router.parameters():
            p.normal_(0, 1.0)
    assistant.save_pretrained(tmp_path)
    return DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, max_clusters=1)


def chain_error(target, assistant, kind: str = "plain", num_draft_tokens: int = 2):
    lp = processors(kind)
    outcomes = chain_round(target, assistant, PROMPT, lp, num_draft_tokens)
    oracle = TargetOracle(target, lp)
    length = num_draft_tokens + 1
    return max_error(extended_joint(oracle, PROMPT, outcomes, length), target_joint(oracle, PROMPT, length)), outcomes


def drafted_lengths(outcomes) -> set[int]:
    return {len(tokens) for tokens in outcomes}


@pytest.mark.parametrize("kind", ["plain", "temperature", "top-k", "top-p"])
def test_chain_round_is_exact(target, kind):
    error, outcomes = chain_error(target, noisy_assistant(target, num_assistant_tokens=2), kind)
    assert drafted_lengths(outcomes) == {1, 2, 3}, "some rounds must accept 0, 1 and 2 drafts"
    assert error < TOLERANCE, error


def test_chain_round_with_three_drafts_is_exact(target):
    error, outcomes = chain_error(target, noisy_assistant(target, num_assistant_tokens=3), "temperature", 3)
    assert drafted_lengths(outcomes) == {1, 2, 3, 4}
    assert error < TOLERANCE, error


def spy_on_drafts(monkeypatch) -> list:
    """Every Draft the chain session or a copy hands over (drafted, or a lookup draft), in order."""
    from hf_dynaspec.drafting.lookup import CopyProposer

    drafts = []

    def recording(original):
        def record(self, *args, **kwargs):
            drafts.append(original(self, *args, **kwargs))
            return drafts[-1]
        return record

    monkeypatch.setattr(ChainDraftSession, "draft", recording(ChainDraftSession.draft))
    monkeypatch.setattr(CopyProposer, "draft", recording(CopyProposer.draft))
    return drafts


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
@pytest.mark.parametrize("kind", ["plain", "temperature"])
def test_chain_round_with_a_confidence_stop_is_exact(target, kind, form, monkeypatch):
    """Both forms of the stop: at once (CPU) and deferred to one read at the round's end (accelerators), where
    the positions past the stop are drawn and then dropped."""
    drafts = spy_on_drafts(monkeypatch)
    assistant = noisy_assistant(target, num_assistant_tokens=2, assistant_confidence_threshold=0.35)
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext():
        error, _ = chain_error(target, assistant, kind)
    lengths = {d.token_ids.shape[1] for d in drafts}
    assert 2 in lengths and lengths & {0, 1}, f"the stop must cut some drafts short and leave others: {lengths}"
    assert error < TOLERANCE, error


@pytest.mark.parametrize("veto", [1.0, 0.2])
def test_chain_round_with_prompt_lookup_is_exact(target, veto, monkeypatch):
    drafts = spy_on_drafts(monkeypatch)
    assistant = noisy_assistant(target, num_assistant_tokens=2, prompt_lookup_num_tokens=2, prompt_lookup_min_ngram=1,
                                prompt_lookup_veto=veto)
    error, _ = chain_error(target, assistant, "temperature")
    looked_up = [d.looked_up for d in drafts]
    # "2" occurred before, followed by "5 2": the lookup draft; the veto overrules it in favour of the drafter.
    assert set(looked_up) == {veto == 1.0}, looked_up
    assert error < TOLERANCE, error


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
@pytest.mark.parametrize("strategy", ["frspec", "dynaspec"])
def test_chain_round_through_a_shortlist_is_exact(target, tmp_path, strategy, form):
    """`accelerator`: the padded device-side shortlist (padding columns must never be drawn)."""
    assistant = shortlisted(target, tmp_path, strategy)
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext():
        error, _ = chain_error(target, assistant, "temperature")
    assert error < TOLERANCE, error


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
@pytest.mark.parametrize("kind", ["top-k", "top-k-2", "top-p", "min-p", "repetition", "unknown"])
def test_sampled_drafts_processed_on_the_shortlists_rows_are_exact(target, tmp_path, kind, form, monkeypatch):
    """Each processor kind runs on the rows the shortlisted head scored (row_processing), never on the widened
    vocabulary, except a processor the rows path does not know; tokens outside the rows (q = 0) come back through
    the residual."""
    import hf_dynaspec.drafting.chain as chain

    widened, rows = [], []
    to_full_vocab, process_rows = ChainDraftSession._to_full_vocab, chain.process_rows
    monkeypatch.setattr(ChainDraftSession, "_to_full_vocab",
                        lambda self, *a: widened.append(1) or to_full_vocab(self, *a))
    monkeypatch.setattr(chain, "process_rows", lambda p, c, logits, ids: rows.append(int((ids >= 0).sum()))
                        or process_rows(p, c, logits, ids))
    torch.manual_seed(0)  # the router's weights (shortlisted): the same rows whatever ran before
    assistant = shortlisted(target, tmp_path, "dynaspec")
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext():
        error, outcomes = chain_error(target, assistant, kind)
    assert bool(widened) == (kind == "unknown") != bool(rows), (len(widened), len(rows))
    assert kind == "unknown" or max(rows) < VOCAB, "the rows must leave tokens out, reached by the residual only"
    assert drafted_lengths(outcomes) == {1, 2, 3}, "some rounds must accept 0, 1 and 2 drafts"
    assert error < TOLERANCE, error
    assert error < TOLERANCE, error


def test_chain_round_with_an_eagle3_drafter_is_exact(target):
    assistant = DynaSpecAssistant.from_target(target, drafter_kind="eagle3", draft_vocab_size=4,
                                              num_assistant_tokens=2)
    torch.manual_seed(0)
    with torch.no_grad():
        for _name, param in assistant.named_parameters():
            param.normal_(0, 0.5)
        assistant.drafter.d2t.copy_(torch.tensor([0, 0, 1, 2]))  # draft rows 0..3 -> target ids 0, 1, 3, 5
    error, outcomes = chain_error(target, assistant, "temperature")
    assert error < TOLERANCE, error


@pytest.mark.parametrize("kind", ["plain", "top-k"])
# (1, 3, 3): a width-1 tree, the shape chain_generate (the public chain route) runs.
@pytest.mark.parametrize("shape", [(2, 2, 3), (3, 2, 5), (1, 3, 3)])
def test_tree_round_is_exact(target, kind, shape):
    top_k, depth, total = shape
    lp = processors(kind)
    outcomes, nodes = tree_round(target, noisy_assistant(target), PROMPT, lp, top_k, depth, total)
    assert nodes == total + 1
    oracle = TargetOracle(target, lp)
    error = max_error(extended_joint(oracle, PROMPT, outcomes, depth + 1), target_joint(oracle, PROMPT, depth + 1))
    assert max(len(t) for t in outcomes) == depth + 1
    assert error < TOLERANCE, error


def test_tree_round_is_exact_where_later_siblings_are_accepted_and_continued(target, monkeypatch):
    """Branching 3, depth 2: the enumeration reaches walks that accept a sibling after a rejected one (the
    recursive rejection's later trials) at depth 1 and, below an accepted node, at depth 2, and the whole round is
    still exact."""
    import hf_dynaspec.generation.tree_verify as verify

    walked, walk = [], verify.sampled_path

    def recording(tree, *args):
        path = walk(tree, *args)
        walked.append((tree.parents.tolist(), path.nodes))
        return path

    monkeypatch.setattr(verify, "sampled_path", recording)
    lp = processors("plain")
    outcomes, _ = tree_round(target, noisy_assistant(target), PROMPT, lp, 3, 2, 6)
    oracle = TargetOracle(target, lp)
    assert max_error(extended_joint(oracle, PROMPT, outcomes, 3), target_joint(oracle, PROMPT, 3)) < TOLERANCE

    def later_sibling(parents, node):
        return any(parents[i] == parents[node] for i in range(1, node))

    assert any(nodes and later_sibling(parents, nodes[0]) for parents, nodes in walked), walked
    assert any(len(nodes) == 2 and later_sibling(parents, nodes[1]) for parents, nodes in walked), walked


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
def test_tree_round_through_a_shortlist_is_exact(target, tmp_path, form):
    assistant = shortlisted(target, tmp_path, "dynaspec")
    lp = processors("temperature")
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext():
        outcomes, _ = tree_round(target, assistant, PROMPT, lp, 2, 2, 4)
    oracle = TargetOracle(target, lp)
    assert max_error(extended_joint(oracle, PROMPT, outcomes, 3), target_joint(oracle, PROMPT, 3)) < TOLERANCE


# -- the comparison sees broken rules --------------------------------------------------------------------
def _old_confidence_rule(self, scores, context, with_top=False):
    """The rule shipped before: draw x from q, then stop when q(x) < confidence (the draw decides)."""
    full = self._to_full_vocab(scores.scores, scores.token_ids)
    if self.logits_processor is not None:
        full = self.logits_processor(context, full)
    probs = full.softmax(-1)
    token = torch.multinomial(probs, num_samples=1)
    if float(probs[0, token]) < self.confidence:
        return None, None, None, None
    return token, full, None, probs.max() if with_top else None


def test_enumeration_sees_the_old_confidence_rule(target, monkeypatch):
    monkeypatch.setattr(ChainDraftSession, "_choose", _old_confidence_rule)
    error, _ = chain_error(target, noisy_assistant(target, num_assistant_tokens=2, assistant_confidence_threshold=0.35))
    assert error > 1e-3, error


def test_enumeration_sees_draft_logits_before_the_temperature(target, monkeypatch):
    """The drafter samples from the processed q but hands the verifier the unprocessed one."""
    choose = ChainDraftSession._choose

    def unprocessed(self, scores, context, with_top=False):
        token, logits, confident, top = choose(self, scores, context, with_top)
        return token, None if logits is None else self._to_full_vocab(scores.scores, scores.token_ids), confident, top

    monkeypatch.setattr(ChainDraftSession, "_choose", unprocessed)
    error, _ = chain_error(target, noisy_assistant(target, num_assistant_tokens=2), "temperature")
    assert error > 1e-3, error


def test_enumeration_sees_an_unrenormalised_tree_residual(target, monkeypatch):
    """A later sibling tried with its plain p(x) instead of its share of what the earlier siblings left."""
    import hf_dynaspec.generation.tree_verify as verify

    trial = verify.sibling_trial

    def without_renormalising(tree, node, probs):
        ratios, residual = trial(tree, node, probs)
        children = tree.parents == node
        return torch.where(children & (ratios > 0), probs[tree.token_ids], 0.0), residual

    monkeypatch.setattr(verify, "sibling_trial", without_renormalising)
    lp = processors("plain")
    outcomes, _ = tree_round(target, noisy_assistant(target), PROMPT, lp, 3, 2, 5)
    oracle = TargetOracle(target, lp)
    assert max_error(extended_joint(oracle, PROMPT, outcomes, 3), target_joint(oracle, PROMPT, 3)) > 1e-3
