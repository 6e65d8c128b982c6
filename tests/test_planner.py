"""draft_plan="auto": the planner's decisions from costs and acceptance, the calibration cache, and exactness of
planned rounds (greedy identical to generate(); sampled rounds enumerated exactly)."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate, random_assistant
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint
from plans import LookupCandidate, Plan, Planning
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors

from hf_dynaspec import chain_generate, tree_generate
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu
from hf_dynaspec.drafting.planning.core import PlannerMemory, RoundCosts
from hf_dynaspec.generation.costs import round_costs as calibration
from hf_dynaspec.generation.costs import store, timing, verify_costs

AUTO = dict(draft_plan="auto", suffix_cache_num_tokens=0, auto_max_assistant_tokens=4)


def flat_costs(max_tokens: int = 20) -> RoundCosts:
    """A machine where verifying many tokens costs what one does (AVX-512 BF16 CPUs, GPUs); cheap drafting."""
    return RoundCosts([0.0] + [1.0] * (max_tokens + 1), consume_seconds=0.01, first_draft_seconds=0.02,
                      draft_step_seconds=0.03)


def linear_costs(max_tokens: int = 20) -> RoundCosts:
    """A machine where each verified token costs most of a step (bf16 on AVX2 CPUs without the rows kernel)."""
    return RoundCosts([0.0] + [1.0 + 0.8 * (n - 1) for n in range(1, max_tokens + 2)], consume_seconds=0.01,
                      first_draft_seconds=0.02, draft_step_seconds=0.03)


def test_flat_verification_plans_long_chains_and_linear_none():
    # a = 0.5 everywhere (the prior): E(k) = 2 - 2^-k, and past 4 tokens a drafter step costs more than it adds.
    assert Planning(flat_costs(), PlannerMemory(), 8).plan_round([], room=100) == Plan("drafter", 4)
    assert Planning(linear_costs(), PlannerMemory(), 8).plan_round([], room=100).source == "none"
    assert Planning(flat_costs(), PlannerMemory(), 8).plan_round([], room=3).num_tokens == 3


def test_learnt_acceptance_moves_the_plan():
    """A drafter that is right 97% of the time pays even where each token costs most of a step; one that is always
    wrong does not pay even where verification is free; a lookup source that has been right wins the round."""
    good, bad = PlannerMemory(), PlannerMemory()
    for _ in range(200):
        for j in range(1, 9):
            good.position.record(j, True)
            good.position.record(j, torch.rand(1).item() < 0.95)
        bad.position.record(1, False)
    assert Planning(linear_costs(), good, 8).plan_round([], 100).source == "drafter"
    assert Planning(flat_costs(), bad, 8).plan_round([], 100).source == "none"
    lookup = LookupCandidate("suffix-shared", match_length=4, num_tokens=12)
    memory = PlannerMemory()
    planner = Planning(flat_costs(), memory, 8)
    for _ in range(50):
        planner.record(Plan("suffix-shared", 12, 4), num_drafted=12, num_accepted=12)
    # (50 rounds without a probe: the first plan is one, tests/test_planner_probes.py; then the lookup wins.)
    assert planner.plan_round([lookup], 100).probe
    assert planner.plan_round([lookup], 100) == Plan("suffix-shared", 12, 4)
    # A shorter match of the same source starts from the source's estimate (every match length together), then
    # learns its own: rejected there, it falls below the longer match's.
    assert memory.lookup.estimate(("suffix-shared", 2, 1)) == memory.lookup.pooled.estimate(("suffix-shared", 1)) > 0.9
    for _ in range(10):
        memory.lookup.record(("suffix-shared", 2, 1), False)
    assert memory.lookup.estimate(("suffix-shared", 2, 1)) < 0.5 < memory.lookup.estimate(("suffix-shared", 4, 1))


def test_confidence_decides_each_position():
    memory = PlannerMemory()
    flat = Planning(flat_costs(), memory, 8)
    linear = Planning(linear_costs(), memory, 8)
    assert flat.keep_position([0.9, 0.15]) and flat.draft_more([0.9, 0.9], room=100)
    assert not linear.keep_position([0.15]) and linear.keep_position([0.99])
    assert not flat.draft_more([0.9] * 8, room=100) and not flat.draft_more([0.9, 0.9], room=2)
    # Deferred form: the best prefix of what was drafted, every drafter step already paid.
    assert linear.cut([0.99, 0.99, 0.05, 0.99]) == 2 and flat.cut([0.99, 0.99, 0.05, 0.99]) == 4


def test_record_learns_only_the_positions_that_were_reached():
    memory = PlannerMemory()
    planner = Planning(flat_costs(), memory, 8)
    planner.record(Plan("drafter", 4, confidences=[0.95, 0.95, 0.15, 0.5]), num_drafted=4, num_accepted=1)
    assert memory.position.counts == {1: [1, 1], 2: [0, 1]}  # 3 and 4 were never verified
    assert memory.confidence.counts == {9: [1, 2]}
    planner.record(Plan("prompt-lookup", 3, 2), num_drafted=3, num_accepted=3)
    assert memory.lookup.counts == {("prompt-lookup", 2, j): [1, 1] for j in (1, 2, 3)}


@pytest.mark.parametrize("costs", [flat_costs, linear_costs])
def test_planned_greedy_output_is_identical(family, fixed_costs, costs):
    """Several hundred tokens (the drafter cache grows past its first capacity), planned rounds of varying
    length, token-identical to generate()."""
    fixed_costs(costs())
    target = one_layer_target(family, seed=2)
    assistant = imitating_assistant(target, noise=0.6, seed=4, **AUTO, prompt_lookup_num_tokens=6)
    prompt = torch.randint(0, target.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(3))
    expected = plain_generate(target, prompt, max_new_tokens=300, do_sample=False)
    got = assisted_generate(target, assistant, prompt, max_new_tokens=300, do_sample=False)
    assert torch.equal(got, expected)
    drafted = assistant.stats.drafted_per_pass
    if costs is flat_costs:
        assert len(set(drafted)) >= 3, "the plan must vary the draft length"
        assert assistant.stats.passes_by_source.get("drafter", 0) > 0
    else:
        assert assistant.stats.passes_by_source.get("none", 0) > 0


def test_random_drafter_under_auto_stays_exact(fixed_costs):
    fixed_costs(flat_costs())
    target = one_layer_target("llama", seed=1)
    assistant = random_assistant(target, **AUTO)
    prompt = torch.randint(0, target.config.vocab_size, (1, 9), generator=torch.Generator().manual_seed(0))
    assert torch.equal(assisted_generate(target, assistant, prompt, max_new_tokens=60, do_sample=False),
                       plain_generate(target, prompt, max_new_tokens=60, do_sample=False))


def planned_round_error(costs, kind="temperature", form="cpu", monkeypatch=None, **options):
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, **{**AUTO, **options})
    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: costs)
    lp = processors(kind)
    if form == "accelerator":
        with accelerator_paths_on_cpu():
            outcomes = chain_round(target, assistant, PROMPT, lp, 4)
    else:
        outcomes = chain_round(target, assistant, PROMPT, lp, 4)
    oracle = TargetOracle(target, lp)
    return max_error(extended_joint(oracle, PROMPT, outcomes, 5), target_joint(oracle, PROMPT, 5)), outcomes


# The exact enumeration of planned sampled rounds under flat, steep and measured costs:
# tests/test_planned_rounds.py::test_planned_sampled_round_is_exact_under_every_cost_model.


def test_enumeration_sees_a_plan_that_reads_the_drawn_token(monkeypatch):
    """A planner fed q(drawn token) instead of the distribution's top probability keeps a position more often
    when its token is likely: the verifier sees drafts from another distribution. The comparison must see it."""
    original = ChainDraftSession._choose

    def reads_the_token(self, scores, context, with_top=False):
        token, logits, confident, top = original(self, scores, context, with_top)
        if with_top and logits is not None:
            top = logits[0].float().softmax(-1)[token[0, 0]]
        return token, logits, confident, top

    monkeypatch.setattr(ChainDraftSession, "_choose", reads_the_token)
    costs = RoundCosts([0.0] + [1.0 + 0.45 * n for n in range(21)], consume_seconds=0.01, first_draft_seconds=0.02,
                       draft_step_seconds=0.03)
    error, _ = planned_round_error(costs, "plain", "cpu", monkeypatch)
    assert error > 100 * TOLERANCE, error


def test_calibration_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    target = one_layer_target("qwen2", seed=0)
    assistant = imitating_assistant(target)
    from hf_dynaspec.drafting.runtime import runtime_head

    head = runtime_head(assistant, assistant.generation_config)
    costs = calibration.round_costs(target, assistant, assistant.generation_config, head, 6)
    assert len(costs.verify_seconds) == 8 and all(t > 0 for t in costs.verify_seconds[1:])
    assert costs.consume_seconds > 0 and costs.draft_step_seconds >= 0
    stored = json.loads((tmp_path / "calibration.json").read_text())
    round_key = calibration.calibration_key(target, assistant, assistant.generation_config) + ":6"
    assert sorted(stored) == sorted([round_key, verify_costs.verify_key(target, None)])  # the pairing's, the target's
    # A new process (empty memory) reads the file instead of measuring.
    monkeypatch.setattr(store, "MEMORY", {})
    monkeypatch.setattr(calibration, "measure_round_costs", lambda *a, **k: pytest.fail("measured again"))
    assert calibration.round_costs(target, assistant, assistant.generation_config, head, 6) == costs
    # Other thread counts are other machines; a corrupt file is measured again, not trusted.
    key = calibration.calibration_key(target, assistant, assistant.generation_config)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert calibration.calibration_key(target, assistant, assistant.generation_config) != key
    finally:
        torch.set_num_threads(threads)
    # Another dtype is another cost table (a bf16 target verifies at another price than its fp32 copy).
    assert calibration.calibration_key(copy.deepcopy(target).to(torch.bfloat16), assistant,
                                       assistant.generation_config) != key
    # Another row budget (or shortlist) is another cost table: the draft step's price depends on the rows scored.
    other_budget = copy.deepcopy(assistant.generation_config)
    other_budget.shortlist_rows = [123, 45]
    assert calibration.calibration_key(target, assistant, other_budget) != key
    (tmp_path / "calibration.json").write_text("{not json")
    monkeypatch.setattr(store, "MEMORY", {})
    monkeypatch.setattr(calibration, "measure_round_costs", lambda *a, **k: costs)
    assert calibration.round_costs(target, assistant, assistant.generation_config, head, 6) == costs
    assert json.loads((tmp_path / "calibration.json").read_text())


def test_round_costs_interpolate_and_extrapolate():
    costs = RoundCosts([0.0, 1.0, 2.0, 4.0], 0.1, 0.2, 0.3)
    assert costs.verify(2) == 2.0 and costs.verify(5) == 8.0
    assert costs.drafting(0) == 0.0 and costs.drafting(3) == pytest.approx(0.2 + 2 * 0.3)
    assert timing.interpolate({1: 1.0, 3: 3.0, 5: 4.0}, 5) == [1.0, 2.0, 3.0, 3.5, 4.0]


@pytest.mark.parametrize("route", ["assistant_model", "chain_generate", "tree_generate"])
def test_auto_routes_the_targets_verification_through_the_rows_kernel_only_during_the_call(monkeypatch, route):
    """bf16 CPU target, draft_plan="auto": its 2..n-row forwards use the kernel (n as measured) inside the call,
    one-token steps do not, and the model is restored after; "fixed" and a target the user routed are left as
    they are. Output stays identical to generate() either way (checked here too). On every route: the public ones
    run their own loop, so they enter the kernel themselves."""
    from hf_dynaspec.generation.costs import verify_kernel as cal
    from hf_dynaspec.kernels.verify_rows import loader
    from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch

    if not loader.available():
        pytest.skip("the CPU kernel needs x86-64 with AVX2/FMA and a C compiler")
    monkeypatch.setattr(cal, "measured_kernels", lambda target: cal.CpuKernels(kernel=(2, 4)))
    costs = flat_costs()
    costs.tree_step_seconds = 0.05
    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: costs)
    target = one_layer_target("llama", seed=2).to(torch.bfloat16)
    public = {"chain_generate": chain_generate, "tree_generate": tree_generate}

    def generate_on_route(target, assistant, prompt, **kwargs):
        if route == "assistant_model":
            return assisted_generate(target, assistant, prompt, **kwargs)
        return target.generate(prompt, attention_mask=torch.ones_like(prompt), custom_generate=public[route],
                               drafter=assistant, **kwargs)

    kernel_rows = []  # rows of every product the kernel computed for the target (the drafter uses it too)
    product = loader.bf16_rows_matmul
    target_weights = {m.weight.data_ptr() for m in target.modules() if isinstance(m, torch.nn.Linear)}
    monkeypatch.setattr(loader, "bf16_rows_matmul", lambda x, w: (w.data_ptr() in target_weights and kernel_rows.append(
        x.numel() // x.shape[-1])) or product(x, w))
    prompt = torch.randint(0, target.config.vocab_size, (1, 10), generator=torch.Generator().manual_seed(1))
    expected = plain_generate(target, prompt, max_new_tokens=30, do_sample=False)
    for plan, routed in (("auto", True), ("fixed", False)):
        kernel_rows.clear()
        assistant = imitating_assistant(target, noise=0.5, **{**AUTO, "draft_plan": plan})
        assert torch.equal(generate_on_route(target, assistant, prompt, max_new_tokens=30, do_sample=False), expected)
        assert not verify_rows_patch.is_enabled(target)  # restored
        assert bool(kernel_rows) == routed and set(kernel_rows) <= {2, 3, 4}, (plan, kernel_rows)
    verify_rows_patch.enable(target, max_rows=verify_rows_patch.ANY_ROWS, method="kernel")  # the user's own choice
    assistant = imitating_assistant(target, noise=0.5, **AUTO)
    kernel_rows.clear()
    generate_on_route(target, assistant, prompt, max_new_tokens=10, do_sample=False)
    assert verify_rows_patch.enabled_method(target) == "kernel" and 10 in kernel_rows  # still every row count
    verify_rows_patch.disable(target)
