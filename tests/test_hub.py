"""Publishing and finding an assistant the ecosystem's way: push_to_hub with transformers' parameters against a
local HTTP stand-in of the Hub (no network here), and transformers' Auto classes."""

from __future__ import annotations

import torch
from conftest import tiny_target

from hf_dynaspec import DynaSpecAssistant


def test_push_to_hub_uploads_the_whole_artifact_over_http(tmp_path):
    """The real huggingface_hub upload code runs against a local HTTP stand-in of the Hub (no network here)."""
    from hub_server import FakeHub

    target = tiny_target("qwen2")
    assistant = DynaSpecAssistant.from_target(target)
    assistant.card_data = {"training": {"tokens": 1234}, "results": {"methods": {"eagle": {"tau": 2.5, "exact": True}}}}
    with FakeHub() as hub:
        assistant.push_to_hub("me/assistant", token="hf_not_a_real_token", endpoint=hub.endpoint)
    files = hub.repos["me/assistant"]
    assert sorted(files) == ["README.md", "card.json", "checksums.json", "config.json", "generation_config.json",
                            "model.safetensors"]
    (tmp_path / "pulled").mkdir()
    for name, content in files.items():
        (tmp_path / "pulled" / name).write_bytes(content)
    pulled = DynaSpecAssistant.from_pretrained(tmp_path / "pulled", target=target)
    for (name, a), (_, b) in zip(assistant.state_dict().items(), pulled.state_dict().items()):
        assert torch.equal(a, b), name
    assert pulled.card_data == assistant.card_data
    card = files["README.md"].decode()
    assert card.startswith("---\n") and "library_name: hf-dynaspec" in card and "| eagle | 2.50 |" in card


def test_push_to_hub_takes_transformers_parameters_and_hf_endpoint(tmp_path, monkeypatch):
    """transformers' push_to_hub parameters (commit message and description, shards, tags) and the Hub server from
    $HF_ENDPOINT read at call time; the sharded upload loads back."""
    from hub_server import FakeHub
    from huggingface_hub import ModelCard

    target = tiny_target("qwen2")
    assistant = DynaSpecAssistant.from_target(target)
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        assistant.push_to_hub("me/sharded", token="hf_not_a_real_token", commit_message="v2 drafter",
                              commit_description="trained on my data", max_shard_size="20KB", tags=["my-tag"])
    files = hub.repos["me/sharded"]
    shards = sorted(name for name in files if name.startswith("model-") and name.endswith(".safetensors"))
    assert len(shards) > 1 and "model.safetensors.index.json" in files
    assert hub.commits[-1]["summary"] == "v2 drafter" and hub.commits[-1]["description"] == "trained on my data"
    (tmp_path / "pulled").mkdir()
    for name, content in files.items():
        (tmp_path / "pulled" / name).write_bytes(content)
    assert "my-tag" in ModelCard.load(tmp_path / "pulled" / "README.md").data.tags
    pulled = DynaSpecAssistant.from_pretrained(tmp_path / "pulled", target=target)
    for (name, a), (_, b) in zip(assistant.state_dict().items(), pulled.state_dict().items()):
        assert torch.equal(a, b), name


def test_transformers_auto_classes_load_an_assistant(tmp_path):
    from transformers import AutoConfig, AutoModel

    from hf_dynaspec import DynaSpecConfig

    target = tiny_target("llama")
    assistant = DynaSpecAssistant.from_target(target, num_assistant_tokens=3)
    assistant.save_pretrained(tmp_path)
    assert isinstance(AutoConfig.from_pretrained(tmp_path), DynaSpecConfig)
    loaded = AutoModel.from_pretrained(tmp_path)
    assert isinstance(loaded, DynaSpecAssistant) and loaded.generation_config.num_assistant_tokens == 3
    for (name, a), (_, b) in zip(assistant.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(a, b), name
