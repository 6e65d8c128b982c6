"""Bad inputs get an error that names the problem and the fix (or, where the library can follow, a warning).

Each case is one mistake a user can make with a saved assistant or a generate() call; the expected message
is matched, so an error that blames the wrong thing (a shape error deep in attention, "unexpected keys")
fails the test.
"""

from __future__ import annotations

import json
import re
import warnings

import pytest
import torch
from conftest import VOCAB, assisted_generate, plain_generate, random_assistant, tiny_target
from safetensors.torch import load_file, save_file

from hf_dynaspec import DynaSpecAssistant, speculative_generate
from hf_dynaspec.modeling.assistant import AssistantMismatchError
from hf_dynaspec.modeling.checkpoints import ArtifactError
from hf_dynaspec.modeling.integrity import IntegrityError

PROMPT = torch.tensor([[3, 14, 15, 9, 2]])


@pytest.fixture
def saved(tmp_path):
    target = tiny_target("llama", seed=0)
    random_assistant(target, seed=1).save_pretrained(tmp_path / "a")
    return target, tmp_path / "a"


def edit_config(directory, **changes):
    path = directory / "config.json"
    config = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key)
        else:
            config[key] = value
    path.write_text(json.dumps(config))


def test_an_assistant_for_a_same_shaped_but_different_target_is_refused(saved):
    target, directory = saved
    other = tiny_target("llama", seed=9)  # same family and shapes, other weights (another fine-tune, say)
    with pytest.raises(AssistantMismatchError, match=r"trained for .*shapes match.*allow_different_target=True"):
        DynaSpecAssistant.from_pretrained(directory, target=other)
    reused = DynaSpecAssistant.from_pretrained(directory, target=other, allow_different_target=True)
    assert torch.equal(assisted_generate(other, reused, PROMPT, max_new_tokens=8), plain_generate(other, PROMPT, max_new_tokens=8))
    # The same target in another dtype is the same target.
    DynaSpecAssistant.from_pretrained(directory, target=tiny_target("llama", seed=0).to(torch.bfloat16))


def test_nan_weights_are_refused(saved):
    _, directory = saved
    state = load_file(directory / "model.safetensors")
    name = next(k for k in state if k.endswith("fc.weight"))
    state[name][0, 0] = float("nan")
    save_file(state, directory / "model.safetensors", metadata={"format": "pt"})
    (directory / "checksums.json").unlink()  # a NaN that was saved as such, not a corruption
    with pytest.raises(ArtifactError, match=r"NaN or inf values \(drafter\.fc\.weight\)"):
        DynaSpecAssistant.from_pretrained(directory)


def test_a_flipped_bit_in_the_weights_is_refused(saved):
    _, directory = saved
    path = directory / "model.safetensors"
    payload = bytearray(path.read_bytes())
    payload[-100] ^= 0x01  # inside the tensor data: the header still parses
    path.write_bytes(bytes(payload))
    with pytest.raises(IntegrityError, match=r"model\.safetensors does not match the sha256"):
        DynaSpecAssistant.from_pretrained(directory)


@pytest.mark.parametrize("key", ["model_type", "hidden_size", "vocab_size", "drafter_kind", "layer_family",
                                 "target_model_type"])
def test_a_config_missing_a_key_names_the_key(saved, key):
    target, directory = saved
    edit_config(directory, **{key: None})
    with pytest.raises(ArtifactError, match=rf"config\.json lacks \['{key}'\].*restore it"):
        DynaSpecAssistant.from_pretrained(directory, target=target)


def test_beam_search_with_the_assistant_is_refused(saved):
    target, directory = saved
    assistant = DynaSpecAssistant.from_pretrained(directory, target=target)
    for options in (dict(num_beams=2), dict(num_beams=2, do_sample=True)):
        with pytest.raises(ValueError, match="num_beams=2.*cannot use an assistant.*set num_beams=1"):
            assisted_generate(target, assistant, PROMPT, max_new_tokens=4, **options)
    with pytest.raises(ValueError, match="num_return_sequences"):  # transformers' own check, already clear
        assisted_generate(target, assistant, PROMPT, max_new_tokens=4, do_sample=True, num_return_sequences=2)


def test_an_empty_prompt_is_refused(saved):
    target, directory = saved
    assistant = DynaSpecAssistant.from_pretrained(directory, target=target)
    empty = PROMPT[:, :0]
    with pytest.raises(ValueError, match="the prompt is empty"):
        assisted_generate(target, assistant, empty, max_new_tokens=4)
    with pytest.raises(ValueError, match="the prompt is empty"):
        target.generate(empty, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=4)


def test_the_assistant_follows_a_target_cast_after_attaching(saved):
    target, directory = saved
    assistant = DynaSpecAssistant.from_pretrained(directory, target=target)
    target.to(torch.bfloat16)
    with pytest.warns(UserWarning, match="re-attaching it to follow the target"):
        out = assisted_generate(target, assistant, PROMPT, max_new_tokens=6)
    assert assistant.drafter.fc.weight.dtype == torch.bfloat16 and out.shape[1] == PROMPT.shape[1] + 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # attached again: no second warning
        assisted_generate(target, assistant, PROMPT, max_new_tokens=2)
    target.to(torch.float32)
    with pytest.warns(UserWarning, match="re-attaching"):
        tree = target.generate(PROMPT, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=6)
    assert torch.equal(tree, plain_generate(target, PROMPT, max_new_tokens=6))


def test_a_lossy_ensemble_weight_is_refused(saved):
    target, directory = saved
    assistant = DynaSpecAssistant.from_pretrained(directory, target=target)
    with pytest.raises(ValueError, match="assistant_ensemble_weight .* lossless by design"):
        assisted_generate(target, assistant, PROMPT, max_new_tokens=4, do_sample=True,
                          assistant_ensemble_weight=0.5)


def test_a_saved_artifact_records_checksums_and_fingerprint(saved):
    target, directory = saved
    sums = json.loads((directory / "checksums.json").read_text())["sha256"]
    assert set(sums) == {"model.safetensors"} and len(sums["model.safetensors"]) == 64
    fingerprint = json.loads((directory / "config.json").read_text())["target_fingerprint"]
    assert fingerprint["rows"][0] == 0 and fingerprint["rows"][-1] == VOCAB - 1
    embedding = target.get_input_embeddings().weight.detach()
    assert fingerprint["embedding"][1][2] == pytest.approx(
        float(embedding[fingerprint["rows"][1], fingerprint["columns"][2]]))


# -- one table: every public entry, a wrong input, the error that names the problem and the fix -------------------
def _corrupt(directory, name, text=None, truncate=None):
    path = directory / name
    if truncate is not None:
        path.write_bytes(path.read_bytes()[:truncate])
    else:
        path.write_text(text)


def _load(target, directory):
    return DynaSpecAssistant.from_pretrained(directory, target=target)


def _fast_cpu(value):
    from hf_dynaspec import fast_cpu

    return fast_cpu(value)


def _bench_methods(keys):
    from hf_dynaspec.bench.methods import build_methods

    return build_methods(keys)


def _public_route(target, route, **kwargs):
    from hf_dynaspec import speculative_generate

    trees = {"chain": {}, "tree": {"trees": True}, "medusa": {}}[route]
    return target.generate(PROMPT, attention_mask=torch.ones_like(PROMPT), custom_generate=speculative_generate,
                           max_new_tokens=4, do_sample=False, **trees, **kwargs)


def _masked(target, directory, route, mask):
    """A generate() call on PROMPT with `mask` through `route` ("assistant_model" or "chain")."""
    from hf_dynaspec import speculative_generate

    assistant = _load(target, directory)
    kwargs = (dict(assistant_model=assistant) if route == "assistant_model"
              else dict(custom_generate=speculative_generate, drafter=assistant))
    return target.generate(PROMPT, attention_mask=mask, max_new_tokens=4, do_sample=False, **kwargs)


def _route(model, **kwargs):
    from hf_dynaspec.kernels.verify_rows import patch

    return patch.enable(model, **kwargs)


def _sample(row):
    from hf_dynaspec import sampling

    return sampling.sample(torch.tensor([row]))


# (id, how the mistake is made from (target, saved artifact directory), the error, what its message must say)
CASES = [
    ("from_pretrained: a file, not the directory", lambda t, d: _load(t, d / "config.json"), Exception,
     r"is a file; pass the directory"),
    ("from_pretrained: a directory that is not there", lambda t, d: _load(t, d / "missing"), Exception,
     r"neither a local directory nor a Hub repo"),
    ("from_pretrained: config.json empty", lambda t, d: (_corrupt(d, "config.json", ""), _load(t, d)), ArtifactError,
     r"config.json is corrupt .*re-download or re-save"),
    ("from_pretrained: config.json not JSON", lambda t, d: (_corrupt(d, "config.json", "{not json"), _load(t, d)),
     ArtifactError, r"config.json is corrupt"),
    ("from_pretrained: config.json a list", lambda t, d: (_corrupt(d, "config.json", "[1, 2]"), _load(t, d)),
     ArtifactError, r"must hold a JSON object, found list"),
    ("from_pretrained: weights truncated", lambda t, d: (_corrupt(d, "model.safetensors", truncate=100), _load(t, d)),
     IntegrityError, r"model.safetensors does not match the sha256 .*Re-download or re-save"),
    ("from_pretrained: weights truncated, no checksums",
     lambda t, d: ((d / "checksums.json").unlink(), _corrupt(d, "model.safetensors", truncate=100), _load(t, d)),
     ArtifactError, r"model.safetensors is corrupt or not a safetensors file .*re-download"),
    ("from_pretrained: weights missing", lambda t, d: ((d / "model.safetensors").unlink(), _load(t, d)),
     IntegrityError, r"model.safetensors is listed in checksums.json but missing: the artifact is incomplete"),
    ("from_pretrained: weights missing, no checksums",
     lambda t, d: ((d / "checksums.json").unlink(), (d / "model.safetensors").unlink(), _load(t, d)),
     ArtifactError, r"has no model.safetensors: the artifact is incomplete"),
    ("from_pretrained: target not a model", lambda t, d: DynaSpecAssistant.from_pretrained(d, target="qwen"),
     TypeError, r"target \(the model the assistant drafts for\) must be a transformers model .*got str"),
    ("from_pretrained: generation_config.json not JSON",
     lambda t, d: (_corrupt(d, "generation_config.json", "{"), _load(t, d)), ArtifactError,
     r"generation_config.json is corrupt .*re-download or re-save"),
    ("speculative_generate: no drafter", lambda t, d: _public_route(t, "chain"), ValueError,
     r"speculative_generate needs the drafter: .*drafter=assistant"),
    ("speculative_generate: a drafter of the wrong type", lambda t, d: _public_route(t, "chain", drafter="eagle"),
     TypeError, r"drafter must be one of DynaSpecAssistant, MedusaAssistant, DiffusionDrafter, got str"),
    ("speculative_generate(trees=True): a path as the drafter", lambda t, d: _public_route(t, "tree", drafter=d),
     TypeError, r"drafter must be one of DynaSpecAssistant, .*got PosixPath"),
    ("speculative_generate: the target as its own drafter", lambda t, d: _public_route(t, "medusa", drafter=t),
     TypeError, r"drafter must be one of DynaSpecAssistant, .*got \w+ForCausalLM"),
    ("speculative_generate: a Medusa option for an EAGLE assistant",
     lambda t, d: _public_route(t, "chain", drafter=_load(t, d), lattice_draft="cps"), TypeError,
     r"unknown drafting option 'lattice_draft'; the options are"),
    ("fast_cpu: not a model", lambda t, d: _fast_cpu("qwen"), TypeError, r"fast_cpu's model must be a transformers model .*got str"),
    ("bench: an unknown method", lambda t, d: _bench_methods(["vanila"]), ValueError,
     r"unknown method 'vanila'; known methods: vanilla"),
    ("bench: an assistant method without an assistant", lambda t, d: _bench_methods(["dynaspec"]), ValueError,
     r"needs an assistant: pass --assistant PATH"),
    ("verify_rows.patch.enable: rows the wrong way round", lambda t, d: _route(t, min_rows=5, max_rows=2),
     ValueError, r"needs 1 <= min_rows <= max_rows"),
    ("verify_rows.patch.enable: packed rows the wrong way round",
     lambda t, d: _route(t.to(torch.bfloat16), min_rows=0, max_rows=0, packed_rows=(9, 2)), ValueError,
     r"packed_rows \(lo, hi\) with 1 <= lo <= hi"),
    ("verify_rows.patch.enable: an unknown method", lambda t, d: _route(t, method="fast"), ValueError,
     r"method must be one of"),
    ("from_pretrained: an artifact of another vocabulary",
     lambda t, d: _load(tiny_target("llama", vocab_size=VOCAB + 4), d), AssistantMismatchError,
     rf"vocabulary {VOCAB} vs the target's {VOCAB + 4} LM-head rows\. Load or train an assistant for this target"),
    ("from_pretrained: an artifact of another hidden size",
     lambda t, d: _load(tiny_target("llama", hidden_size=48), d), AssistantMismatchError,
     r"hidden size 32 vs the target's 48\. Load or train an assistant for this target"),
    # A mask of ones only is dropped by transformers before any route sees it (it stands for "no padding"); a mask
    # with padding reaches the routes' checks.
    ("assistant_model=: a float mask with padding",
     lambda t, d: _masked(t, d, "assistant_model", torch.tensor([[0.0, 1, 1, 1, 1]])), ValueError,
     r"attention_mask must hold 0/1 as integers or bools, got torch.float32: .*attention_mask.long\(\)"),
    ("chain_generate: a float mask with padding",
     lambda t, d: _masked(t, d, "chain", torch.tensor([[0.0, 1, 1, 1, 1]])), ValueError,
     r"attention_mask must hold 0/1 as integers or bools, got torch.float32"),
    ("chain_generate: a padded mask shorter than the ids",
     lambda t, d: _masked(t, d, "chain", torch.tensor([[0, 1, 1, 1]])), ValueError,
     r"attention_mask has shape \(1, 4\) but input_ids \(1, 5\)"),
    ("sampling: a NaN row", lambda t, d: _sample([float("nan"), 1.0]), ValueError, r"NaN, infinite or all zero"),
    ("sampling: an all-zero row", lambda t, d: _sample([0.0, 0.0]), ValueError, r"every token was masked"),
]


@pytest.mark.parametrize("make_mistake,error,message", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_a_bad_input_is_refused_naming_the_problem_and_nothing_is_written(saved, make_mistake, error, message):
    target, directory = saved
    before = {path: path.stat().st_mtime_ns for path in directory.rglob("*")}
    with pytest.raises(Exception) as caught:  # any exception: a wrong one fails the assertion below, not the run
        make_mistake(target, directory)
    assert isinstance(caught.value, error) and re.search(message, str(caught.value)), repr(caught.value)
    after = {path for path in directory.rglob("*")}
    assert after <= set(before), f"files written on failure: {sorted(after - set(before))}"
