"""Greedy decoding with the assistant must be token-identical to plain `generate()` (fp32)."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, assisted_generate, imitating_assistant, one_layer_target, plain_generate, random_assistant
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer


def prompt(seed: int, length: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (1, length), generator=generator)


@pytest.mark.parametrize("num_assistant_tokens", [1, 3, 6])
@pytest.mark.parametrize("prompt_length", [1, 5, 17])
def test_greedy_identical_over_seeds(family, prompt_length, num_assistant_tokens):
    target = one_layer_target(family)
    for seed in range(4):
        assistant = imitating_assistant(target, noise=0.15, seed=seed, num_assistant_tokens=num_assistant_tokens)
        input_ids = prompt(seed, prompt_length)
        expected = plain_generate(target, input_ids, max_new_tokens=24, do_sample=False)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=24, do_sample=False)
        assert torch.equal(got, expected), (seed, got, expected)
        assert assistant.stats.verify_passes > 0


def test_greedy_identical_with_deep_target_and_random_drafter(family):
    # A 4-layer target with a random drafter: almost every draft is rejected, which exercises the
    # rollback of the drafter cache after short or empty acceptances.
    from conftest import tiny_target

    target = tiny_target(family, seed=3)
    assistant = random_assistant(target, num_assistant_tokens=5)
    for seed in range(3):
        input_ids = prompt(100 + seed, 9)
        expected = plain_generate(target, input_ids, max_new_tokens=30, do_sample=False)
        assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=30), expected)


def test_drafts_are_accepted_when_the_drafter_imitates_the_target(family):
    # Greedy output is exact whatever the drafter does; acceptance is what shows that the drafter reads the
    # right target features at the right positions. The imitating drafter differs from the target only in
    # not seeing the first prompt token, so nearly all of its drafts must be accepted.
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0, num_assistant_tokens=4)
    for seed in range(3):
        assisted_generate(target, assistant, prompt(seed, 12), max_new_tokens=40)
        assert assistant.stats.acceptance_rate > 0.9, assistant.stats
        assert assistant.stats.tau > 4.0


@pytest.mark.parametrize("confidence", [0.045, 0.06, 0.08])  # this drafter's probabilities: 0.03-0.09
def test_greedy_identical_with_a_confidence_threshold(family, confidence):
    # Rounds of every length from 0 to K: an empty round is a plain one-token pass that the drafter must
    # still follow (its features enter the drafter cache at the next round).
    target = one_layer_target(family)
    lengths = set()
    for seed in range(4):
        assistant = imitating_assistant(target, noise=0.6, seed=seed, num_assistant_tokens=4, assistant_confidence_threshold=confidence)
        input_ids = prompt(seed, 7)
        expected = plain_generate(target, input_ids, max_new_tokens=30, do_sample=False)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=30, do_sample=False)
        assert torch.equal(got, expected), (seed, confidence)
        stats = assistant.stats
        # Every pass after the prefill is counted, empty ones included: 29 tokens after the prefill's one.
        assert stats.accepted + stats.verify_passes == 29
        lengths.update(stats.drafted_per_pass)
    assert 0 in lengths and max(lengths) > 0, lengths


def test_a_drafter_never_confident_leaves_plain_decoding(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0, num_assistant_tokens=3, assistant_confidence_threshold=0.999999)
    input_ids = prompt(3, 5)
    expected = plain_generate(target, input_ids, max_new_tokens=12)
    assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=12), expected)
    assert assistant.stats.drafted == 0 and assistant.stats.verify_passes == 11 and assistant.stats.tau == 1.0


@pytest.mark.parametrize("max_new_tokens", list(range(1, 14)))
def test_max_new_tokens_hit_mid_draft(family, max_new_tokens):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0, num_assistant_tokens=5)
    input_ids = prompt(7, 6)
    expected = plain_generate(target, input_ids, max_new_tokens=max_new_tokens)
    got = assisted_generate(target, assistant, input_ids, max_new_tokens=max_new_tokens)
    assert got.shape[1] == input_ids.shape[1] + max_new_tokens
    assert torch.equal(got, expected)


def test_eos_inside_an_accepted_draft(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0, num_assistant_tokens=6)
    input_ids = prompt(11, 6)
    free_run = plain_generate(target, input_ids, max_new_tokens=30)[0, input_ids.shape[1] :].tolist()
    eos_inside_accepted_chunk = 0
    for eos in sorted(set(free_run[1:12])):
        eos_index = free_run.index(eos)
        expected = plain_generate(target, input_ids, max_new_tokens=30, eos_token_id=eos)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=30, eos_token_id=eos)
        assert torch.equal(got, expected), eos
        assert got.shape[1] == input_ids.shape[1] + eos_index + 1 and int(got[0, -1]) == eos
        # The last pass committed drafts and then EOS: EOS ended an accepted multi-token chunk.
        if eos_index > 0 and assistant.stats.accepted_per_pass and assistant.stats.accepted_per_pass[-1] >= 1:
            eos_inside_accepted_chunk += 1
    assert eos_inside_accepted_chunk >= 3


class EndsWith(StoppingCriteria):
    """Stops once the sequence ends with `tokens`: a stop string of len(tokens) tokens, as the tiny vocabulary
    has no tokenizer (StopStringCriteria is a function of the sequence's last tokens too)."""

    def __init__(self, tokens: list[int]):
        self.tokens = torch.tensor(tokens)

    def __call__(self, input_ids, scores, **kwargs):
        width = len(self.tokens)
        return (input_ids[:, -width:] == self.tokens).all(dim=1)


def chunk_ends(assistant, prompt_length: int) -> set[int]:
    """The sequence lengths at which the last call's passes ended (the prefill commits one token)."""
    ends, length = set(), prompt_length + 1
    ends.add(length)
    for accepted in assistant.stats.accepted_per_pass:
        length += accepted + 1
        ends.add(length)
    return ends


def cache_length(output) -> int:
    """The returned cache's length (its field is `cache` in recent transformers, `past_key_values` in 5.8)."""
    return output.get("cache", output.get("past_key_values")).get_seq_length()


def test_a_stop_sequence_completed_inside_an_accepted_draft(family):
    # transformers' assisted loop checks stopping criteria other than EOS and max length on the sequence's end
    # only: a stop completed mid-round must still end the output where plain decoding ends it, with the streamer
    # and the per-token scores ending there too.
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0, num_assistant_tokens=6)
    input_ids = prompt(11, 6)
    length = input_ids.shape[1]
    assisted_generate(target, assistant, input_ids, max_new_tokens=30)
    ends = chunk_ends(assistant, length)
    free_run = plain_generate(target, input_ids, max_new_tokens=30)[0, length:].tolist()
    inside = 0
    for index in range(2, 14):
        stop = StoppingCriteriaList([EndsWith(free_run[index - 1 : index + 1])])
        options = dict(max_new_tokens=30, output_scores=True, return_dict_in_generate=True)
        expected = plain_generate(target, input_ids, stopping_criteria=stop, **options)
        streamer = CollectingStreamer()
        got = assisted_generate(target, assistant, input_ids, stopping_criteria=stop, streamer=streamer, **options)
        assert torch.equal(got.sequences, expected.sequences), index
        assert torch.equal(torch.cat(streamer.chunks), got.sequences[0]) and streamer.ended
        assert len(got.scores) == len(expected.scores) == expected.sequences.shape[1] - length
        assert torch.equal(got.scores[-1].argmax(-1), expected.sequences[:, -1])
        assert cache_length(got) == cache_length(expected)
        inside += expected.sequences.shape[1] not in ends
    assert inside >= 4, (inside, ends)


def test_logits_processors_are_honoured(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.15, num_assistant_tokens=4)
    options = dict(max_new_tokens=30, repetition_penalty=1.5, no_repeat_ngram_size=2, suppress_tokens=[3, 5])
    for seed in range(3):
        input_ids = prompt(20 + seed, 8)
        expected = plain_generate(target, input_ids, **options)
        assert torch.equal(assisted_generate(target, assistant, input_ids, **options), expected)


class CollectingStreamer(BaseStreamer):
    def __init__(self):
        self.chunks: list[torch.Tensor] = []
        self.ended = False

    def put(self, value):
        self.chunks.append(value.flatten())

    def end(self):
        self.ended = True


def test_streamer_receives_exactly_the_output(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.15, num_assistant_tokens=4)
    input_ids = prompt(5, 8)
    streamer = CollectingStreamer()
    got = assisted_generate(target, assistant, input_ids, max_new_tokens=25, streamer=streamer)
    assert streamer.ended
    # transformers streams the prompt first, then each accepted chunk.
    assert torch.equal(torch.cat(streamer.chunks), got[0])
    assert any(len(chunk) > 1 for chunk in streamer.chunks[1:]), "no multi-token chunk: drafts never accepted"


def test_eagle3_drafter_greedy_identical(family):
    from conftest import tiny_target

    from hf_dynaspec import DynaSpecAssistant

    target = tiny_target(family, seed=4)
    assistant = DynaSpecAssistant.from_target(
        target, drafter_kind="eagle3", draft_vocab_size=40, aux_hidden_state_layer_ids=[1, 2, 3], num_assistant_tokens=3
    )
    # A draft vocabulary of every other target id, the way EAGLE-3 keeps a subset.
    draft_to_target = torch.arange(0, 80, 2)
    with torch.no_grad():
        assistant.drafter.d2t.copy_(draft_to_target - torch.arange(40))
    for seed in range(3):
        input_ids = prompt(30 + seed, 7)
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=20)
        assert torch.equal(got, expected)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_fp16_greedy_is_exact_up_to_near_ties(family):
    """fp16 (a T4's dtype) on CPU: every assisted output equals plain greedy's or parts from it at a near-tie."""
    from hf_dynaspec import check_exactness

    target = one_layer_target(family).to(torch.float16)
    assistant = imitating_assistant(target, noise=0.15, num_assistant_tokens=3)
    assert assistant.drafter.fc.weight.dtype == torch.float16  # attach followed the target's dtype
    for seed in range(3):
        input_ids = prompt(seed, 10)
        expected = plain_generate(target, input_ids, max_new_tokens=30)
        got = assisted_generate(target, assistant, input_ids, max_new_tokens=30)
        divergence = check_exactness(target, input_ids, expected[0, 10:], got[0, 10:])
        assert divergence is None or divergence.near_tie, divergence
    assert assistant.stats.accepted > 0
