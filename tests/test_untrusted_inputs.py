"""Inputs the library must not trust blindly: options set after loading, the calibration cache, token ids from
another tokenizer, and weights or targets that differ from what the artifact was made for.

Each test names the mistake and matches the message, so an error that blames the wrong thing (a
ZeroDivisionError in the planner, torch's "index out of range in self") fails it.
"""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
import torch
from conftest import assisted_generate, imitating_assistant, one_layer_target, plain_generate
from safetensors.torch import load_file, save_file

from hf_dynaspec import DynaSpecAssistant, speculative_generate, suffix_cache
from hf_dynaspec.drafting.planning.core import RoundCosts
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.errors import ArtifactError, AssistantMismatchError
from hf_dynaspec.generation.costs import round_costs as calibration
from hf_dynaspec.generation.costs import store, verify_kernel
from hf_dynaspec.modeling import integrity

PROMPT = torch.tensor([[3, 14, 15, 9, 2, 6, 5]])
ROUTES = ["assistant_model", "chain_generate", "tree_generate"]
AUTO_PLAN = dict(draft_plan="auto", suffix_cache_num_tokens=0, auto_max_assistant_tokens=4)


def generate(target, assistant, route: str, input_ids=PROMPT, **kwargs):
    if route == "assistant_model":
        return assisted_generate(target, assistant, input_ids, **kwargs)
    return target.generate(input_ids, custom_generate=speculative_generate, drafter=assistant,
                           trees=route == "tree_generate", **kwargs)


# -- options set one by one after loading ---------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("name, value, accepted", [
    ("num_assistant_tokens", -1, "a positive integer"),
    ("num_assistant_tokens", 0, "a positive integer"),
    ("draft_plan", "planned", r"one of \('auto', 'fixed', 'adl'\)"),
    ("verification", "blocks", r"one of \('auto', 'token', 'block'\)"),
    ("shortlist", "dynamic", "one of"),
    ("prompt_lookup_veto", 1.5, r"a probability in \[0, 1\]"),
])
def test_an_option_set_after_loading_is_checked_when_generate_starts(route, name, value, accepted):
    """The docs' route (`assistant.generation_config.X = ...`) bypasses the checks of from_pretrained; a bad value
    must not run as some default (a negative length drafting nothing, "blocks" running token verification)."""
    target = one_layer_target("llama")
    assistant = imitating_assistant(target)
    setattr(assistant.generation_config, name, value)
    with pytest.raises(ValueError, match=rf"DynaSpecGenerationConfig\.{name} must be {accepted}.*got {value!r}"):
        generate(target, assistant, route, max_new_tokens=4)


def test_legacy_options_beside_a_generation_config_are_reported_as_they_are_used(tmp_path):
    """An artifact whose config.json still holds 0.1-style options and which has a generation_config.json: the
    warning says which legacy values are used and which generation_config.json overrides, and that is what
    happens."""
    target = one_layer_target("llama")
    imitating_assistant(target, num_assistant_tokens=3).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(num_draft_tokens=5, tree_depth=2)  # tree_depth: generation_config.json sets 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    options = json.loads((tmp_path / "generation_config.json").read_text())
    options.pop("tree_depth")  # now only config.json sets it: used
    (tmp_path / "generation_config.json").write_text(json.dumps(options))
    with pytest.warns(FutureWarning) as caught:
        loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    message = " ".join(str(w.message) for w in caught if issubclass(w.category, FutureWarning))
    assert "Used from config.json: ['tree_depth']" in message
    assert "Ignored, because generation_config.json sets them: num_assistant_tokens=5 (generation_config.json: 3)" \
        in message
    assert "used as the defaults" not in message
    assert loaded.generation_config.num_assistant_tokens == 3 and loaded.generation_config.tree_depth == 2


# -- the calibration cache ------------------------------------------------------------------------------------
GOOD = RoundCosts([0.0] + [0.01 * (1 + 0.1 * n) for n in range(1, 10)], consume_seconds=0.002,
                  first_draft_seconds=0.001, draft_step_seconds=0.0, tree_step_seconds=0.002)


@pytest.fixture
def cached_costs(tmp_path, monkeypatch):
    """A calibration file holding one good entry for a tiny pairing; `measured` counts re-measurements."""
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    measured = []
    monkeypatch.setattr(calibration, "measure_round_costs", lambda *a, **k: measured.append(a) or GOOD)
    target = one_layer_target("qwen2")
    assistant = imitating_assistant(target)
    options = assistant.generation_config
    head = runtime_head(assistant, options)
    assert calibration.round_costs(target, assistant, options, head, 7) == GOOD and len(measured) == 1
    path = tmp_path / "calibration.json"

    def call_with(edit):
        stored = json.loads(path.read_text())
        (key,) = stored
        edit(stored[key])
        path.write_text(json.dumps(stored))
        monkeypatch.setattr(store, "MEMORY", {})  # a new process
        return calibration.round_costs(target, assistant, options, head, 7)

    return call_with, measured


def _set(field, value, index=None):
    def edit(entry):
        if index is None:
            entry[field] = value
        else:
            entry[field][index] = value
    return edit


@pytest.mark.parametrize("edit, problem", [
    (_set("verify_seconds", 0.0, 3), r"verify_seconds\[3\] = 0.0 is not a positive"),
    (_set("verify_seconds", -0.5, 1), r"verify_seconds\[1\] = -0.5"),
    (_set("verify_seconds", "fast", 2), r"verify_seconds\[2\] = 'fast'"),
    (_set("verify_seconds", math.inf, 2), r"verify_seconds\[2\] = inf"),
    (_set("verify_seconds", [0.0, 0.01, 0.02]), "covers 2 token counts, this call needs 8"),
    (_set("verify_seconds", {"1": 0.01}), "not a list"),
    (_set("consume_seconds", math.nan), "consume_seconds = nan"),
    (_set("draft_step_seconds", -1e-3), "draft_step_seconds = -0.001"),
    (_set("first_draft_seconds", "0.1"), "first_draft_seconds = '0.1'"),
    (_set("first_draft_seconds", True), "first_draft_seconds = True"),
    (_set("tree_step_seconds", None), "tree_step_seconds = None"),
    (_set("tree_step_seconds", -2.0), "tree_step_seconds = -2.0"),
    (lambda entry: entry.pop("tree_step_seconds"), "expected the fields"),  # a file written before trees were planned
    (lambda entry: entry.pop("consume_seconds"), "expected the fields"),
    (lambda entry: entry.update(extra=1), "expected the fields"),
])
def test_a_bad_calibration_entry_is_measured_again_with_a_warning(cached_costs, caplog, edit, problem):
    call_with, measured = cached_costs
    with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.costs"):
        assert call_with(edit) == GOOD
    assert len(measured) == 2, "a bad entry must be measured again, not used"
    assert any("unusable" in r.message and re.search(problem, r.message) for r in caplog.records), \
        [r.message for r in caplog.records]


def test_a_good_calibration_entry_is_used_silently(cached_costs, caplog):
    call_with, measured = cached_costs
    with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.costs"):
        assert call_with(lambda entry: None) == GOOD
    assert len(measured) == 1 and not caplog.records


def test_a_zeroed_calibration_file_does_not_break_generate(tmp_path, monkeypatch):
    """Someone who can write the cache zeroes every cost: generate() measures again and stays exact."""
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    target = one_layer_target("llama")
    assistant = imitating_assistant(target, **AUTO_PLAN)
    expected = plain_generate(target, PROMPT, max_new_tokens=12)
    assert torch.equal(assisted_generate(target, assistant, PROMPT, max_new_tokens=12), expected)
    path = tmp_path / "calibration.json"
    stored = json.loads(path.read_text())
    costs = {key: entry for key, entry in stored.items() if "verify_seconds" in entry}  # not the CPU routes
    verify = {key: entry for key, entry in stored.items() if key.startswith("verify:")}  # the target's own table
    assert costs and verify
    zeroed = {key: {name: [0.0] * len(value) if isinstance(value, list) else 0.0 for name, value in entry.items()}
              for key, entry in {**costs, **verify}.items()}
    path.write_text(json.dumps({**stored, **zeroed}))
    monkeypatch.setattr(store, "MEMORY", {})
    assert torch.equal(assisted_generate(target, assistant, PROMPT, max_new_tokens=12), expected)
    remeasured = json.loads(path.read_text())
    assert all(v > 0 for key in costs for v in remeasured[key]["verify_seconds"][1:])
    assert all(v > 0 for key in verify for v in remeasured[key].values())


def test_a_bf16_target_does_not_reuse_the_fp32_costs(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    measured = []
    monkeypatch.setattr(calibration, "measure_round_costs", lambda target, *a, **k: measured.append(target.dtype) or GOOD)
    target = one_layer_target("llama")
    assistant = imitating_assistant(target)
    options = assistant.generation_config
    calibration.round_costs(target, assistant, options, runtime_head(assistant, options), 4)
    target.to(torch.bfloat16)
    assistant.attach(target)
    monkeypatch.setattr(store, "MEMORY", {})
    calibration.round_costs(target, assistant, options, runtime_head(assistant, options), 4)
    assert measured == [torch.float32, torch.bfloat16]
    assert len(json.loads((tmp_path / "calibration.json").read_text())) == 2


def test_a_bad_cpu_routes_entry_is_measured_again(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    measured = verify_kernel.CpuKernels((1, 1), (2, 9))
    monkeypatch.setattr(verify_kernel, "fastest_kernels", lambda target: measured)
    target = one_layer_target("llama")
    key = "cpu_routes:" + store.digest(store.target_parts(target))
    good = {"kernel": [1, 1], "packed": [2, 9]}
    bads = [-4, [1, 9], {"kernel": [1, 9]}, {**good, "other": [1, 2]}, {**good, "kernel": [0, 5]},
            {**good, "packed": [3, 2]}, {**good, "kernel": [1, 10**6]}, {**good, "kernel": [True, 4]},
            {**good, "packed": ["1", "9"]}, {**good, "packed": [1.0, 9]}, {**good, "kernel": [1, 2, 3]}]
    for bad in bads:
        (tmp_path / "calibration.json").write_text(json.dumps({key: bad}))
        monkeypatch.setattr(store, "MEMORY", {})
        with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.costs"):
            try:  # a bad entry trusted may fail anywhere: that must fail the assertion, not crash the test
                got = verify_kernel.measured_kernels(target)
            except Exception as error:  # noqa: BLE001
                got = error
        assert got == measured and "CPU kernels cached" in caplog.text, (bad, got)
        caplog.clear()
    for stored in ({"kernel": [0, 0], "packed": [0, 0]}, {"kernel": [2, 17], "packed": [0, 0]}):
        (tmp_path / "calibration.json").write_text(json.dumps({key: stored}))  # read back as stored, not measured
        monkeypatch.setattr(store, "MEMORY", {})
        kernels = verify_kernel.measured_kernels(target)
        assert kernels == (tuple(stored["kernel"]), tuple(stored["packed"])) and not caplog.records


# -- token ids from another tokenizer -------------------------------------------------------------------------
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("bad", [97, 500, -1])
def test_a_prompt_id_outside_the_vocabulary_names_the_tokenizer(route, bad):
    target = one_layer_target("llama")  # 97 ids
    assistant = imitating_assistant(target)
    prompt = PROMPT.clone()
    prompt[0, 2] = bad
    # Any exception is caught, so that torch's own "index out of range" fails the assertion below, not the test run.
    with pytest.raises(Exception) as caught:
        generate(target, assistant, route, input_ids=prompt, max_new_tokens=4)
    assert isinstance(caught.value, ValueError) and re.search(
        rf"token id {bad}, outside the target's vocabulary of 97 ids.*tokenizer", str(caught.value)), repr(caught.value)


def test_a_suffix_corpus_from_another_tokenizer_is_refused_whole():
    target = one_layer_target("llama")
    assistant = imitating_assistant(target, suffix_cache_num_tokens=8)
    cache = suffix_cache(assistant)
    with pytest.raises(ValueError, match=r"corpus document 1 holds token id 150000, outside the target's "
                                         r"vocabulary of 97 ids.*another tokenizer"):
        cache.add_corpus([[3, 14, 15], [9, 150000, 2]])
    with pytest.raises(ValueError, match="token id -3, below 0"):
        cache.add_corpus([[-3, 4]])
    assert cache.stored_tokens == 0, "nothing of a refused corpus is kept"
    cache.add_corpus([[3, 14, 15, 9, 2, 6, 5, 8, 8]])
    expected = plain_generate(target, PROMPT, max_new_tokens=10)
    assert torch.equal(assisted_generate(target, assistant, PROMPT, max_new_tokens=10), expected)


# -- integrity checks as wide as their names --------------------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused(tmp_path, value):
    target = one_layer_target("llama")
    imitating_assistant(target).save_pretrained(tmp_path)
    state = load_file(tmp_path / "model.safetensors")
    name = next(k for k in state if k.endswith("fc.weight"))
    state[name][1, 2] = value
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    (tmp_path / "checksums.json").unlink()  # saved as such, not a corruption
    with pytest.raises(ArtifactError, match=r"NaN or inf values \(drafter\.fc\.weight\)"):
        DynaSpecAssistant.from_pretrained(tmp_path)
    assert integrity.non_finite_tensors(state) == ["drafter.fc.weight"]


def _lm_head_retied(target):
    """The same model with its LM head tied to the input embedding (an export that re-ties weights)."""
    target.lm_head.weight = target.get_input_embeddings().weight


def _lm_head_tuned(target):
    """The same model whose LM head alone was fine-tuned (a small change everywhere in the head)."""
    with torch.no_grad():
        head = target.lm_head.weight
        head.add_(0.1 * head.abs().max() * torch.randn(head.shape, generator=torch.Generator().manual_seed(0)))


@pytest.mark.parametrize("change", [_lm_head_retied, _lm_head_tuned])
def test_a_target_whose_lm_head_alone_differs_is_refused(tmp_path, change):
    target = one_layer_target("llama")
    imitating_assistant(target).save_pretrained(tmp_path)
    other = one_layer_target("llama")
    change(other)
    assert torch.equal(other.get_input_embeddings().weight, target.get_input_embeddings().weight)
    stored = json.loads((tmp_path / "config.json").read_text())["target_fingerprint"]
    assert integrity.fingerprint_mismatch(stored, other) is not None
    with pytest.raises(AssistantMismatchError, match="allow_different_target=True"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=other)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_same_target_in_another_dtype_matches_its_fingerprint(dtype):
    """The tolerance admits rounding to a half-precision dtype (a failed assertion, not an exception, when it is
    too tight) and nothing much larger: a change of 5% of the largest value is refused."""
    target = one_layer_target("llama")
    stored = integrity.target_fingerprint(target)
    assert integrity.fingerprint_mismatch(stored, one_layer_target("llama").to(dtype)) is None
    shifted = one_layer_target("llama")
    with torch.no_grad():
        shifted.lm_head.weight.add_(0.05 * shifted.lm_head.weight.abs().max())
    assert integrity.fingerprint_mismatch(stored, shifted) is not None
