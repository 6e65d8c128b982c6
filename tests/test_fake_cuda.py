"""Every step a round takes on a GPU, run on a fake CUDA device (tests/fake_cuda.py): no device mix anywhere,
no host read inside a draft step, and the few reads per round that remain by design named and counted.

Models are built on the CPU (load-time work reads values there, as on a GPU machine before the move), then
moved with the package's own `.to("cuda")` / `attach` paths. Values are not checked here (fake tensors have
none): the CPU suite runs the same functions for exactness.
"""

from __future__ import annotations

import pytest
import torch
from checkpoint_replicas import eagle3_checkpoint
from conftest import VOCAB, imitating_assistant, one_layer_target, tiny_target
from fake_cuda import FakeCuda, on_fake_cuda
from test_shortlists import add_shortlists
from torch.utils._python_dispatch import TorchDispatchMode

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.planning.core import PlannerMemory, RoundCosts
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.drafting.proposers.drafter import ChainProposer, ConfidenceRule
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation.attachment import ensure_attached
from hf_dynaspec.generation.block_verify import block_verify
from hf_dynaspec.generation.candidate_generator import EagleCandidateGenerator

STRATEGIES = ["full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed"]
COSTS = RoundCosts(verify_seconds=[0.0] + [1.0 + 0.05 * n for n in range(1, 18)], consume_seconds=0.1,
                   first_draft_seconds=0.1, draft_step_seconds=0.1)


def _pair(strategy: str = "dynaspec", family: str = "qwen2", **options):
    """A target and its assistant (all shortlist strategies built), attached on the CPU."""
    target = one_layer_target(family)
    torch.manual_seed(0)
    assistant = add_shortlists(imitating_assistant(target, noise=0.3, num_assistant_tokens=4), target)
    assistant.generation_config.max_shortlist_size = 60  # the size cap runs too
    assistant.generation_config.shortlist = strategy
    for name, value in options.items():
        setattr(assistant.generation_config, name, value)
    assistant.attach(target)
    return target, assistant


def _to_fake_cuda(cuda: FakeCuda, target, assistant):
    """`model.to("cuda")` after attach, then what generate() does first: follow the target."""
    target.to("cuda")
    ensure_attached(assistant, target)
    cuda.events.clear()


def _verified(target, length: int = 9):
    """Context ids `[1, L]` and the target's last hidden states for them, on the target's device."""
    input_ids = torch.randint(0, VOCAB, (1, length), device="cuda")
    return input_ids, target(input_ids, output_hidden_states=True).hidden_states[-1]


def _session(assistant, head, do_sample=False, **kwargs):
    return ChainDraftSession(assistant.drafter, VOCAB, do_sample=do_sample, head=head, **kwargs)


# -- attach, move, heads --------------------------------------------------------------------------------------
def test_attach_moves_every_tensor_a_draft_reads():
    target, assistant = _pair()
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        tensors = dict(assistant.named_parameters()) | dict(assistant.named_buffers())
        off = [name for name, t in tensors.items() if not on_fake_cuda(t)]
        assert not off, f"left on the host: {off}"
        parts = assistant.drafter.target
        assert all(on_fake_cuda(p) for m in (parts.embed_tokens, parts.final_norm, parts.lm_head) for p in m.parameters())
        # The index structures are built from host copies taken before the move, not read back from the device.
        host = assistant.shortlists.host_buffers()
        assert all(t.device.type == "cpu" and not on_fake_cuda(t) for t in host.values())
        assert cuda.events.reads == []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_every_runtime_head_builds_on_the_device_without_reading_it(strategy):
    target, assistant = _pair(strategy)
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)  # N1: the row table mixed devices here
        assert cuda.events.reads == [], "a head build read the device"
        for value in vars(head).values():
            if isinstance(value, torch.Tensor):
                assert on_fake_cuda(value), f"{type(head).__name__} keeps a host tensor for the draft step"
        if strategy.startswith("dynaspec"):
            rows = head.rows
            assert all(on_fake_cuda(t) for t in (rows.token_order, rows.sizes, rows.starts, rows.always_ids))


class DeviceOps(TorchDispatchMode):
    """The device ops a block of code issues: every ATen call that is not a view (a view launches nothing)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and not str(func).startswith("prim.") and str(func) != "aten.detach.default":
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def test_a_dynaspec_step_is_the_router_one_sort_and_one_launch():
    """Issue 63, item 2: from the router's scores to the draft token and its probability, an eager DynaSpec step
    at batch 1 issues one sort and one kernel (the row ids worked out in the kernel, the tiles combined by its
    last program). Before (54ed5dc), 22 ops after the router: the sort, the ids in 17, the head (two launches),
    the token and the probability in three more."""
    pytest.importorskip("triton")
    target, assistant = _pair("dynaspec")
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        token_embed, hidden_in, hidden = (torch.randn(1, 32, device="cuda") for _ in range(3))
        with DeviceOps() as router:
            head.choose_clusters(token_embed, hidden_in, 0, inline=True)
        with DeviceOps() as step:
            out = head.scores(hidden, head.choose_clusters(token_embed, hidden_in, 0, inline=True))
            token, top = out.argmax_token_ids, out.top_probability
        assert step.ops == router.ops + ["aten.sort.stable", "hf_dynaspec.ranked_head.default"], step.ops
        assert on_fake_cuda(token) and on_fake_cuda(top) and token.shape == top.shape == (1,)
        assert cuda.events.reads == []


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_precision_pair_moved_together_drafts_on_the_device(dtype):
    """`model.to(dtype)` then `model.to("cuda")` after attach: the assistant follows both (fp16 is what a T4
    runs). (A dtype cast of modules already on the fake device is not expressible here: PyTorch swaps fake
    parameters in place, which fails; the CPU suite checks casts.)"""
    target, assistant = _pair()
    target.to(dtype)
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        assert head.head_weight.dtype == dtype and assistant.drafter.fc.weight.dtype == dtype
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            draft = _session(assistant, head, do_sample=True).draft(input_ids, hidden, 3)
        assert events.reads == [] and on_fake_cuda(draft.token_ids) and draft.logits.dtype == torch.float32


# -- chain drafting ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_chain_draft_of_k_tokens_never_reads_the_device(strategy, do_sample):
    target, assistant = _pair(strategy)
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        session = _session(assistant, head, do_sample=do_sample)
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            draft = session.draft(input_ids, hidden, 4)
        assert events.reads == [] and events.uploads == []
        assert draft.token_ids.shape == (1, 4) and on_fake_cuda(draft.token_ids)
        if do_sample:
            assert draft.logits.shape == (1, 4, VOCAB) and on_fake_cuda(draft.logits)
        # The next round: the drafter's cache drops the speculative entries and absorbs the verified positions.
        accepted = torch.cat([input_ids, draft.token_ids[:, :2]], dim=1)
        hidden = target(accepted, output_hidden_states=True).hidden_states[-1][:, input_ids.shape[1] - 1:]
        with cuda.counting() as events:
            session.draft(accepted, hidden, 4)
        assert events.reads == [] and events.uploads == []
        assert session.num_verified_pairs == accepted.shape[1] - 1


@pytest.mark.parametrize("strategy", ["full", "frspec", "dynaspec"])
def test_the_captured_draft_never_reads_the_device_and_grows_its_cache_first(strategy):
    """The fixed-shape K-token draft (draft_capture, drafting/captured.py) on the device: no read and no upload in
    a round, its position a device tensor, the drafter cache reserved before the call (a round that crosses the
    first capacity of 256 positions), the cache's length set on the host from what the round asked for."""
    from hf_dynaspec.drafting.runtime import captured_draft

    target, assistant = _pair(strategy, draft_capture="eager")
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        captured = captured_draft(assistant, assistant.generation_config, head)
        assert captured is not None
        session = _session(assistant, head, captured=captured)
        input_ids, hidden = _verified(target, length=256)
        with cuda.counting() as events:
            draft = session.draft(input_ids, hidden, 4)
        assert events.reads == [] and events.uploads == []
        assert draft.token_ids.shape == (1, 4) and on_fake_cuda(draft.token_ids)
        assert session.cache.length == 255 + 3 and session.cache.buffers()[0].shape[-2] >= 258
        assert all(ids is None or on_fake_cuda(ids) for ids in draft.shortlists)


def test_a_chain_draft_under_a_logits_processor_never_reads_the_device():
    from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

    target, assistant = _pair()
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3)])
        session = _session(assistant, runtime_head(assistant, assistant.generation_config),
                           logits_processor=processors)
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            draft = session.draft(input_ids, hidden, 4)
        assert events.reads == [] and draft.token_ids.shape == (1, 4)


@pytest.mark.parametrize("stop", ["confidence", "planner"])
def test_deferred_host_decisions_read_the_device_once_per_round(stop):
    """The confidence stop and the planner's cut read each position's top probability: on a device all of
    them at once, at the round's end (ChainDraftSession._deferred_cut), never per step."""
    target, assistant = _pair()
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        confidence = 0.3 if stop == "confidence" else 0.0
        session = _session(assistant, head, confidence=confidence)
        rule = ConfidenceRule(SpeculationPlanner(COSTS, PlannerMemory()), 6)
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            session.draft(input_ids, hidden, 6, rule=rule if stop == "planner" else None)
        assert len(events.reads) == 1 and "_deferred_cut" in events.reads[0], events.reads


def test_eagle3_drafts_through_its_own_head_on_the_device(tmp_path):
    target = tiny_target("llama")
    eagle3_checkpoint(tmp_path / "e3", target)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path / "e3", target=target, shortlist="full")
    target.config.output_hidden_states = False
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        assert runtime_head(assistant, assistant.generation_config) is None
        session = _session(assistant, None, do_sample=True)
        input_ids = torch.randint(0, VOCAB, (1, 9), device="cuda")
        states = target(input_ids, output_hidden_states=True).hidden_states
        hidden = assistant.drafter.select_target_hidden(states)
        with cuda.counting() as events:
            draft = session.draft(input_ids, hidden, 3)
        assert events.reads == [] and on_fake_cuda(draft.token_ids) and on_fake_cuda(draft.logits)


# -- trees ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["full", "frspec", "dynaspec"])
def test_tree_drafting_and_its_masks_stay_on_the_device(strategy):
    target, assistant = _pair(strategy)
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        session = TreeDraftSession(assistant.drafter, VOCAB, top_k=3, depth=4, total_tokens=10, head=head)
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            tree = session.draft_tree(input_ids, hidden)
            visible = tree.ancestor_matrix()  # what the loop's mask is built from (batched_loop._verify)
        assert events.reads == [] and events.uploads == []
        assert tree.token_ids.shape == (11,) and visible.shape == (11, 11)
        assert all(on_fake_cuda(t) for t in (tree.token_ids, tree.parents, tree.depths, visible))


@pytest.mark.parametrize("strategy", ["full", "dynaspec"])
def test_a_planned_tree_round_never_reads_the_device(strategy):
    """tree_generate's planned round choosing a tree: the plan reads host tables only, the tree grows on the chain
    session's cache on the device."""
    from test_planned_trees import SHAPE, flat_tree_costs, trees_learnt

    from hf_dynaspec.drafting.lookup import LookupSources
    from hf_dynaspec.drafting.proposers.drafter import TreeProposer
    from hf_dynaspec.drafting.round import SpeculationRound
    from hf_dynaspec.stats import start_stats

    target, assistant = _pair(strategy)
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        chain = _session(assistant, head)
        trees = TreeDraftSession(assistant.drafter, VOCAB, top_k=SHAPE.top_k, depth=SHAPE.max_depth,
                                 total_tokens=SHAPE.total_tokens, head=head, chain=chain)
        planner = SpeculationPlanner(flat_tree_costs(), trees_learnt(PlannerMemory()))
        speculation = SpeculationRound([ChainProposer(chain, 4), TreeProposer(trees, SHAPE)], planner,
                                       start_stats(assistant), assistant.drafter, LookupSources(False))
        input_ids, hidden = _verified(target)
        with cuda.counting() as events:
            draft = speculation.propose(input_ids, hidden, room=20)
        assert events.reads == [] and events.uploads == []
        assert draft.plan.source == "tree" and draft.tree is not None
        assert draft.token_ids.shape == (1, SHAPE.total_tokens) and on_fake_cuda(draft.tree.parents)


@pytest.mark.parametrize("draft", ["chain", "tree", "cps"])
@pytest.mark.parametrize("shortlist", [False, True], ids=["full-heads", "shortlisted-heads"])
def test_a_medusa_round_stays_on_the_device(draft, shortlist):
    """A Medusa chain reads nothing from the device and uploads nothing; a lattice round (tree, CPS) reads its
    lattice once and uploads the tree it chose once."""
    from hf_dynaspec.generation.medusa import lattice_round
    from hf_dynaspec.modeling.medusa import MedusaAssistant
    from hf_dynaspec.modeling.medusa_options import MedusaGenerationConfig
    from hf_dynaspec.stats import DraftStats

    target = tiny_target("qwen2")
    heads = MedusaAssistant.from_target(target, num_heads=3)
    heads.config.frequency_list_size = 40
    heads.frequency_ids = torch.arange(40)
    with FakeCuda() as cuda:
        target.to("cuda")
        heads.attach(target)
        assert all(on_fake_cuda(t) for t in heads.state_dict().values())
        options = MedusaGenerationConfig(lattice_draft=draft, shortlist="frspec" if shortlist else "full",
                                         tree_total_tokens=6, cps_lambda=0.5)
        drafts = lattice_round(heads, options, heads.num_positions, None, DraftStats(), VOCAB)
        input_ids, hidden = _verified(target)
        drafts.propose(input_ids, hidden, room=10)  # the n-gram scorer's first read of the prompt
        with cuda.counting() as events:
            tree = drafts.propose(input_ids, hidden, room=10).tree
        assert len(events.reads) == (0 if draft == "chain" else 1), events.reads
        # An upload is a stream sync on CUDA too: a lattice tree (chosen on the host) goes up in one copy.
        assert len(events.uploads) == (0 if draft == "chain" else 1), events.uploads
        assert on_fake_cuda(tree.token_ids) and on_fake_cuda(tree.parents)


# -- verification -----------------------------------------------------------------------------------------------
# Greedy: one read for the path, one more (the tree's depths) under processors. Sampled (recursive rejection over
# each node's children, one device step per depth): one read, however many siblings it tries and nodes it accepts.
@pytest.mark.parametrize(("do_sample", "processed", "reads"), [(False, False, 1), (False, True, 2), (True, False, 1),
                                                               (True, True, 1)],
                         ids=["greedy", "greedy-repetition", "sampled", "sampled-top-k-top-p-repetition"])
def test_tree_verification_reads_the_device_once_per_round(do_sample, processed, reads):
    """The accepted path of a verified tree is walked on the device: never a read per accepted node or tried
    child, with warpers and penalties too."""
    from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor, TopKLogitsWarper, TopPLogitsWarper

    from hf_dynaspec.generation.tree_verify import accept_path

    target, assistant = _pair()
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        session = TreeDraftSession(assistant.drafter, VOCAB, top_k=3, depth=4, total_tokens=10,
                                   head=runtime_head(assistant, assistant.generation_config))
        input_ids, hidden = _verified(target)
        tree = session.draft_tree(input_ids, hidden)
        logits = torch.randn(len(tree), VOCAB, device="cuda")
        warpers = [TopKLogitsWarper(8), TopPLogitsWarper(0.9)] if do_sample else []
        processors = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3), *warpers]) if processed else None
        with cuda.counting() as events:
            path = accept_path(tree, logits, input_ids, processors, do_sample=do_sample)
        assert len(events.reads) == reads, events.reads
        assert events.uploads == [] and on_fake_cuda(path.kept_index) and on_fake_cuda(path.new_tokens)


def test_block_verification_reads_the_device_once():
    with FakeCuda() as cuda:
        candidates = torch.randint(0, VOCAB, (1, 12), device="cuda")
        draft_logits = torch.randn(1, 4, VOCAB, device="cuda")
        target_logits = torch.randn(1, 5, VOCAB, device="cuda")
        with cuda.counting() as events:
            valid, accepted = block_verify(candidates, draft_logits, 4, target_logits)
        # The number of accepted tokens decides the output's length: transformers' own rule reads it too.
        assert len(events.reads) == 1 and "block_verify" in events.reads[0], events.reads
        assert on_fake_cuda(valid) and on_fake_cuda(accepted)


# -- a whole round through the candidate generator ---------------------------------------------------------------
def _generator(assistant, target, input_ids, monkeypatch):
    """The call's round as the builder makes it (the planner's costs and tables fixed, no captured draft: the
    reads of the step-by-step round are named), begun on the prompt (a read of the prompt, once per call)."""
    from hf_dynaspec.generation import rounds

    monkeypatch.setattr(rounds, "round_costs", lambda *a, **k: COSTS)
    monkeypatch.setattr(rounds, "planner_memory", lambda *a, **k: PlannerMemory())
    monkeypatch.setattr(rounds, "captured_draft", lambda *a, **k: None)
    speculation = rounds.build_round(target, assistant, assistant.generation_config, input_ids, None,
                                     do_sample=False, draws_drafts=False)
    return EagleCandidateGenerator(assistant, speculation, max_length=64, longest_draft=6)


class _Outputs:
    def __init__(self, hidden_states):
        self.hidden_states = hidden_states


@pytest.mark.parametrize("planned,lookups,suffix", [(False, True, True), (False, True, False), (True, True, True),
                                                    (True, False, False)],
                         ids=["fixed", "fixed-prompt-lookup-only", "auto", "auto-drafter-only"])
def test_a_round_names_its_reads(planned, lookups, suffix, monkeypatch):
    """One round as transformers drives it (get_candidates, then update_candidate_strategy), with prompt
    lookup and the suffix cache on or off: the reads that remain are named here, and nothing else reads.
    (Fake ids read back as placeholders, so which source the planner picks is whatever they make it pick; the
    drafter-only case pins the drafter.)"""
    target, assistant = _pair(prompt_lookup_num_tokens=5 if lookups else 0,
                              suffix_cache_num_tokens=8 if suffix else 0,
                              draft_plan="auto" if planned else "fixed")
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        input_ids = torch.randint(0, VOCAB, (1, 9), device="cuda")
        generator = _generator(assistant, target, input_ids, monkeypatch)
        states = target(input_ids, output_hidden_states=True).hidden_states
        generator.get_candidates(input_ids, model_outputs=_Outputs(states), is_first_iteration=True)
        committed = torch.cat([input_ids, torch.randint(0, VOCAB, (1, 1), device="cuda")], dim=1)
        states = target(committed, output_hidden_states=True).hidden_states
        with cuda.counting() as events:
            candidates, logits = generator.get_candidates(committed, model_outputs=_Outputs(states))
            generator.update_candidate_strategy(torch.cat([committed, candidates[:, 10:11]], dim=1), None, 0)
        sites = sorted(site.split(":")[0] + ":" + site.split("(")[-1].rstrip(")") for site in events.reads)
        expected = []
        if lookups:  # the ids committed since the last round, for the host copy the lookups search
            expected += ["drafting/lookup.py:read"] * 2
        if planned and generator.draft.plan.source == "drafter":
            expected.append("drafting/chain.py:_deferred_cut")  # the planner's cut of the draft
        assert sites == sorted(expected), events.reads
        if not lookups:
            assert generator.draft.plan.source == "drafter"
        assert on_fake_cuda(candidates)
        # Looked-up drafts are handed to the device once per round (one upload of a few ids).
        assert len(events.uploads) <= 1


# -- training ---------------------------------------------------------------------------------------------------
def test_training_moves_only_the_borrowed_parts_of_the_target():
    from recipes.train_drafter import place_borrowed_parts

    target = tiny_target("qwen2")
    assistant = DynaSpecAssistant.from_target(target)  # (its fingerprint of the target read on the CPU)
    with FakeCuda():
        place_borrowed_parts(target, torch.device("cuda"))
        parts = (target.get_input_embeddings(), target.get_decoder().norm, target.get_output_embeddings())
        assert all(on_fake_cuda(p) for m in parts for p in m.parameters())
        assert all(p.device.type == "cpu" for p in target.get_decoder().layers.parameters())
        assistant.attach(target, allow_different_target=True)  # attaches where the head is
        assert on_fake_cuda(assistant.drafter.fc.weight)


def test_feature_building_runs_the_target_on_the_device_and_brings_the_shard_home():
    from recipes.build_features import shard_tensors

    target = tiny_target("qwen2")
    generator = torch.Generator().manual_seed(0)
    tokenized = [(torch.randint(0, VOCAB, (12 + i,), generator=generator).tolist(), 4) for i in range(3)]
    with FakeCuda():
        target.to("cuda")
        tensors = shard_tensors(target, tokenized, 8, tokens_per_batch=64)
        # A shard is written to disk: every tensor comes back to the host (safetensors writes CPU tensors).
        assert all(t.device.type == "cpu" for t in tensors.values()), {k: t.device for k, t in tensors.items()}


# -- the router's side stream -----------------------------------------------------------------------------------
@pytest.mark.parametrize("enabled", ["1", "0"])
def test_the_side_stream_protects_its_inputs_and_has_a_switch(monkeypatch, enabled):
    monkeypatch.setenv("HF_DYNASPEC_SIDE_STREAM", enabled)
    target, assistant = _pair()
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        assert (head.side_stream.stream is not None) == (enabled == "1")
        before = cuda.events.recorded_streams
        head.choose_clusters(torch.randn(1, 32, device="cuda"), torch.randn(1, 32, device="cuda"), 0)
        # Both inputs recorded on the side stream, the output on the main one; nothing when the switch is off.
        assert cuda.events.recorded_streams - before == (3 if enabled == "1" else 0)


def test_a_batched_rounds_steps_stay_on_the_device():
    """The batched loop's verify forward (padded trees, per-row positions and masks), its compaction and the
    dropping of finished rows: every tensor on the device, nothing read back (the per-row acceptance reads as a
    single sequence's does, counted above)."""
    from transformers.cache_utils import DynamicCache
    from transformers.generation.logits_process import LogitsProcessorList

    from hf_dynaspec.drafting.contract import chain_tree
    from hf_dynaspec.generation.batched_loop import _compact, _keep, _prefill, _Row, _verify
    from hf_dynaspec.generation.static_round import TargetSlots
    from hf_dynaspec.modeling.medusa import MedusaAssistant

    target = tiny_target("qwen2")
    heads = MedusaAssistant.from_target(target, num_heads=2)
    with FakeCuda() as cuda:
        target.to("cuda")
        heads.attach(target)
        ids = torch.randint(0, VOCAB, (3, 7), device="cuda")
        mask = torch.ones(3, 7, dtype=torch.bool, device="cuda")
        mask[0, :2] = False
        rows = [_Row(b, padding, ids[b : b + 1], None, None) for b, padding in enumerate((2, 0, 0))]
        cache = TargetSlots(target, DynamicCache(), 0, static=False)
        valid, _, _ = _prefill(target, heads, rows, ids, mask, cache, [LogitsProcessorList()] * 3, False)
        trees = [chain_tree(row.ids[0, -1:], torch.randint(0, VOCAB, (n,), device="cuda"))
                 for row, n in zip(rows, (1, 3, 2))]
        with cuda.counting() as events:
            out = _verify(target, heads, rows, trees, valid, cache)
            valid = _compact(cache, valid, [torch.arange(k, device="cuda") for k in (1, 3, 2)])
        assert events.reads == [] and events.uploads == [], (events.reads, events.uploads)
        with cuda.counting() as events:
            kept_cache, valid = _keep(cache.cache, valid, rows, rows[1:])
        assert events.reads == [] and len(events.uploads) == 1, events.uploads  # the kept rows, once per device
        assert on_fake_cuda(out.logits) and on_fake_cuda(valid) and valid.shape == (2, 10)
        assert all(on_fake_cuda(layer.keys) and layer.keys.shape[0] == 2 for layer in kept_cache.layers)


def test_a_batched_round_reads_the_device_twice_whatever_its_rows():
    """Greedy rows without processors: every row's accepted path in one read, every row's stop checks in one more
    (not a read per row, as a loop over `accept_path` and the single-row commit would make)."""
    from transformers.generation.stopping_criteria import MaxLengthCriteria, StoppingCriteriaList

    from hf_dynaspec.drafting.contract import DraftTree, chain_tree
    from hf_dynaspec.generation.batched_loop import _accepted_paths, _Row, _stop_flags

    with FakeCuda() as cuda:
        for count in (1, 4):
            rows = [_Row(b, 0, torch.randint(0, VOCAB, (1, 6), device="cuda"), None, None) for b in range(count)]
            trees: list[DraftTree] = [chain_tree(row.sequence[0, -1:], torch.randint(0, VOCAB, (3,), device="cuda"))
                                      for row in rows]
            logits = torch.randn(count, 4, VOCAB, device="cuda")
            stopping = StoppingCriteriaList([MaxLengthCriteria(max_length=40)])
            with cuda.counting() as events:
                paths = _accepted_paths(rows, trees, logits, [[]] * count, do_sample=False)
                flags = _stop_flags(rows, paths, stopping)
            assert len(events.reads) == 2 and events.uploads == [], (count, events.reads, events.uploads)
            assert len(flags) == count and all(on_fake_cuda(path.new_tokens) for path in paths)


def test_dropping_a_finished_row_follows_each_layers_card():
    """A target split over two cards (device_map): the cache of its first layer on cuda:0, of its second on cuda:1.
    Dropping a finished row indexes each layer on its own card (an index on cuda:0 into cuda:1 raises on a GPU)."""
    from transformers.cache_utils import DynamicCache

    from hf_dynaspec.generation.batched_loop import _keep, _Row

    with FakeCuda():
        cache = DynamicCache()
        for layer, device in enumerate(("cuda:0", "cuda:1")):
            keys = torch.randn(3, 2, 5, 4, device=device)
            cache.update(keys, keys.clone(), layer)
        valid = torch.ones(3, 5, dtype=torch.bool, device="cuda:0")
        rows = [_Row(b, 0, None, None, None) for b in range(3)]
        cache, valid = _keep(cache, valid, rows, [rows[0], rows[2]])
        assert [layer.keys.device for layer in cache.layers] == [torch.device("cuda", 0), torch.device("cuda", 1)]
        assert all(layer.keys.shape[0] == 2 for layer in cache.layers) and valid.shape == (2, 5)


def test_the_harness_counts_reads_inside_ops_and_refuses_two_cards_in_one_op():
    """What a GPU would do that fake tensors alone do not show: multinomial's host reads (counted) and an index
    on another card than the tensor it indexes (raised)."""
    with FakeCuda() as cuda:
        probs = torch.rand(2, 5, device="cuda")
        with cuda.counting() as events:
            torch.multinomial(probs, 1)
        assert len(events.reads) == 1
    with pytest.raises(AssertionError, match="CUDA tensor met"):
        with FakeCuda():
            torch.randn(3, 4, device="cuda:1")[torch.zeros(2, dtype=torch.long, device="cuda:0")]


def test_timing_waits_for_every_card_a_model_spans(monkeypatch):
    """Calibration and the bench time a target split over cuda:0 and cuda:1 by waiting for both:
    `torch.cuda.synchronize()` alone waits for the current device, so a target on cuda:1 would be timed short."""
    from hf_dynaspec.bench import timer
    from hf_dynaspec.generation.costs import timing
    from hf_dynaspec.kernels.streams import devices_of

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4))
    with FakeCuda():
        model[0].to("cuda:0")
        model[1].to("cuda:1")
        waited = []
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
        timing.time_once(lambda: None, devices_of(model))
        assert sorted(map(str, waited)) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"], waited
        waited.clear()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        timer.time_once_ms(lambda: None)
        assert sorted(map(str, waited)) == ["cuda:0", "cuda:0", "cuda:1", "cuda:1"], waited


def test_a_diffusion_drafter_on_another_device_than_its_target():
    """The diffusion model on the GPU, the target on the CPU (or the reverse on a split machine): the context goes
    to the diffusion model's device, the lattice comes back to the target's; nothing mixes devices."""
    from test_diffusion_drafter import tiny_masked_lm

    from hf_dynaspec import DiffusionDrafter

    model = tiny_masked_lm(VOCAB)
    with FakeCuda():
        drafter = DiffusionDrafter(model.to("cuda"), mask_token_id=VOCAB - 1, block_size=4)
        input_ids = torch.randint(0, VOCAB, (1, 7))  # the target's, on the CPU
        logits, _ = drafter.lattice_logits(input_ids, torch.zeros(1, 7, 8), depth=3)
        assert logits.device.type == "cpu" and logits.shape == (3, VOCAB)


def test_dynaspecs_row_table_and_the_path_that_reads_it_stay_on_the_device():
    """The row table's every tensor (the column range a step slices too) is made on the cluster tables' device,
    and the torch path that reads them (`row_ids`, a shortlist's ids without scoring) runs there without a read."""
    target, assistant = _pair("dynaspec")
    with FakeCuda() as cuda:
        _to_fake_cuda(cuda, target, assistant)
        head = runtime_head(assistant, assistant.generation_config)
        tables = {name: value for name, value in vars(head.rows).items() if isinstance(value, torch.Tensor)}
        assert "_columns" in tables and all(on_fake_cuda(t) for t in tables.values()), \
            [name for name, t in tables.items() if not on_fake_cuda(t)]
        token_embed, hidden_in = (torch.randn(1, 32, device="cuda") for _ in range(2))
        ids = head.shortlist_ids(token_embed, hidden_in, 0)  # the indexed path: ranked_row_ids over the table
        assert on_fake_cuda(ids) and ids.shape == (head.budget.at(0) + len(head.always_ids),)
        assert cuda.events.reads == []
