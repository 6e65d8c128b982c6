"""A drafter-free assistant (`DynaSpecAssistant.for_target`): any causal LM, no artifact, every route.

- greedy output is plain generate()'s on `assistant_model=`, `speculative_generate`, `speculative_generate(trees=True)` and a batch, while
  rounds really draft copies (and nothing but copies: no drafter, no tree);
- where nothing pays (verification dear) every round but a source's first probe is a plain decoding step;
- a sampled planned round is exact by enumeration, with the copy drafted;
- a family no EAGLE drafter can mirror (GPT-2) works too, and the target's hidden states are never requested.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assisted_generate, one_layer_target, plain_generate
from enumeration import TargetOracle, chain_round, extended_joint, max_error, target_joint
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors
from test_planner import flat_costs, linear_costs

from hf_dynaspec import DynaSpecAssistant, speculative_generate
from hf_dynaspec.drafting.planning.core import DRAFTER, RoundCosts
from hf_dynaspec.drafting.runtime import planner_memory


def repetitive_prompt(length: int = 24, seed: int = 0) -> torch.Tensor:
    """A prompt whose tokens repeat a short pattern, so that a copy of the context often continues it."""
    pattern = torch.randint(3, VOCAB, (5,), generator=torch.Generator().manual_seed(seed))
    return pattern.repeat(length // 5 + 1)[:length][None]


def copies_only(stats) -> bool:
    """Every pass drafted a copy (prompt lookup, a suffix-cache source) or nothing: no drafter, no tree."""
    return not set(stats.passes_by_source) & {"drafter", "tree"} and bool(stats.passes_by_source)


@pytest.mark.parametrize("route", ["assistant_model", "chain_generate", "tree_generate"])
def test_greedy_output_is_plain_generates_on_every_route(route, fixed_costs):
    fixed_costs(flat_costs(40))
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target)
    assert not assistant.has_drafter and sum(p.numel() for p in assistant.parameters()) == 0
    kwargs = {"assistant_model": dict(assistant_model=assistant),
              "chain_generate": dict(custom_generate=speculative_generate, drafter=assistant),
              "tree_generate": dict(custom_generate=speculative_generate, trees=True, drafter=assistant)}[route]
    drafted = 0
    for seed in range(3):
        ids = repetitive_prompt(seed=seed)
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, **kwargs)
        assert torch.equal(out, plain_generate(target, ids, max_new_tokens=24)), (route, seed)
        assert copies_only(assistant.stats), assistant.stats.passes_by_source
        drafted += assistant.stats.drafted
    assert drafted > 0  # the rounds did draft copies
    # Its planner never considered the drafter: no drafter probe was scheduled, no drafter position learnt.
    memory = planner_memory(assistant, False)
    assert memory.probe_schedule.count(DRAFTER) == 0 and not memory.position.counts


def test_a_batch_decodes_each_row_as_plain_generate(fixed_costs):
    fixed_costs(flat_costs(40))
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target)
    first, second = repetitive_prompt(20, seed=0), repetitive_prompt(14, seed=1)
    ids = torch.zeros(2, 20, dtype=torch.long)
    mask = torch.zeros(2, 20, dtype=torch.long)
    ids[0], mask[0] = first[0], 1
    ids[1, 6:], mask[1, 6:] = second[0], 1  # left padding
    out = target.generate(ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                          max_new_tokens=24)
    for row, prompt in ((0, first), (1, second)):
        expected = plain_generate(target, prompt, max_new_tokens=24)[0, prompt.shape[1]:]
        assert torch.equal(out[row, 20:], expected), row
    assert copies_only(assistant.stats) and assistant.stats.drafted > 0


def test_rounds_are_plain_steps_where_nothing_pays(fixed_costs):
    """Verifying n tokens costs n steps: even an always-right copy only breaks even, so rounds are plain decoding
    steps, but for the one probe per source that teaches the planner its acceptance (planning.core.lookup_probe)."""
    fixed_costs(RoundCosts([0.0] + [float(n) for n in range(1, 42)], 0.0, 0.0, 0.0, 0.0))
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target)
    planner_memory(assistant, do_sample=False).log = []  # every planned round, with whether it was a probe
    ids = repetitive_prompt(seed=1)
    out = assisted_generate(target, assistant, ids, max_new_tokens=20)
    assert torch.equal(out, plain_generate(target, ids, max_new_tokens=20))
    drafted = [r for r in planner_memory(assistant, do_sample=False).log if r["source"] != "none"]
    assert all(r["probe"] for r in drafted) and len({r["source"] for r in drafted}) == len(drafted), drafted
    drafted_passes = sum(1 for n in assistant.stats.drafted_per_pass if n)
    assert drafted_passes == len(drafted) <= 2  # prompt lookup's and the suffix cache's request part's
    assert assistant.stats.passes_by_source["none"] == assistant.stats.verify_passes - drafted_passes


@pytest.mark.parametrize("costs", [flat_costs, linear_costs], ids=["flat", "linear"])
def test_a_sampled_planned_round_is_exact(costs, monkeypatch):
    monkeypatch.setattr("hf_dynaspec.generation.rounds.round_costs", lambda *a, **k: costs(40))
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = DynaSpecAssistant.for_target(target, prompt_lookup_num_tokens=2, prompt_lookup_min_ngram=1,
                                             suffix_cache_num_tokens=0)
    lp = processors("temperature")
    outcomes = chain_round(target, assistant, PROMPT, lp, 4)
    oracle = TargetOracle(target, lp)
    assert max_error(extended_joint(oracle, PROMPT, outcomes, 5), target_joint(oracle, PROMPT, 5)) < TOLERANCE
    # Flat costs: "2" occurred before, followed by "5 2": the round drafts that copy; linear: nothing pays.
    assert max(len(tokens) for tokens in outcomes) == (3 if costs is flat_costs else 1)


def test_a_family_no_drafter_can_mirror(fixed_costs, monkeypatch):
    """GPT-2 (learned positions, no RMSNorm): no EAGLE drafter mirrors it, a drafter-free assistant serves it;
    the target is never asked for hidden states."""
    from transformers import GPT2Config, GPT2LMHeadModel

    fixed_costs(flat_costs(40))
    torch.manual_seed(0)
    target = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=1024, n_embd=32, n_layer=1, n_head=2)).eval()
    assistant = DynaSpecAssistant.for_target(target)
    asked = []
    forward = target.forward

    def recording(*args, **kwargs):
        asked.append(kwargs.get("output_hidden_states"))
        return forward(*args, **kwargs)

    monkeypatch.setattr(target, "forward", recording)
    ids = repetitive_prompt(seed=2)
    out = assisted_generate(target, assistant, ids, max_new_tokens=20)
    monkeypatch.undo()
    assert torch.equal(out, plain_generate(target, ids, max_new_tokens=20))
    assert assistant.stats.drafted > 0 and not any(asked), asked


def test_costs_are_measured_for_copies_longer_than_the_measured_sizes(tmp_path, monkeypatch):
    """A drafter-free assistant's planner prices copies of up to 33 tokens: the verify table is measured past the
    largest of MEASURED_SIZES (the calibration ids once ran out at 17 + 2 tokens, and a longer forward raised).
    A cache of its own: the sizes are measured here, not read from another test's measurement."""
    from hf_dynaspec.generation.costs import store
    from hf_dynaspec.generation.costs.round_costs import measure_round_costs

    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target)
    try:
        costs = measure_round_costs(target, assistant, None, 32)
    except RuntimeError as error:  # a forward longer than the calibration ids
        raise AssertionError(f"the verify table past 17 tokens was not measured: {error}") from error
    assert len(costs.verify_seconds) == 34 and all(s > 0 for s in costs.verify_seconds[1:])
    assert (costs.consume_seconds, costs.first_draft_seconds, costs.draft_step_seconds) == (0.0, 0.0, 0.0)


def test_saving_a_drafter_free_assistant_says_there_is_nothing_to_save(tmp_path):
    target = one_layer_target("llama", seed=2)
    with pytest.raises(ValueError, match=r"nothing to save.*for_target"):
        DynaSpecAssistant.for_target(target).save_pretrained(tmp_path / "copier")
    assert not (tmp_path / "copier").exists()


@pytest.mark.parametrize("off", ["prompt_lookup_num_tokens", "suffix_cache_num_tokens"])
def test_a_callers_options_override_the_drafter_free_defaults(off, fixed_costs):
    """`for_target(model, **options)`: the caller's options win over the drafter-free defaults; a source turned
    off drafts nothing in a call where the other one drafts."""
    fixed_costs(flat_costs(40))
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target, **{off: 0}, prompt_lookup_min_ngram=2)
    options = assistant.generation_config
    assert getattr(options, off) == 0 and options.prompt_lookup_min_ngram == 2
    assert options.draft_plan == "auto"  # the defaults the caller did not name stay
    ids = repetitive_prompt(seed=1)
    out = assisted_generate(target, assistant, ids, max_new_tokens=24)
    assert torch.equal(out, plain_generate(target, ids, max_new_tokens=24))
    sources = {source for source, n in assistant.stats.passes_by_source.items() if n and source != "none"}
    assert sources, "the case: the source left on drafted"
    turned_off = {"prompt_lookup_num_tokens": "prompt-lookup", "suffix_cache_num_tokens": "suffix"}[off]
    assert not any(source.startswith(turned_off) for source in sources), assistant.stats.passes_by_source


def test_the_verify_table_is_measured_up_to_the_longest_copy(tmp_path, monkeypatch):
    """A drafter-free call prices copies of up to LONGEST_COPY (32) tokens, whatever its options' copy lengths:
    its verify table holds a measured 33-token forward, not one extrapolated from the options' 11 or 17 (the CPU
    route measurement seeds sizes up to 17; the rest is measured for the call)."""
    import json

    from hf_dynaspec.drafting.planning.core import LONGEST_COPY
    from hf_dynaspec.generation.costs import store

    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    target = one_layer_target("llama", seed=2)
    assistant = DynaSpecAssistant.for_target(target, prompt_lookup_num_tokens=10, suffix_cache_num_tokens=16)
    ids = repetitive_prompt(seed=1)
    assert torch.equal(assisted_generate(target, assistant, ids, max_new_tokens=8),
                       plain_generate(target, ids, max_new_tokens=8))
    stored = json.loads((tmp_path / "calibration.json").read_text())
    tables = [entry for key, entry in stored.items() if key.startswith("verify:")]
    assert tables and max(int(size) for table in tables for size in table) == LONGEST_COPY + 1, tables
