"""Every trained assistant shipped under assistants/ is a complete, safe, small Hub-layout artifact.

These checks read only the files (no target is loaded), so they hold for artifacts whose target CI does not fetch
(the 1.5B). What they catch: packaging in fp32 (twice the size), a pickled or missing weight file, a config that
disagrees with its weights or names another target, a shortlist index outside the vocabulary, a model card
without its measured results or training commands.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from hf_dynaspec import DynaSpecConfig, zoo
from hf_dynaspec.bench.runner import SHIPPED_ASSISTANTS

MAX_BYTES = 60 * 1024 * 1024  # the recipes issue: each shipped artifact under ~60 MB
def _model_type(path) -> str | None:
    return json.loads((path / "config.json").read_text()).get("model_type")


SHIPPED_ALL = sorted(path for path in SHIPPED_ASSISTANTS.iterdir() if path.is_dir())
SHIPPED = [path for path in SHIPPED_ALL if _model_type(path) == "dynaspec"]
SHIPPED_MEDUSA = [path for path in SHIPPED_ALL if _model_type(path) == "dynaspec-medusa"]


def test_every_shipped_folder_is_an_assistant_or_medusa_heads():
    assert SHIPPED_ALL == sorted(SHIPPED + SHIPPED_MEDUSA)


def test_both_qwen_targets_have_a_shipped_assistant():
    assert {path.name for path in SHIPPED} >= {"qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"}


def tensors(path):
    with safe_open(path / "model.safetensors", "pt") as handle:
        return {key: handle.get_tensor(key) for key in handle.keys()}


@pytest.mark.parametrize("path", SHIPPED + SHIPPED_MEDUSA, ids=lambda p: p.name)
def test_artifact_files_are_safe_small_and_complete(path):
    names = {file.name for file in path.iterdir()}
    assert {"config.json", "model.safetensors", "README.md", "card.json"} <= names, names
    assert not any(name.endswith((".bin", ".pt", ".pkl", ".pth")) for name in names), names  # nothing to unpickle
    size = sum(file.stat().st_size for file in path.iterdir())
    assert size < MAX_BYTES, f"{path.name}: {size / 2**20:.1f} MB"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_config_matches_its_target_and_its_weights(path):
    config = DynaSpecConfig.from_pretrained(path)
    assert config.target_name_or_path == path.name and path.name in zoo.ZOO
    weights = tensors(path)
    floating = {key: t.dtype for key, t in weights.items() if t.is_floating_point()}
    assert set(floating.values()) == {torch.bfloat16}, floating
    hidden, target_hidden = config.hidden_size, config.target_hidden_size
    assert weights["drafter.fc.weight"].shape == (hidden, 2 * target_hidden)
    assert weights["drafter.layers.0.mlp.gate_proj.weight"].shape == (config.intermediate_size, hidden)
    assert weights["drafter.layers.0.self_attn.q_proj.weight"].shape == (
        config.num_attention_heads * config.head_dim, hidden)
    for key in ("always_ids", "cluster_token_order", "frequency_ids"):
        ids = weights[f"shortlists.{key}"]
        assert ids.numel() > 0 and 0 <= int(ids.min()) and int(ids.max()) < config.vocab_size, key
    offsets = weights["shortlists.cluster_offsets"]
    assert offsets.numel() == config.num_clusters + 1 and int(offsets[-1]) == weights["shortlists.cluster_token_order"].numel()
    # Clusters plus the always-scored core partition the vocabulary: every token is reachable by some shortlist.
    covered = torch.cat([weights["shortlists.cluster_token_order"], weights["shortlists.always_ids"]]).unique()
    assert covered.numel() == config.vocab_size


@pytest.mark.parametrize("path", SHIPPED + SHIPPED_MEDUSA, ids=lambda p: p.name)
def test_model_card_records_results_and_commands(path):
    card = json.loads((path / "card.json").read_text())
    assert card["training"].get("commands") or card["training"].get("command"), \
        "the card must say how the artifact was made"
    readme = (path / "README.md").read_text()
    assert "| tau" in readme or "tau |" in readme, "the model card must carry the measured table"
    assert "python -m recipes." in readme


@pytest.mark.parametrize("path", SHIPPED_MEDUSA, ids=lambda p: p.name)
def test_medusa_heads_match_their_target_and_config(path):
    from hf_dynaspec import MedusaConfig

    config = MedusaConfig.from_pretrained(path)
    target = path.name.removesuffix("-medusa")
    assert config.target_name_or_path == target and target in zoo.ZOO
    weights = tensors(path)
    assert {t.dtype for t in weights.values() if t.is_floating_point()} == {torch.bfloat16}
    for k in range(config.num_heads):
        for j in range(config.num_layers):
            assert weights[f"blocks.{k}.layers.{j}.weight"].shape == (config.hidden_size, config.hidden_size)
    ids = weights["frequency_ids"]
    assert ids.numel() == config.frequency_list_size and int(ids.max()) < config.vocab_size
    assert ids.unique().numel() == ids.numel()
