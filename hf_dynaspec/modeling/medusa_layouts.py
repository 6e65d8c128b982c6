"""Reading Medusa heads as they were published, into `MedusaAssistant`'s keys (vLLM's names).

Three layouts, told apart by config.json:

- **hf-dynaspec** (`model_type: "dynaspec-medusa"`): `MedusaConfig` and `model.safetensors`, as saved here.
- **FasterDecoding/Medusa** (`medusa_num_heads`, `medusa_num_layers`, `base_model_name_or_path`): the heads are
  the state dict of an `nn.ModuleList` of `nn.Sequential(ResBlock * L, Linear(D, V, bias=False))`, saved as
  `medusa_lm_head.safetensors` or `medusa_lm_head.pt`; keys `{k}.{j}.linear.weight|bias` (block j of head k) and
  `{k}.{L}.weight` (head k's projection). Its Sequential repeats one ResBlock object L times, so the L blocks
  of a head hold the same values: loaded as L blocks, the same function.
- **vLLM** (`model_type: "medusa"`, `num_heads`, `num_hidden_layers`): `blocks.{k}.layers.{j}.weight|bias`
  (bias with `medusa_fc_bias`), `lm_heads.{k}.weight`, maybe under `medusa_heads.`; `original_lm_head: true`
  stores one projection (`lm_heads.0.weight`) shared by every head; `truncated_vocab_size` < `vocab_size` with a
  `token_map` tensor (the target id of each head row).

Pickled `.pt`/`.bin` weights are read only with `torch.load(weights_only=True)` (hf_dynaspec.modeling.checkpoints).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from hf_dynaspec.errors import ArtifactError
from hf_dynaspec.modeling import checkpoints

OWN_MODEL_TYPE = "dynaspec-medusa"  # MedusaConfig.model_type
FASTER_DECODING_FILES = ("medusa_lm_head.safetensors", "medusa_lm_head.pt", "medusa_lm_head.bin")


def read_medusa(directory: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(`MedusaConfig` fields, state dict in MedusaAssistant's keys) of the heads in `directory`, whichever
    layout. (Fields, not a config: hf_dynaspec.modeling.medusa builds it, and imports this module.)"""
    config = checkpoints.read_config_dict(directory)
    if config.get("model_type") == OWN_MODEL_TYPE:
        return config, checkpoints.read_state_dict(directory)
    if "medusa_num_heads" in config:
        return _faster_decoding(directory, config)
    if config.get("model_type") == "medusa" or "num_heads" in config:
        return _vllm(directory, config)
    raise ArtifactError(
        f"{directory}/config.json describes no Medusa heads (no model_type 'dynaspec-medusa', no "
        "'medusa_num_heads' as FasterDecoding writes, no 'num_heads' as vLLM's Medusa config has).")


def _faster_decoding(directory: Path, config: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    file = next((directory / name for name in FASTER_DECODING_FILES if (directory / name).is_file()), None)
    if file is None:
        raise ArtifactError(f"{directory} has a FasterDecoding Medusa config but none of {FASTER_DECODING_FILES}.")
    raw = checkpoints.load_safetensors(file) if file.suffix == ".safetensors" else checkpoints.load_bin(file)
    raw = {key.removeprefix("medusa_head."): value for key, value in raw.items()}
    num_heads, num_layers = int(config["medusa_num_heads"]), int(config.get("medusa_num_layers", 1))
    state = {}
    for key, value in raw.items():
        match = re.fullmatch(r"(\d+)\.(\d+)\.(?:linear\.)?(weight|bias)", key)
        if match is None:
            raise ArtifactError(f"{file}: unexpected key {key!r} for FasterDecoding's Medusa layout.")
        head, index, kind = int(match[1]), int(match[2]), match[3]
        if index < num_layers and key.endswith(f"{index}.linear.{kind}"):
            state[f"blocks.{head}.layers.{index}.{kind}"] = value
        elif index == num_layers and kind == "weight":
            state[f"lm_heads.{head}.weight"] = value
        else:
            raise ArtifactError(f"{file}: key {key!r} does not fit medusa_num_layers={num_layers}.")
    projection = state.get("lm_heads.0.weight")
    if projection is None:
        raise ArtifactError(f"{file}: no head projection ('0.{num_layers}.weight') found.")
    vocab, width = projection.shape  # (no token map nor shortlist: their empty buffers need no stored tensor)
    return dict(num_heads=num_heads, num_layers=num_layers, hidden_size=width, vocab_size=vocab, own_heads=True,
                block_bias=True, target_name_or_path=config.get("base_model_name_or_path")), state


def _vllm(directory: Path, config: dict) -> tuple[dict, dict[str, torch.Tensor]]:
    raw = {key.removeprefix("medusa_heads."): value for key, value in checkpoints.read_state_dict(directory).items()}
    num_heads = int(config["num_heads"])
    vocab = int(config["vocab_size"])
    truncated = int(config.get("truncated_vocab_size") or vocab)
    token_map = raw.pop("token_map", None)
    if truncated < vocab and token_map is None:
        raise ArtifactError(f"{directory}: truncated_vocab_size {truncated} < vocab_size {vocab} needs a "
                            "'token_map' tensor in the weights (the target id of each head row).")
    if config.get("original_lm_head"):  # one projection for every head
        shared = raw.pop("lm_heads.0.weight", None)
        if shared is None:
            raise ArtifactError(f"{directory}: original_lm_head is set but 'lm_heads.0.weight' is missing.")
        raw.update({f"lm_heads.{k}.weight": shared for k in range(num_heads)})
    state = dict(raw)  # (empty id buffers need no stored tensor: DrafterArtifact._load_checked)
    if truncated < vocab:
        if tuple(token_map.shape) != (truncated,):
            raise ArtifactError(f"{directory}: token_map has shape {tuple(token_map.shape)}, expected ({truncated},).")
        state["head_token_ids"] = token_map.long()
    return dict(num_heads=num_heads, num_layers=int(config.get("num_hidden_layers", 1)),
                hidden_size=int(config["hidden_size"]), vocab_size=vocab, own_heads=True,
                block_bias=bool(config.get("medusa_fc_bias", False)), head_vocab_size=truncated), state
