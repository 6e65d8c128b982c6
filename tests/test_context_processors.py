"""Logits processors that read the context (repetition penalty, no-repeat n-grams: Qwen's and many Hub generation
configs carry one) through every route, chain and tree, greedy and sampled.

A verifier that hands such a processor a stale context (the prompt without the accepted path, or the path one
node short) changes the output only where a penalised token would have won, i.e. in long runs: the greedy tests
run 48 new tokens over seeds and prompts, and check that the processor really changes plain decoding there and
that drafts are really accepted (a test where nothing is accepted cannot see a wrong path context). The sampled
tests enumerate one round exactly (tests/enumeration.py) with each processor.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint, tree_round
from test_enumeration import PROMPT, TOLERANCE, VOCAB, noisy_assistant
from transformers import (
    LogitsProcessorList,
    NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
)

from hf_dynaspec import speculative_generate
from hf_dynaspec.drafting.planning.core import RoundCosts

NEW_TOKENS = 48
PROCESSORS = {
    "repetition_penalty": dict(repetition_penalty=1.4),
    "no_repeat_ngram_size": dict(no_repeat_ngram_size=2),
    "both": dict(repetition_penalty=1.2, no_repeat_ngram_size=3),
}
ROUTES = {
    "assistant_model": dict(),
    "assistant_model auto + lookup": dict(draft_plan="auto", prompt_lookup_num_tokens=4, suffix_cache_num_tokens=8),
    "chain_generate": dict(),
    "tree_generate": dict(),
}


def speculative(target, assistant, route: str, input_ids, **options):
    if route.startswith("assistant_model"):
        return assisted_generate(target, assistant, input_ids, **options)
    shape = dict(trees=True, tree_top_k=3, tree_depth=4, tree_total_tokens=8) if route == "tree_generate" else {}
    return target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate,
                           drafter=assistant, **shape, **options)


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("processor", PROCESSORS)
def test_greedy_identical_over_long_runs_with_a_context_processor(family, processor, route, fixed_costs):
    if ROUTES[route].get("draft_plan") == "auto":
        # The planner prices rounds on flat costs, not on this machine's: measured under the suite's load, those made
        # the count of deep passes below vary from run to run (9 of 173 in one CI run, under the bar of 10).
        fixed_costs(RoundCosts([0.0] + [1.0] * 21, consume_seconds=0.01, first_draft_seconds=0.02,
                               draft_step_seconds=0.03))
    options = dict(max_new_tokens=NEW_TOKENS, do_sample=False, **PROCESSORS[processor])
    target = one_layer_target(family, seed=4)
    changed, deep_passes, passes = 0, 0, 0
    for seed in range(3):
        assistant = imitating_assistant(target, noise=0.3, seed=seed, num_assistant_tokens=3, **ROUTES[route])
        for length in (6, 15):
            generator = torch.Generator().manual_seed(100 * seed + length)
            # Repeats in the prompt give the processors (and prompt lookup) something to act on.
            half = torch.randint(0, target.config.vocab_size, (1, length // 2 + 1), generator=generator)
            input_ids = torch.cat([half, half], dim=1)[:, :length]
            expected = plain_generate(target, input_ids, **options)
            got = speculative(target, assistant, route, input_ids, **options)
            assert torch.equal(got, expected), f"seed {seed}, prompt length {length}"
            changed += not torch.equal(expected, plain_generate(target, input_ids, max_new_tokens=NEW_TOKENS))
            deep_passes += sum(n >= 2 for n in assistant.stats.accepted_per_pass)
            passes += assistant.stats.verify_passes
    assert changed >= 4, "the processor must change plain greedy decoding in most runs, or the test sees nothing"
    # Passes that accept 2+ drafts are where the processor sees a context grown inside the verified draft.
    assert deep_passes >= 10, f"too few passes accepted 2+ drafts: {deep_passes}/{passes}"


def _exact_error(outcomes, lp, length: int) -> float:
    oracle = TargetOracle(target_for_enumeration(), lp)
    return max_error(extended_joint(oracle, PROMPT, outcomes, length), target_joint(oracle, PROMPT, length))


_TARGET = {}


def target_for_enumeration():
    if "target" not in _TARGET:
        _TARGET["target"] = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    return _TARGET["target"]


SAMPLED = {
    # PROMPT ends in "2", seen before followed by "5": the penalties move mass off 4, 2 and 5 at every node.
    "repetition_penalty": lambda: LogitsProcessorList([RepetitionPenaltyLogitsProcessor(2.5),
                                                       TemperatureLogitsWarper(0.8)]),
    "no_repeat_ngram_size": lambda: LogitsProcessorList([NoRepeatNGramLogitsProcessor(2)]),
}


@pytest.mark.parametrize("processor", SAMPLED)
def test_sampled_chain_round_with_a_context_processor_is_exact(processor):
    target = target_for_enumeration()
    lp = SAMPLED[processor]()
    outcomes = chain_round(target, noisy_assistant(target, num_assistant_tokens=2), PROMPT, lp, 2)
    assert {len(tokens) for tokens in outcomes} == {1, 2, 3}
    assert _exact_error(outcomes, lp, 3) < TOLERANCE


@pytest.mark.parametrize("shape", [(2, 2, 3), (3, 2, 5)])
@pytest.mark.parametrize("processor", SAMPLED)
def test_sampled_tree_round_with_a_context_processor_is_exact(processor, shape):
    """Each node's row is processed on its own path's context; a walk that hands the processor the prompt alone
    (or the path one node short) gives another distribution."""
    target = target_for_enumeration()
    lp = SAMPLED[processor]()
    top_k, depth, total = shape
    outcomes, _ = tree_round(target, noisy_assistant(target), PROMPT, lp, top_k, depth, total)
    # Outcomes that accept a node put it in the next node's context (2+ nodes: the widest tree's).
    assert max(len(tokens) for tokens in outcomes) >= (3 if total == 5 else 2)
    assert _exact_error(outcomes, lp, depth + 1) < TOLERANCE


def test_the_processor_matters_in_the_enumerated_rounds():
    """Non-vacuity: with the processors, the target's joint distribution differs from the unprocessed one by far
    more than the tolerance, so a verifier that ignored them would fail the tests above."""
    target = target_for_enumeration()
    plain = target_joint(TargetOracle(target, LogitsProcessorList()), PROMPT, 3)
    for make in SAMPLED.values():
        assert max_error(target_joint(TargetOracle(target, make()), PROMPT, 3), plain) > 1e-2
