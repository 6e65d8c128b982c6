"""The captured K-token draft (hf_dynaspec.drafting.captured): one graph, no breaks, no recompiles, the same drafts.

Run on the CPU in the accelerator form (`accelerator_paths_on_cpu`: DynaSpec's device-side row ids), which is the
form a GPU captures. `torch.compile` goes through a counting backend that runs the traced graph as it is: what is
tested is dynamo's capture (fullgraph: any graph break raises; every compilation counted), not inductor's code.
"""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, assisted_generate, imitating_assistant, one_layer_target, plain_generate
from test_shortlists import add_shortlists

import hf_dynaspec.drafting.captured as captured
from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu

HEADS = ["full", "frspec", "dynaspec"]


def _assistant(tmp_path, target, strategy: str, **options):
    torch.manual_seed(0)
    assistant = add_shortlists(imitating_assistant(target, noise=0.3, num_assistant_tokens=4), target)
    assistant.generation_config.shortlist_rows = [60, 40, 12]  # three budgets: one graph still (K unrolled)
    assistant.save_pretrained(tmp_path)
    return DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, draft_plan="fixed",
                                             prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0, **options)


class CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands it and runs each as traced."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, graph_module, example_inputs):
        self.graphs += 1
        return graph_module.forward


def _recorded_drafts(monkeypatch) -> list:
    drafts = []
    propose = ChainDraftSession.draft

    def recording(self, *args, **kwargs):
        draft = propose(self, *args, **kwargs)
        drafts.append(draft.token_ids.tolist())
        return draft

    monkeypatch.setattr(ChainDraftSession, "draft", recording)
    return drafts


@pytest.mark.parametrize("strategy", HEADS)
def test_the_k_step_draft_compiles_whole_once_for_every_round(monkeypatch, tmp_path, strategy):
    """The issue-63 bar: fullgraph=True (a graph break raises), three rounds of K = 4 (positions with three row
    budgets, a context growing by a different accepted count each round): one compilation, and the stance
    "fail_on_recompile" after the first round turns any recompilation into an error."""
    torch._dynamo.reset()
    backend = CountingBackend()
    monkeypatch.setattr(captured, "BACKEND", backend)
    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, strategy, draft_capture="compile")
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, VOCAB, (1, 9), generator=generator)
    features = torch.randn(1, 40, 32, generator=generator)
    with accelerator_paths_on_cpu():
        from hf_dynaspec.drafting.runtime import captured_draft, runtime_head

        head = runtime_head(assistant, assistant.generation_config)
        session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head,
                                    captured=captured_draft(assistant, assistant.generation_config, head))
        eager = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head)
        for round_index, accepted in enumerate((2, 0, 3)):
            with torch.compiler.set_stance("fail_on_recompile" if round_index else "default"):
                draft = session.draft(context, features, 4)
            assert torch.equal(draft.token_ids, eager.draft(context, features, 4).token_ids)
            assert draft.token_ids.shape == (1, 4) and backend.graphs == 1
            # The target accepts `accepted` tokens and adds its own: the next round starts that much further on.
            context = torch.cat([context, draft.token_ids[:, :accepted], torch.tensor([[round_index + 5]])], dim=1)


def test_the_one_launch_kernel_traces_as_one_call_in_the_compiled_draft(monkeypatch, tmp_path):
    """The head a CUDA step runs (`torch.ops.hf_dynaspec.ranked_head`: the Triton kernel, here under the
    interpreter) inside the compiled draft: fullgraph, one compilation over three rounds, and the tokens of the
    step-by-step draft through the torch reference head."""
    pytest.importorskip("triton")
    import hf_dynaspec.drafting.selector as selector
    from hf_dynaspec.kernels.shortlist_head import dispatch

    torch._dynamo.reset()
    backend = CountingBackend()
    monkeypatch.setattr(captured, "BACKEND", backend)
    target = one_layer_target("qwen2")
    generator = torch.Generator().manual_seed(2)
    context = torch.randint(0, VOCAB, (1, 9), generator=generator)
    features = torch.randn(1, 40, 32, generator=generator)
    with accelerator_paths_on_cpu():
        from hf_dynaspec.drafting.runtime import captured_draft, runtime_head

        reference = _assistant(tmp_path / "reference", target, "dynaspec")  # the same weights (one seed)
        eager = ChainDraftSession(reference.drafter, VOCAB, do_sample=False,
                                  head=runtime_head(reference, reference.generation_config))
        monkeypatch.setattr(selector, "ranked_head_for", lambda weight: dispatch._triton_ranked_head)
        assistant = _assistant(tmp_path / "kernel", target, "dynaspec", draft_capture="compile")
        head = runtime_head(assistant, assistant.generation_config)
        assert head.rows._head is dispatch._triton_ranked_head
        session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head,
                                    captured=captured_draft(assistant, assistant.generation_config, head))
        for round_index in range(3):
            with torch.compiler.set_stance("fail_on_recompile" if round_index else "default"):
                draft = session.draft(context, features, 4)
            assert torch.equal(draft.token_ids, eager.draft(context, features, 4).token_ids)
            assert backend.graphs == 1
            context = torch.cat([context, draft.token_ids[:, :round_index + 1]], dim=1)


@pytest.mark.parametrize("strategy", HEADS)
def test_generate_with_a_compiled_draft_compiles_each_length_once(monkeypatch, tmp_path, strategy):
    """Through generate(): rounds of K = 4 and the shorter rounds before max_new_tokens (drafted as powers of two
    and cut): at most one graph per length bucket (1, 2, 4), none recompiled by a second call; output exact."""
    torch._dynamo.reset()
    backend = CountingBackend()
    monkeypatch.setattr(captured, "BACKEND", backend)
    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, strategy, draft_capture="compile")
    drafts = _recorded_drafts(monkeypatch)
    prompt = torch.randint(0, VOCAB, (1, 9), generator=torch.Generator().manual_seed(0))
    with accelerator_paths_on_cpu():
        first = assisted_generate(target, assistant, prompt, max_new_tokens=24)
        compiled = backend.graphs
        with torch.compiler.set_stance("fail_on_recompile"):
            again = assisted_generate(target, assistant, prompt, max_new_tokens=24)
    assert 1 <= compiled <= 3 and backend.graphs == compiled
    assert sum(len(d[0]) == 4 for d in drafts) >= 6  # three rounds of K = 4 per call at least
    assert torch.equal(first, plain_generate(target, prompt, max_new_tokens=24)) and torch.equal(first, again)


@pytest.mark.parametrize("strategy", HEADS)
@pytest.mark.parametrize("confidence", [0.0, 0.05, 0.35], ids=["no-threshold", "confidence-stop", "cutting-stop"])
def test_captured_drafts_are_the_step_by_step_drafts(monkeypatch, tmp_path, strategy, confidence):
    """Eager drafting and the fixed-shape function (uncompiled) propose the same tokens round by round, through a
    cache grown past its first capacity (256 positions), with the confidence stop cutting at the end; the rows
    scored (the statistics) count only the positions kept. At 0.35 the stop is checked to have cut a captured
    draft short."""
    target = one_layer_target("qwen2")
    prompt = torch.randint(0, VOCAB, (1, 250), generator=torch.Generator().manual_seed(1))
    runs = {}
    cuts = []
    deferred_cut = ChainDraftSession._deferred_cut
    for mode in ("off", "eager"):
        assistant = _assistant(tmp_path / mode, target, strategy, draft_capture=mode,
                               assistant_confidence_threshold=confidence)
        drafts = _recorded_drafts(monkeypatch)
        if mode == "eager":
            monkeypatch.setattr(ChainDraftSession, "_deferred_cut", staticmethod(
                lambda *args: cuts.append((result := deferred_cut(*args))[0] < args[2]) or result))
        with accelerator_paths_on_cpu():
            output = assisted_generate(target, assistant, prompt, max_new_tokens=20)
        monkeypatch.undo()
        runs[mode] = (output, drafts, assistant.stats.shortlist_rows)
    if confidence >= 0.3:
        assert any(cuts), "no captured draft was cut short: the test checked nothing"
    assert torch.equal(runs["eager"][0], plain_generate(target, prompt, max_new_tokens=20))
    assert torch.equal(runs["eager"][0], runs["off"][0])
    assert runs["eager"][1] == runs["off"][1] and len(runs["off"][1]) >= 4  # every round's draft
    assert runs["eager"][2] == runs["off"][2]  # the rows scored, summed over the call


def test_the_captured_draft_is_used_only_where_it_applies(tmp_path):
    """Sampling, logits processors, EAGLE-3's own head and DynaSpec's CPU blocks draft step by step."""
    from hf_dynaspec.drafting.runtime import captured_draft, runtime_head

    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, "dynaspec", draft_capture="eager")
    options = assistant.generation_config
    assert captured_draft(assistant, options, runtime_head(assistant, options)) is None  # CPU blocks
    with accelerator_paths_on_cpu():
        head = runtime_head(assistant, options)
        draft = captured_draft(assistant, options, head)
        assert draft is not None and captured_draft(assistant, options, head) is draft  # kept with the assistant
        session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=True, head=head, captured=draft)
        assert session.captured is None
        session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head, captured=draft,
                                    logits_processor=[lambda ids, scores: scores])
        assert session.captured is None
    with pytest.raises(ValueError, match="draft_capture"):
        DynaSpecAssistant.from_target(target, draft_capture="always")


@pytest.mark.parametrize("strategy", ["full", "dynaspec"])
def test_a_captured_step_attends_to_its_own_slot_as_the_eager_step_does(monkeypatch, tmp_path, strategy):
    """The drafter's cache entries a captured K-step draft writes equal the eager loop's; and the step's own slot
    matters here: a mask hiding it (a plausible off-by-one) writes different entries from the second step on."""
    from hf_dynaspec.drafting.runtime import runtime_head

    target = one_layer_target("qwen2")
    assistant = _assistant(tmp_path, target, strategy)
    generator = torch.Generator().manual_seed(0)
    context = torch.randint(0, VOCAB, (1, 3), generator=generator)  # few slots: the own one weighs more
    features = torch.randn(1, 40, 32, generator=generator)

    def propose(captured_draft):
        session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head, captured=captured_draft)
        draft = session.draft(context, features, 4)
        keys, values = session.cache.buffers()
        return draft.token_ids, torch.cat([keys, values])[..., : session.cache.length, :].clone()

    with accelerator_paths_on_cpu():
        head = runtime_head(assistant, assistant.generation_config)
        eager_tokens, eager_entries = propose(None)
        tokens, entries = propose(captured.CapturedChainDraft(assistant.drafter, head, compile=False))
        assert torch.equal(tokens, eager_tokens)
        monkeypatch.setattr(captured, "step_mask", lambda slots, position: (slots < position)[None, None, None, :])
        _, hidden_own = propose(captured.CapturedChainDraft(assistant.drafter, head, compile=False))
    same, own = (entries - eager_entries).abs().max().item(), (hidden_own - eager_entries).abs().max().item()
    assert same <= 1e-6 and own > 1e-5 > 10 * same  # equal to the eager entries; the own slot matters here
