"""Tiny replicas of the public EAGLE checkpoints, with their exact file names, key names and config fields, each
loaded as published and decoding exactly against a tiny target of its family.

Layouts followed (read from the projects' own code, not guessed):
- EAGLE-1/2 (yuhuili/EAGLE-Vicuna-7B-v1.3, yuhuili/EAGLE-LLaMA3-Instruct-8B, yuhuili/EAGLE-Qwen2-7B-Instruct):
  SafeAILab/EAGLE eagle/model/cnets1.py (`fc` with a bias unless the config's `bias` is false, one decoder layer
  whose first input norm is skipped, q/k/v biases when the config has `qkv_bias`, o_proj never biased) and
  eagle/model/ea_model.py (weights in `pytorch_model.bin`, else `model.safetensors`; `bias` defaults to true).
  The configs are llama-style (eagle/train/vicuna_7B_config.json's fields; no `bias` key there).
- EAGLE-3 (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B): eagle/model/cnets.py and eagle/traineagle3/config.json
  (`draft_vocab_size`, keys `midlayer.*`, `fc.weight` over three target layers, `norm`, `lm_head`, `d2t`, `t2d`).
- SpecForge EAGLE-3 output: sgl-project/SpecForge specforge/modeling/draft/llama3_eagle.py
  (`LlamaForCausalLMEagle3`: the same keys plus its copied `embed_tokens.weight`, saved as model.safetensors).
"""

from __future__ import annotations

import json

import pytest
import torch
from checkpoint_replicas import eagle1_checkpoint, eagle3_checkpoint
from conftest import VOCAB, assisted_generate, plain_generate, tiny_target

from hf_dynaspec import DynaSpecAssistant

VICUNA_FIELDS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=0, initializer_range=0.02,
                     tie_word_embeddings=False, torch_dtype="float16", transformers_version="4.28.1", use_cache=True)

REPLICAS = {
    # name: (target family, checkpoint builder)
    "EAGLE-Vicuna-7B-v1.3": ("llama", lambda d, t: eagle1_checkpoint(d, t, fmt="bin", config_bias_key=False,
                                                                     **VICUNA_FIELDS)),
    "EAGLE-LLaMA3-Instruct-8B": ("llama", lambda d, t: eagle1_checkpoint(d, t, fmt="bin", bias=True,
                                                                         bos_token_id=128000, eos_token_id=128001)),
    "EAGLE-Qwen2-7B-Instruct": ("qwen2", lambda d, t: eagle1_checkpoint(d, t, fmt="bin", bias=True, qkv_bias=True,
                                                                        architectures=["Qwen2ForCausalLM"])),
    "EAGLE3-LLaMA3.1-Instruct-8B": ("llama", lambda d, t: eagle3_checkpoint(d, t, fmt="bin", layer_ids=None,
                                                                            bos_token_id=128000)),
    "SpecForge EAGLE-3": ("llama", lambda d, t: eagle3_checkpoint(
        d, t, embed=True, architectures=["LlamaForCausalLMEagle3"], target_hidden_size=t.config.hidden_size)),
}


@pytest.mark.parametrize("name", list(REPLICAS))
def test_a_public_layout_loads_as_published_and_decodes_exactly(tmp_path, name):
    family, build = REPLICAS[name]
    target = tiny_target(family, num_hidden_layers=6)
    state = build(tmp_path / "ckpt", target)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path / "ckpt", target=target)
    loaded = assistant.state_dict()
    renamed = {k.replace("layers.0.", "midlayer.") if assistant.config.drafter_kind == "eagle3" else k: v
               for k, v in state.items() if k != "embed_tokens.weight"}
    for key, value in renamed.items():  # every published tensor arrived, under our name, unchanged
        assert torch.equal(loaded["drafter." + key].to(value.dtype), value), key
    if "qkv_bias" in json.loads((tmp_path / "ckpt" / "config.json").read_text()):
        assert assistant.config.layer_family == "qwen2"  # biased q/k/v, unbiased o_proj, as cnets1.py builds it
        assert "drafter.layers.0.self_attn.o_proj.bias" not in loaded
    for seed in range(2):
        input_ids = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, input_ids, max_new_tokens=16)
        assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=16), expected)
    assert assistant.stats.verify_passes > 0


def test_convert_writes_a_public_checkpoint_as_our_safetensors_artifact(tmp_path):
    from hf_dynaspec.cli import main

    target = tiny_target("qwen2", num_hidden_layers=6)
    eagle1_checkpoint(tmp_path / "published", target, fmt="bin", qkv_bias=True)
    target.save_pretrained(tmp_path / "target")
    main(["convert", str(tmp_path / "published"), "--target", str(tmp_path / "target"), "--out", str(tmp_path / "ours")])
    assert (tmp_path / "ours" / "model.safetensors").is_file() and not list((tmp_path / "ours").glob("*.bin"))
    ours = DynaSpecAssistant.from_pretrained(tmp_path / "ours", target=target)
    published = DynaSpecAssistant.from_pretrained(tmp_path / "published", target=target)
    for key, value in published.state_dict().items():
        assert torch.equal(ours.state_dict()[key], value), key


def test_a_bin_hub_repository_loads_through_the_local_hub_endpoint(tmp_path):
    """A Hub id whose repository ships only pytorch_model.bin (as the EAGLE repositories do) is downloaded and
    read with torch.load(weights_only=True), through the real huggingface_hub client against a local stand-in."""
    from hub_server import FakeHub

    target = tiny_target("llama", num_hidden_layers=6)
    state = eagle1_checkpoint(tmp_path / "repo", target, fmt="bin")
    with FakeHub() as hub:
        hub.add_repo("yuhuili/EAGLE-tiny", tmp_path / "repo")
        # Hub keyword arguments reach huggingface_hub's snapshot_download (HF_ENDPOINT is read at its import)
        assistant = DynaSpecAssistant.from_pretrained("yuhuili/EAGLE-tiny", target=target, endpoint=hub.endpoint,
                                                      cache_dir=str(tmp_path / "cache"))
        fetched = {path.split("/")[-1] for method, path in hub.requests if method == "GET" and "/resolve/" in path}
    assert fetched == {"config.json", "pytorch_model.bin"}  # .bin fetched only because no safetensors exist
    assert torch.equal(assistant.state_dict()["drafter.fc.weight"], state["fc.weight"])
    input_ids = torch.randint(0, VOCAB, (1, 6))
    assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=12),
                       plain_generate(target, input_ids, max_new_tokens=12))


@pytest.mark.parametrize("out", ["the source", "a file", "a missing target"])
def test_convert_refuses_a_bad_output_or_target_and_writes_nothing(tmp_path, capsys, out):
    """`convert` never writes over the published checkpoint or onto a file, and a target it cannot load stops it
    before anything is written: each with an error naming the fix (exit 2)."""
    from hf_dynaspec.cli import main

    target = tiny_target("qwen2", num_hidden_layers=6)
    eagle1_checkpoint(tmp_path / "published", target, fmt="bin", qkv_bias=True)
    target.save_pretrained(tmp_path / "target")
    (tmp_path / "notes.txt").write_text("mine")
    before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    destination, target_dir, message = {
        "the source": (tmp_path / "published", tmp_path / "target", "is the published checkpoint itself"),
        "a file": (tmp_path / "notes.txt", tmp_path / "target", "is a file: name a directory"),
        "a missing target": (tmp_path / "ours", tmp_path / "no-target", "no-target"),
    }[out]
    try:
        code = main(["convert", str(tmp_path / "published"), "--target", str(target_dir), "--out", str(destination)])
    except Exception as error:  # a target that cannot be loaded: the loader's own error, naming the path
        assert message in str(error), repr(error)
    else:
        assert code == 2 and message in capsys.readouterr().err
    after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
    assert after == before, "convert wrote or changed files"
