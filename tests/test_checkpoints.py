"""Save/load round trips, the published EAGLE layouts, and every bad artifact a user can hand us."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from checkpoint_replicas import eagle1_checkpoint, eagle3_checkpoint, llama_style_config
from conftest import VOCAB, assisted_generate, plain_generate, random_assistant, tiny_target

from hf_dynaspec import (
    ArtifactError,
    AssistantMismatchError,
    DynaSpecAssistant,
    DynaSpecConfig,
    DynaSpecGenerationConfig,
    UnsupportedTargetError,
)


def assert_same_weights(a: DynaSpecAssistant, b: DynaSpecAssistant):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype, key
        assert torch.equal(sa[key], sb[key]), key


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_save_load_round_trip_is_bit_exact(tmp_path, family, kind):
    target = tiny_target(family)
    extra = dict(drafter_kind="eagle3", draft_vocab_size=50, aux_hidden_state_layer_ids=[1, 2, 3]) if kind == "eagle3" else {}
    assistant = random_assistant(target, **extra)
    if kind == "eagle3":
        with torch.no_grad():
            assistant.drafter.d2t.copy_(torch.arange(50) % 7)
    assistant.save_pretrained(tmp_path)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert "model.safetensors" in files and "config.json" in files
    assert not any(name.endswith((".bin", ".pt")) for name in files)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    assert_same_weights(assistant, loaded)
    assert loaded.config.to_dict() == assistant.config.to_dict()
    input_ids = torch.randint(0, VOCAB, (1, 6))
    first = assisted_generate(target, assistant, input_ids, max_new_tokens=12)
    assert torch.equal(assisted_generate(target, loaded, input_ids, max_new_tokens=12), first)
    assert loaded.stats.as_dict() == assistant.stats.as_dict()


def test_target_weights_are_never_saved(tmp_path):
    target = tiny_target("qwen2")
    assistant = DynaSpecAssistant.from_target(target)
    assistant.save_pretrained(tmp_path)
    from safetensors import safe_open

    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert keys and all(k.startswith(("drafter.", "shortlists.")) for k in keys)
    assert not any("embed_tokens" in k or "lm_head" in k or k.endswith("drafter.norm.weight") for k in keys)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["library_version"] and config["vocab_size"] == VOCAB and config["model_type"] == "dynaspec"


def test_config_stamps_version_and_warns_on_unknown_keys():
    from hf_dynaspec import __version__

    assert DynaSpecConfig().library_version == __version__
    with pytest.warns(UserWarning, match="unknown keys"):
        config = DynaSpecConfig.from_dict({"model_type": "dynaspec", "from_the_future": 1})
    assert config.from_the_future == 1
    with pytest.raises(ValueError, match="drafter_kind"):
        DynaSpecConfig(drafter_kind="medusa")
    with pytest.raises(ValueError, match="aux_hidden_state_layer_ids"):
        DynaSpecConfig(drafter_kind="eagle3", draft_vocab_size=10, aux_hidden_state_layer_ids=[1])
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="assistant_confidence_threshold"):
            DynaSpecGenerationConfig(assistant_confidence_threshold=bad)
    with pytest.raises(TypeError, match="drafting options"):  # options are not architecture
        DynaSpecConfig(num_assistant_tokens=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a key this release writes must not be reported as unknown
        config = DynaSpecConfig(drafter_kind="eagle3", draft_vocab_size=10, aux_hidden_state_layer_ids=[1, 2, 3])
        assert DynaSpecConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
        options = DynaSpecGenerationConfig(assistant_confidence_threshold=0.4, tree_depth=6)
        assert DynaSpecGenerationConfig.from_dict(options.to_dict()).drafting_options() == options.drafting_options()


# -- published EAGLE layouts, built locally -------------------------------------------------------------


def test_loads_published_eagle1_layout(tmp_path):
    target = tiny_target("llama")
    state = eagle1_checkpoint(tmp_path / "eagle", target)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path / "eagle", target=target)
    config = assistant.config
    assert config.drafter_kind == "eagle" and config.fc_bias and not config.use_target_norm
    loaded = assistant.state_dict()
    for key, value in state.items():
        if key != "embed_tokens.weight":
            assert torch.equal(loaded["drafter." + key], value), key
    input_ids = torch.randint(0, VOCAB, (1, 5))
    expected = plain_generate(target, input_ids, max_new_tokens=15)
    assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=15), expected)
    # Re-saved in our own format, it loads back bit-exact.
    assistant.save_pretrained(tmp_path / "ours")
    assert_same_weights(assistant, DynaSpecAssistant.from_pretrained(tmp_path / "ours", target=target))


@pytest.mark.parametrize("vllm_names", [False, True])
def test_loads_published_eagle3_layout(tmp_path, vllm_names):
    target = tiny_target("llama")
    state = eagle3_checkpoint(tmp_path / "e3", target, vllm_names=vllm_names)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path / "e3", target=target)
    assert assistant.config.drafter_kind == "eagle3"
    # eagle_aux_hidden_state_layer_ids name layer outputs: hidden_states[i + 1].
    assert assistant.config.aux_hidden_state_layer_ids == [1, 2, 3]
    assert torch.equal(assistant.drafter.draft_to_target_ids(), torch.arange(0, 80, 2))
    assert torch.equal(assistant.drafter.lm_head.weight, state["lm_head.weight"])
    input_ids = torch.randint(0, VOCAB, (1, 5))
    expected = plain_generate(target, input_ids, max_new_tokens=15)
    got = assisted_generate(target, assistant, input_ids, max_new_tokens=15, do_sample=False)
    assert torch.equal(got, expected)


def test_eagle3_default_layers_come_from_the_target(tmp_path):
    target = tiny_target("llama", num_hidden_layers=8)
    eagle3_checkpoint(tmp_path / "e3", target)
    config = json.loads((tmp_path / "e3" / "config.json").read_text())
    del config["eagle_config"]
    (tmp_path / "e3" / "config.json").write_text(json.dumps(config))
    assistant = DynaSpecAssistant.from_pretrained(tmp_path / "e3", target=target)
    assert assistant.config.aux_hidden_state_layer_ids == [2, 4, 5]
    with pytest.raises(ArtifactError, match="target="):
        DynaSpecAssistant.from_pretrained(tmp_path / "e3")


def test_narrow_drafter_starts_from_the_strongest_channels_of_the_target_mlp(tmp_path):
    target = tiny_target("qwen2")  # MLP width 64
    last = target.get_decoder().layers[-1]
    assistant = DynaSpecAssistant.from_target(target, intermediate_size=24)
    layer = assistant.drafter.layers[0]
    gate, up, down = (w.detach() for w in (last.mlp.gate_proj.weight, last.mlp.up_proj.weight, last.mlp.down_proj.weight))
    score = {i: float(gate[i].norm() * up[i].norm() * down[:, i].norm()) for i in range(64)}
    keep = sorted(sorted(score, key=score.get, reverse=True)[:24])
    assert torch.equal(layer.mlp.gate_proj.weight, gate[keep])
    assert torch.equal(layer.mlp.up_proj.weight, up[keep])
    assert torch.equal(layer.mlp.down_proj.weight, down[:, keep])
    assert torch.equal(layer.self_attn.o_proj.weight, last.self_attn.o_proj.weight)
    assistant.save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    assert loaded.config.intermediate_size == 24
    assert_same_weights(assistant, loaded)
    input_ids = torch.randint(0, VOCAB, (1, 6))
    assert torch.equal(assisted_generate(target, loaded, input_ids, max_new_tokens=12),
                       plain_generate(target, input_ids, max_new_tokens=12))


def test_refuses_eagle3_without_d2t(tmp_path):
    target = tiny_target("llama")
    eagle3_checkpoint(tmp_path / "e3", target, with_d2t=False)
    with pytest.raises(ArtifactError, match="d2t"):
        DynaSpecAssistant.from_pretrained(tmp_path / "e3", target=target)


# -- bad input --------------------------------------------------------------------------------------------


def test_refuses_assistant_built_for_another_target(tmp_path):
    assistant = DynaSpecAssistant.from_target(tiny_target("qwen2"))
    assistant.save_pretrained(tmp_path)
    other_vocab = tiny_target("qwen2", vocab_size=VOCAB + 3)
    with pytest.raises(AssistantMismatchError, match="vocabulary 97 vs the target's 100"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=other_vocab)
    other_hidden = tiny_target("qwen2", hidden_size=48)
    with pytest.raises(AssistantMismatchError, match="hidden size 32 vs the target's 48"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=other_hidden)
    other_family = tiny_target("llama")
    with pytest.raises(AssistantMismatchError, match="family 'qwen2' vs 'llama'"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=other_family)


def test_refuses_an_assistant_attached_to_another_model_object():
    first, second = tiny_target("llama"), tiny_target("llama")
    assistant = DynaSpecAssistant.from_target(first)
    with pytest.raises(AssistantMismatchError, match="attach"):
        assisted_generate(second, assistant, torch.tensor([[1, 2, 3]]), max_new_tokens=4)


def test_batches_on_the_assistant_route_decode_per_row_and_bad_ones_are_refused():
    """A batch (or one padded prompt) passed with assistant_model= goes to the batched public loop
    (hf_dynaspec.generation.hook; tests/test_batched.py checks it at 3 and 8 rows); right padding and streaming a
    batch are refused by name."""
    from transformers.generation.streamers import BaseStreamer

    class Collecting(BaseStreamer):
        def put(self, value):
            pass

        def end(self):
            pass

    target = tiny_target("llama")
    assistant = DynaSpecAssistant.from_target(target)
    batch = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(0))
    out = target.generate(batch, attention_mask=torch.ones_like(batch), assistant_model=assistant, max_new_tokens=3,
                          do_sample=False)
    for row in range(2):
        assert torch.equal(out[row], plain_generate(target, batch[row : row + 1], max_new_tokens=3)[0])
    single = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(1))
    padded = target.generate(single, attention_mask=torch.tensor([[0, 1, 1, 1, 1]]), assistant_model=assistant,
                             max_new_tokens=3, do_sample=False, pad_token_id=0)
    assert torch.equal(padded[0, 5:], plain_generate(target, single[:, 1:], max_new_tokens=3)[0, 4:])
    with pytest.raises(ValueError, match="padding_side='left'"):
        target.generate(batch, attention_mask=torch.tensor([[1, 1, 1, 1, 0]] * 2), assistant_model=assistant,
                        max_new_tokens=3)
    with pytest.raises(ValueError, match="streaming a batch"):
        target.generate(batch, attention_mask=torch.ones_like(batch), assistant_model=assistant, max_new_tokens=3,
                        streamer=Collecting())


def test_refuses_unsupported_target_family():
    from transformers import GPT2Config, GPT2LMHeadModel

    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2))
    with pytest.raises(UnsupportedTargetError, match="cannot mirror a 'gpt2' target"):
        DynaSpecAssistant.from_target(gpt2)


def test_missing_and_corrupt_files(tmp_path):
    target = tiny_target("llama")
    DynaSpecAssistant.from_target(target).save_pretrained(tmp_path / "ok")
    with pytest.raises(ArtifactError, match="is a file; pass the directory"):
        DynaSpecAssistant.from_pretrained(tmp_path / "ok" / "model.safetensors")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ArtifactError, match="no config.json"):
        DynaSpecAssistant.from_pretrained(empty)

    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    (no_weights / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    with pytest.raises(ArtifactError, match="incomplete"):
        DynaSpecAssistant.from_pretrained(no_weights)

    truncated = tmp_path / "truncated"
    truncated.mkdir()
    (truncated / "config.json").write_text((tmp_path / "ok" / "config.json").read_text())
    data = (tmp_path / "ok" / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ArtifactError, match="corrupt"):
        DynaSpecAssistant.from_pretrained(truncated)

    bad_json = tmp_path / "bad_json"
    bad_json.mkdir()
    (bad_json / "config.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="corrupt"):
        DynaSpecAssistant.from_pretrained(bad_json)


def test_refuses_pickled_checkpoints_without_unpickling(tmp_path, monkeypatch):
    """.pt/.pth/.pkl/.ckpt files are never opened at all."""
    directory = tmp_path / "pickled"
    directory.mkdir()
    target = tiny_target("llama")
    (directory / "config.json").write_text(json.dumps(llama_style_config(target)))
    torch.save({"fc.weight": torch.zeros(2, 2)}, directory / "drafter.pt")

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called on an untrusted checkpoint")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(ArtifactError, match="never unpickles"):
        DynaSpecAssistant.from_pretrained(directory, target=target)


class _RunsCode:
    """A pickle that would run a command when unpickled without weights_only."""

    def __reduce__(self):
        import os

        return (os.system, ("touch /tmp/hf_dynaspec_pickle_ran",))


def test_a_bin_file_that_needs_more_than_tensors_is_refused_before_it_runs(tmp_path):
    import pathlib

    marker = pathlib.Path("/tmp/hf_dynaspec_pickle_ran")
    marker.unlink(missing_ok=True)
    target = tiny_target("llama")
    directory = tmp_path / "evil"
    eagle1_checkpoint(directory, target, fmt="bin")
    torch.save({"fc.weight": torch.zeros(2, 2), "payload": _RunsCode()}, directory / "pytorch_model.bin")
    with pytest.raises(ArtifactError, match=r"weights_only=True"):
        DynaSpecAssistant.from_pretrained(directory, target=target)
    assert not marker.exists()


def test_weights_that_do_not_match_the_config(tmp_path):
    target = tiny_target("llama")
    assistant = DynaSpecAssistant.from_target(target)
    assistant.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["intermediate_size"] = 80
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ArtifactError, match="wrong shape"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=target)


def test_unknown_hub_repo_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ArtifactError, match="neither a local directory nor a Hub repo"):
        DynaSpecAssistant.from_pretrained("nobody/no-such-assistant")


def test_model_card_says_what_is_and_is_not_recorded(tmp_path):
    assistant = DynaSpecAssistant.from_target(tiny_target("llama"))
    assistant.save_pretrained(tmp_path / "bare")
    card = (tmp_path / "bare" / "README.md").read_text()
    assert "No measurements were recorded" in card and "No training record" in card
    assert not (tmp_path / "bare" / "card.json").exists()
    assert "prompt lookup" not in card
    assistant.generation_config.prompt_lookup_num_tokens = 5
    assistant.save_pretrained(tmp_path / "lookup")
    assert "prompt lookup first: up to 5 tokens copied after an earlier 2-3-gram match" in (
        tmp_path / "lookup" / "README.md").read_text()
    assistant.generation_config.prompt_lookup_num_tokens = 0
    assistant.card_data = {"training": {"command": "python -m recipes.train_drafter ..."},
                           "results": {"n_prompts": 7, "methods": {"vanilla": {"tau": None, "speedup": 1.0, "exact": True},
                                                                   "dynaspec": {"tau": 2.61, "avg_shortlist": 30123.4,
                                                                                "speedup": 1.31, "exact": True}}}}
    assistant.save_pretrained(tmp_path / "trained")
    card = (tmp_path / "trained" / "README.md").read_text()
    assert "| dynaspec | 2.61 | 30,123 | 1.31x | yes |" in card and "python -m recipes.train_drafter" in card
    assert "on 7 prompts" in card
    # Nested training records read as bullets, numbers rounded, command lines as a bash block.
    assistant.card_data = {"training": {"features": [{"tokens": 38038, "conversations": "sd"}, {"tokens": 133025}],
                                        "val_top1_pos1": 0.2650306748466258,
                                        "commands": "python -m recipes.self_distill ...\npython -m recipes.train_drafter ..."}}
    assistant.save_pretrained(tmp_path / "nested")
    card = (tmp_path / "nested" / "README.md").read_text()
    assert "- features:\n  - 1:\n    - tokens: 38,038\n    - conversations: sd\n  - 2:\n    - tokens: 133,025" in card
    assert "- val_top1_pos1: 0.265\n" in card and "{'tokens'" not in card
    assert "```bash\npython -m recipes.self_distill ...\npython -m recipes.train_drafter ...\n```" in card

def test_push_command_uploads_a_saved_artifact(tmp_path, capsys):
    from hub_server import FakeHub

    from hf_dynaspec.cli import main

    DynaSpecAssistant.from_target(tiny_target("llama")).save_pretrained(tmp_path / "artifact")
    with FakeHub() as hub:
        assert main(["push", str(tmp_path / "artifact"), "team/tiny-assistant", "--endpoint", hub.endpoint]) == 0
    assert {"config.json", "model.safetensors", "README.md"} <= set(hub.repos["team/tiny-assistant"])
    assert hub.repos["team/tiny-assistant"]["config.json"] == (tmp_path / "artifact" / "config.json").read_bytes()


@pytest.mark.parametrize("artifact", ["missing", "a file", "corrupt"])
def test_push_refuses_what_is_not_a_loadable_local_artifact_and_uploads_nothing(tmp_path, capsys, artifact):
    """`push` uploads a saved artifact directory only after it loads: a missing path, a file or a corrupt artifact
    is refused with an error naming the fix (exit 2), and the Hub receives nothing."""
    from hub_server import FakeHub

    from hf_dynaspec.cli import main

    DynaSpecAssistant.from_target(tiny_target("llama")).save_pretrained(tmp_path / "artifact")
    (tmp_path / "artifact" / "config.json").write_text("{not json")
    (tmp_path / "notes.txt").write_text("mine")
    path, message = {"missing": (tmp_path / "nothing", "is not a local directory"),
                     "a file": (tmp_path / "notes.txt", "is not a local directory"),
                     "corrupt": (tmp_path / "artifact", "config.json is corrupt")}[artifact]
    with FakeHub() as hub:
        assert main(["push", str(path), "team/tiny-assistant", "--endpoint", hub.endpoint]) == 2
        requests = list(hub.requests)
    assert message in capsys.readouterr().err
    assert "team/tiny-assistant" not in hub.repos and not [r for r in requests if r[0] in ("POST", "PUT")], requests
