"""Drafting options apart from the artifact: generation_config.json, byte-identical config.json round trips, old
artifacts migrated with a warning, and both routes into generate() (the private hook and `speculative_generate`)."""

from __future__ import annotations

import inspect
import json
import warnings

import pytest
import torch
from conftest import VOCAB, imitating_assistant, one_layer_target, plain_generate
from transformers import GenerationConfig

from hf_dynaspec import DynaSpecAssistant, DynaSpecGenerationConfig, speculative_generate
from hf_dynaspec.generation import hook
from hf_dynaspec.modeling.options import OPTION_DEFAULTS


def prompt(seed: int, length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def saved(tmp_path, **options):
    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.3, **options)
    assistant.save_pretrained(tmp_path / "a")
    return target, tmp_path / "a"


def test_load_and_save_leaves_config_json_byte_identical(tmp_path):
    target, path = saved(tmp_path, num_assistant_tokens=3, shortlist="full", tree_depth=5)
    # Loading with overrides changes this object's options, never its config.
    loaded = DynaSpecAssistant.from_pretrained(path, target=target, num_assistant_tokens=5, tree_top_k=2)
    assert loaded.generation_config.num_assistant_tokens == 5 and loaded.generation_config.tree_depth == 5
    loaded.save_pretrained(tmp_path / "b")
    assert (tmp_path / "b" / "config.json").read_bytes() == (path / "config.json").read_bytes()
    config = json.loads((path / "config.json").read_text())
    assert not set(config) & set(OPTION_DEFAULTS), "drafting options leaked into config.json"
    options = json.loads((tmp_path / "b" / "generation_config.json").read_text())
    assert options["num_assistant_tokens"] == 5 and options["tree_top_k"] == 2  # what this object drafts with


def test_an_old_artifact_loads_with_a_deprecation_warning_and_resaves_clean(tmp_path):
    target, path = saved(tmp_path)
    config = json.loads((path / "config.json").read_text())
    # Early builds of hf-dynaspec kept the options in config.json, some under older names, and had no generation_config.json.
    config.update(num_draft_tokens=4, draft_confidence=0.3, prompt_lookup_tokens=6, prompt_lookup_max_ngram=4,
                  prompt_lookup_veto=0.8, shortlist="full", tree_depth=3)
    (path / "config.json").write_text(json.dumps(config))
    (path / "generation_config.json").unlink()
    with pytest.warns(FutureWarning, match="generation_config.json"):
        old = DynaSpecAssistant.from_pretrained(path, target=target)
    options = old.generation_config
    assert (options.num_assistant_tokens, options.assistant_confidence_threshold, options.prompt_lookup_num_tokens,
            options.max_matching_ngram_size, options.prompt_lookup_veto, options.tree_depth) == (4, 0.3, 6, 4, 0.8, 3)
    old.save_pretrained(tmp_path / "new")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = DynaSpecAssistant.from_pretrained(tmp_path / "new", target=target)
    assert new.generation_config.drafting_options() == options.drafting_options()
    from hf_dynaspec.modeling.options import LEGACY_CONFIG_KEYS

    resaved = set(json.loads((tmp_path / "new" / "config.json").read_text()))
    assert not resaved & (LEGACY_CONFIG_KEYS | set(OPTION_DEFAULTS))  # no option key survives in config.json


def test_legacy_keyword_names_still_work_with_a_warning(tmp_path):
    target, path = saved(tmp_path)
    with pytest.warns(FutureWarning, match="num_assistant_tokens"):
        loaded = DynaSpecAssistant.from_pretrained(path, target=target, num_draft_tokens=4)
    assert loaded.generation_config.num_assistant_tokens == 4
    with pytest.raises(TypeError, match="drafting option"):
        DynaSpecGenerationConfig().with_options(num_draft_token=3)  # a typo is not silently dropped


def test_prompt_lookup_passed_to_generate_is_refused_not_dropped():
    target = one_layer_target("llama")
    assistant = imitating_assistant(target)
    with pytest.raises(ValueError, match="assistant.generation_config.prompt_lookup_num_tokens"):
        target.generate(prompt(0, 8), attention_mask=torch.ones(1, 8, dtype=torch.long), max_new_tokens=4,
                        assistant_model=assistant, prompt_lookup_num_tokens=3)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_both_routes_are_greedy_exact(family):
    """The private-hook route and the public custom_generate route give plain generate()'s tokens."""
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
    for seed in range(3):
        input_ids = prompt(seed, 10)
        expected = plain_generate(target, input_ids, max_new_tokens=30)
        hooked = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=30,
                                 assistant_model=assistant)
        assert torch.equal(hooked, expected)
        hooked_stats = assistant.stats
        public = target.generate(input_ids, max_new_tokens=30, custom_generate=speculative_generate, drafter=assistant)
        assert torch.equal(public, expected)
        # A chain of K per pass: never more than K drafted, and the drafter is really used.
        assert assistant.stats.drafted <= 3 * assistant.stats.verify_passes and assistant.stats.accepted > 0
        assert hooked_stats.accepted > 0


def test_the_hook_binds_arguments_by_signature_whatever_their_form(monkeypatch):
    """transformers may pass the private method's arguments positionally or by keyword: both reach us."""
    seen = []
    monkeypatch.setattr(hook, "make_candidate_generator", lambda assistant, **kw: seen.append(kw) or "ours")
    target = one_layer_target("llama")
    assistant = imitating_assistant(target)
    wrapped = type(target)._get_candidate_generator
    names = list(inspect.signature(getattr(type(target), hook._ORIGINAL)).parameters)[1:]
    values = {"generation_config": "GC", "input_ids": "IDS", "inputs_tensor": None, "logits_processor": "LP",
              "model_kwargs": {}, "assistant_model": assistant}
    positional = [values.get(name) for name in names[:6]]
    assert wrapped(target, *positional) == "ours"
    assert wrapped(target, **{k: v for k, v in values.items()}) == "ours"
    assert seen[0]["input_ids"] == seen[1]["input_ids"] == "IDS" and seen[0]["logits_processor"] == "LP"


def test_drafts_end_at_their_first_eos_where_transformers_does_not_crop(monkeypatch):
    """transformers < 5.18 appends every accepted token; the round then ends a draft at its first EOS (tokens and
    the draft logits alike). Newer releases crop themselves, and the round skips the cut (a host sync)."""
    from hf_dynaspec.drafting.contract import Draft
    from hf_dynaspec.generation import candidate_generator as cg

    config = GenerationConfig(eos_token_id=[7, 9])
    monkeypatch.setattr(cg, "TRANSFORMERS_CROPS_AT_EOS", False)
    eos = cg._eos_token_ids_to_cut(config, torch.device("cpu"))
    from hf_dynaspec.drafting.round import SpeculationRound

    generator = SpeculationRound.__new__(SpeculationRound)
    generator.eos_token_ids = eos
    draft = Draft(token_ids=torch.tensor([[3, 9, 7, 4]]), logits=torch.randn(1, 4, 11))
    cut = generator._end_at_eos(draft)
    assert cut.token_ids.tolist() == [[3, 9]] and torch.equal(cut.logits, draft.logits[:, :2])
    assert generator._end_at_eos(Draft(torch.tensor([[3, 4]]), None)).token_ids.tolist() == [[3, 4]]
    monkeypatch.setattr(cg, "TRANSFORMERS_CROPS_AT_EOS", True)
    assert cg._eos_token_ids_to_cut(config, torch.device("cpu")) is None


def test_run_time_state_lives_outside_the_artifact(tmp_path):
    """Head cache, planner tables, suffix cache and statistics are held outside the PreTrainedModel: generate()
    writes nothing onto it, `stats` is a read-only view, and a copy starts with no run-time state."""
    import copy

    from hf_dynaspec.drafting.runtime import runtime_of

    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.3, draft_plan="auto", suffix_cache_num_tokens=8)
    before = {name: id(value) for name, value in assistant.__dict__.items()}
    input_ids = prompt(0, 10)
    assisted = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=12,
                               assistant_model=assistant)
    assert torch.equal(assisted, plain_generate(target, input_ids, max_new_tokens=12))
    after = {name: id(value) for name, value in assistant.__dict__.items()}
    assert after == before, {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    runtime = runtime_of(assistant)
    assert runtime.head is not None and runtime.planner_memories and runtime.suffix is not None
    assert assistant.stats.verify_passes > 0
    with pytest.raises(AttributeError):
        assistant.stats = None
    clone = copy.deepcopy(assistant)
    assert runtime_of(clone).head is None and clone.stats.verify_passes == 0
