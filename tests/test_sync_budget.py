"""Host syncs per drafting round, counted on the CPU for the code a GPU runs.

On an accelerator every value read on the host waits for all queued GPU work; at batch 1 such waits cost more
than a shortlist saves, and they cancel the router's side-stream overlap. The drafting code therefore takes its
accelerator form off the CPU (drafting/device_paths.py); these tests run that form on the CPU and count, with
tests/sync_counter.py, every call that would block on a GPU. The bar: at most one per round for every head,
chain and tree, and none inside a tree's drafting.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from sync_counter import HostSyncCounter
from test_shortlists import add_shortlists

from hf_dynaspec import DynaSpecAssistant, speculative_generate
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.candidate_generator import EagleCandidateGenerator

HEADS = ["full", "frspec", "dynaspec", "dynaspec-fixed"]


def _assistant(tmp_path, target, strategy: str, **options):
    torch.manual_seed(0)  # the router's initialisation: the same assistant whatever ran before
    assistant = add_shortlists(imitating_assistant(target, noise=0.3, num_assistant_tokens=4), target)
    assistant.generation_config.max_shortlist_size = 60  # the size cap runs too (on the device)
    assistant.save_pretrained(tmp_path)
    return DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, **options)


def _count_inside(monkeypatch, counter: HostSyncCounter, cls, *names):
    """Count syncs only while the named methods run (not transformers' own verification code)."""
    for name in names:
        original = getattr(cls, name)

        def counted(self, *args, _original=original, **kwargs):
            with counter:
                return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)


@pytest.mark.parametrize("confidence", [0.0, 0.05], ids=["no-threshold", "confidence-stop"])
@pytest.mark.parametrize("strategy", HEADS)
def test_a_chain_round_reads_the_device_at_most_once(monkeypatch, tmp_path, strategy, confidence):
    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, strategy, assistant_confidence_threshold=confidence)
    counter = HostSyncCounter()
    _count_inside(monkeypatch, counter, EagleCandidateGenerator, "get_candidates", "update_candidate_strategy")
    input_ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(0))
    with accelerator_paths_on_cpu():
        output = assisted_generate(target, assistant, input_ids, max_new_tokens=24)
    assert torch.equal(output, plain_generate(target, input_ids, max_new_tokens=24))  # the same draft, cut once
    rounds = assistant.stats.verify_passes
    assert rounds >= 5 and assistant.stats.drafted > 0
    budget = rounds if confidence else 0  # the deferred confidence cut is the one read per round
    assert counter.count <= budget, counter.events[:6]
    if strategy != "full":  # the statistics stayed on the device until read here
        assert 0 < assistant.stats.avg_shortlist < 97 and 0 <= assistant.stats.coverage <= 1


@pytest.mark.parametrize("suffix", [0, 8], ids=["planned", "planned-with-suffix-cache"])
def test_a_planned_round_reads_the_device_once_plus_the_committed_ids(monkeypatch, tmp_path, suffix):
    """draft_plan="auto" on an accelerator: the planned length is drafted without a read and cut once at the
    round's end; the suffix cache (host-side) adds one read of the newly committed ids per round."""
    from test_planner import flat_costs

    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: flat_costs())
    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, "dynaspec", draft_plan="auto", suffix_cache_num_tokens=suffix)
    counter = HostSyncCounter()
    _count_inside(monkeypatch, counter, EagleCandidateGenerator, "get_candidates", "update_candidate_strategy")
    input_ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(0))
    with accelerator_paths_on_cpu():
        output = assisted_generate(target, assistant, input_ids, max_new_tokens=24)
    assert torch.equal(output, plain_generate(target, input_ids, max_new_tokens=24))
    rounds = assistant.stats.verify_passes
    assert rounds >= 5 and assistant.stats.passes_by_source.get("drafter", 0) > 0
    # the cut: at most one per round; the suffix cache: the prefill's token, then each round's committed ids
    assert counter.count <= rounds + (rounds + 1 if suffix else 0), counter.events[:6]


@pytest.mark.parametrize("strategy", HEADS)
def test_tree_drafting_never_reads_the_device_and_a_round_at_most_twice(monkeypatch, tmp_path, strategy):
    """Drafting a tree: no sync. The whole round adds the accepted path (one read) and the stopping criteria of
    the committed tokens (one read for all of them)."""
    target = one_layer_target("llama")
    assistant = _assistant(tmp_path, target, strategy)
    drafting, whole = HostSyncCounter(), HostSyncCounter()
    _count_inside(monkeypatch, drafting, TreeDraftSession, "draft_tree")
    input_ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(1))

    def generate():
        return target.generate(input_ids, attention_mask=torch.ones_like(input_ids), custom_generate=speculative_generate, trees=True,
                               drafter=assistant, max_new_tokens=24, tree_top_k=3, tree_depth=3, tree_total_tokens=8)

    with accelerator_paths_on_cpu():
        generate()  # builds the runtime head once per assistant and options (not a per-round cost)
        drafting.events.clear()
        with whole:
            output = generate()
    assert torch.equal(output, plain_generate(target, input_ids, max_new_tokens=24))
    rounds = assistant.stats.verify_passes
    assert drafting.count == 0, drafting.events[:6]
    ours = [event for event in whole.events if event[1].startswith("hf_dynaspec/")]
    # Once per call, before the prefill: the prompt's smallest and largest id (refused outside the vocabulary), and
    # the prompts' lengths with the left-padding check (public_loop.check_batch).
    prompt_checks = [event for event in ours if event[1].startswith("hf_dynaspec/generation/checks.py")]
    batch_checks = [event for event in ours if "misplaced" in event[1]]
    assert len(prompt_checks) == 1 and len(batch_checks) == 1, (prompt_checks, batch_checks)
    ours = [event for event in ours if event not in prompt_checks + batch_checks]
    assert len(ours) <= 2 * rounds + 1, ours[:8]  # + 1: the prefill's stopping check


def test_the_counter_sees_the_cpu_form_of_the_shortlist(tmp_path):
    """The host-friendly DynaSpec head (router choice read as a list on every step) must count: a counter that
    saw nothing there would pass every budget above."""
    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, "dynaspec")
    input_ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(0))
    with HostSyncCounter() as counter:
        assisted_generate(target, assistant, input_ids, max_new_tokens=12)
    culprits = {culprit for _, culprit in counter.events}
    assert any("drafting/selector.py" in c for c in culprits), culprits


def test_deferred_confidence_stop_drafts_what_the_eager_stop_drafts(tmp_path):
    """The accelerator form drafts every position and cuts once at the end; the CPU form stops at once. Both
    must hand the verifier the same tokens, round by round."""
    target = one_layer_target("llama")
    assistant = _assistant(tmp_path, target, "dynaspec", assistant_confidence_threshold=0.08)
    drafts = {}
    for deferred in (False, True):
        seen = []
        original = ChainDraftSession.draft

        def recording(self, *args, original=original, seen=seen, **kwargs):
            draft = original(self, *args, **kwargs)
            seen.append(draft.token_ids.tolist())
            return draft

        ChainDraftSession.draft = recording
        try:
            for seed in (2, 3, 4):
                input_ids = torch.randint(0, 97, (1, 9), generator=torch.Generator().manual_seed(seed))
                with accelerator_paths_on_cpu() if deferred else contextlib.nullcontext():
                    assisted_generate(target, assistant, input_ids, max_new_tokens=30)
                seen.append(None)  # the end of a call: its last round may stop at max_new_tokens instead
        finally:
            ChainDraftSession.draft = original
        drafts[deferred] = seen
    assert drafts[True] == drafts[False]
    lengths = [len(d[0]) for d, after in zip(drafts[True], drafts[True][1:]) if d is not None and after is not None]
    assert {0, 4} <= set(lengths) and set(lengths) & {1, 2, 3}, lengths  # cut at once, midway, and not at all
