"""Block verification (hf_dynaspec.generation.block_verify): exact output distribution, never fewer accepted
tokens in expectation than token verification, and exact rounds through the library's own code path."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import imitating_assistant, one_layer_target
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors

from hf_dynaspec.generation import block_verify


class Tables:
    """Random next-token distributions p (target) and q (drafter) for every prefix of a small vocabulary."""

    def __init__(self, vocab: int, seed: int, sharpness: float = 1.5):
        self.vocab, self.generator, self.sharpness = vocab, torch.Generator().manual_seed(seed), sharpness
        self._p, self._q = {}, {}

    def _draw(self, store, prefix):
        if prefix not in store:
            store[prefix] = (self.sharpness * torch.randn(self.vocab, generator=self.generator)).double().softmax(-1)
        return store[prefix]

    def p(self, prefix):
        return self._draw(self._p, tuple(prefix))

    def q(self, prefix):
        return self._draw(self._q, tuple(prefix))


def block_outcomes(tables: Tables, gamma: int, rule=block_verify.block_weights) -> tuple[dict, float]:
    """{committed tokens: probability} of one block-verified round, and its expected accepted drafts."""
    outcomes, expected_accepted = {}, 0.0
    for draft in itertools.product(range(tables.vocab), repeat=gamma):
        draft_probability = 1.0
        for i, token in enumerate(draft):
            draft_probability *= float(tables.q(draft[:i])[token])
        p = torch.stack([tables.p(draft[:i]) for i in range(gamma + 1)])
        q = torch.stack([tables.q(draft[:i]) for i in range(gamma)])
        w, h = rule(p, q, torch.tensor(draft))
        h = [1.0] + h.tolist()
        for tau in range(gamma + 1):
            probability = h[tau] * float(torch.tensor([1 - x for x in h[tau + 1 :]], dtype=torch.float64).prod())
            if probability == 0:
                continue
            expected_accepted += draft_probability * probability * tau
            residual = block_verify.residual_distribution(p, q, w, tau)
            for token in range(tables.vocab):
                key = draft[:tau] + (token,)
                outcomes[key] = outcomes.get(key, 0.0) + draft_probability * probability * float(residual[token])
    return outcomes, expected_accepted


def token_expected_accepted(tables: Tables, gamma: int) -> float:
    """Token-by-token verification: the sum over k of P(the first k drafts are all accepted), where a prefix is
    drafted with probability prod q and accepted with prod min(1, p / q)."""
    total = 0.0
    for k in range(1, gamma + 1):
        for prefix in itertools.product(range(tables.vocab), repeat=k):
            value = 1.0
            for i, token in enumerate(prefix):
                value *= min(float(tables.q(prefix[:i])[token]), float(tables.p(prefix[:i])[token]))
            total += value
    return total


def joint_after(tables: Tables, outcomes: dict, length: int) -> dict:
    """Continue every round outcome with the target up to `length` tokens."""
    joint = {}
    for seq in itertools.product(range(tables.vocab), repeat=length):
        total = 0.0
        for m in range(1, length + 1):
            value = outcomes.get(seq[:m], 0.0)
            for j in range(m, length):
                value *= float(tables.p(seq[:j])[seq[j]])
            total += value
        joint[seq] = total
    return joint


def target_only(tables: Tables, length: int) -> dict:
    joint = {}
    for seq in itertools.product(range(tables.vocab), repeat=length):
        value = 1.0
        for j in range(length):
            value *= float(tables.p(seq[:j])[seq[j]])
        joint[seq] = value
    return joint


@pytest.mark.parametrize("gamma", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_block_rule_is_exact_and_accepts_at_least_as_much(gamma, seed):
    tables = Tables(vocab=3, seed=seed)
    outcomes, block_accepted = block_outcomes(tables, gamma)
    assert sum(outcomes.values()) == pytest.approx(1.0, abs=1e-12)
    error = max(abs(a - b) for a, b in zip(joint_after(tables, outcomes, gamma + 1).values(),
                                             target_only(tables, gamma + 1).values()))
    assert error < 1e-12, error
    token_accepted = token_expected_accepted(tables, gamma)
    assert block_accepted >= token_accepted - 1e-12
    if gamma >= 2:
        assert block_accepted > token_accepted + 1e-4, (block_accepted, token_accepted)  # strictly more here


def test_block_rule_equals_token_rule_for_one_draft():
    tables = Tables(vocab=4, seed=3)
    _, block_accepted = block_outcomes(tables, 1)
    assert block_accepted == pytest.approx(token_expected_accepted(tables, 1), abs=1e-12)


def test_enumeration_sees_a_block_rule_without_its_residual_term():
    """Mutation: testing each prefix by its weight alone (h_i = w_i) is not lossless; the comparison sees it."""
    def weights_only(p, q, draft):
        w, h = block_verify.block_weights(p, q, draft)
        return w, w[1:]

    tables = Tables(vocab=3, seed=0)
    outcomes, _ = block_outcomes(tables, 2, rule=weights_only)
    error = max(abs(a - b) for a, b in zip(joint_after(tables, outcomes, 3).values(), target_only(tables, 3).values()))
    assert error > 1e-3, error


# verification="auto" (the default) picks block: the same target forward, never fewer accepted tokens.
@pytest.mark.parametrize(("draft_plan", "verification"), [("fixed", "block"), ("auto", "block"), ("auto", "auto")])
@pytest.mark.parametrize("kind", ["plain", "top-k"])
def test_block_verified_round_through_generate_code_is_exact(kind, draft_plan, verification, monkeypatch):
    """The library's candidate generator marks its draft; transformers' `_speculative_sampling` (wrapped by the
    hook) verifies it as a block; the enumerated round is exactly the target's."""
    calls = []
    original = block_verify.block_verify

    def counting(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(block_verify, "block_verify", counting)
    if draft_plan == "auto":
        from test_planner import flat_costs

        monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=3, verification=verification,
                                    draft_plan=draft_plan, auto_max_assistant_tokens=3)
    lp = processors(kind)
    outcomes = chain_round(target, assistant, PROMPT, lp, 3)
    oracle = TargetOracle(target, lp)
    error = max_error(extended_joint(oracle, PROMPT, outcomes, 4), target_joint(oracle, PROMPT, 4))
    assert calls, "the block rule was never used"
    assert error < TOLERANCE, error


def test_unmarked_drafts_keep_transformers_rule(monkeypatch):
    monkeypatch.setattr(block_verify, "block_verify", lambda *a: pytest.fail("block rule used for token verification"))
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2, verification="token")
    outcomes = chain_round(target, assistant, PROMPT, processors("plain"), 2)
    assert sum(outcomes.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("kind", ["plain", "top-k"])
def test_a_round_that_drafted_nothing_draws_the_targets_token_exactly(kind, monkeypatch):
    """Under block verification a round without drafts hands transformers empty marked logits, so that its one token
    is drawn by block_verify (by the package's sampler, on a top-k's few tokens) instead of transformers'
    multinomial: that token's law is exactly the target's."""
    lengths = []
    original = block_verify.block_verify

    def recording(candidate_input_ids, candidate_logits, candidate_length, new_logits):
        lengths.append(candidate_length)
        return original(candidate_input_ids, candidate_logits, candidate_length, new_logits)

    monkeypatch.setattr(block_verify, "block_verify", recording)
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    # A confidence no draft reaches: every round drafts nothing.
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2, verification="block",
                                    assistant_confidence_threshold=0.999)
    lp = processors(kind)
    outcomes = chain_round(target, assistant, PROMPT, lp, 2)
    oracle = TargetOracle(target, lp)
    assert lengths and set(lengths) == {0}, lengths
    assert all(len(tokens) == 1 for tokens in outcomes)
    assert max_error(extended_joint(oracle, PROMPT, outcomes, 2), target_joint(oracle, PROMPT, 2)) < TOLERANCE
