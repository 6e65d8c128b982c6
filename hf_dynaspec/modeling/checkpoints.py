"""Reading assistant artifacts: our own format and the published EAGLE-1/2 and EAGLE-3 layouts.

Weights are read from safetensors, or, for the published EAGLE checkpoints that ship `pytorch_model.bin`, with
`torch.load(weights_only=True)` (transformers' own safe path: only tensors and plain containers are rebuilt,
no code runs; a file that needs more is refused). Other pickles (.pt, .pth, .pkl, .ckpt) are never opened.
File names live here and nowhere else.

Layouts recognised (see ../shared/TRANSFORMERS.md):
- `dynaspec`: `config.json` with `model_type: "dynaspec"`, `model.safetensors` with keys `drafter.*`.
- `eagle` (EAGLE-1/2): llama-style config with `num_hidden_layers: 1` (+ `bias` for fc, default true, and
  `qkv_bias` for q/k/v, as SafeAILab/EAGLE's eagle/model/cnets1.py and ea_model.py read them), keys `fc.*`,
  `layers.0.*` (no `layers.0.input_layernorm`), optionally `embed_tokens.weight` (borrowed from the target).
- `eagle3`: config with `draft_vocab_size` (optionally `target_hidden_size`,
  `eagle_config.eagle_aux_hidden_state_layer_ids`), keys `fc.weight`, `midlayer.*` (vLLM: `layers.0.*`),
  `norm.weight`, `lm_head.weight`, `d2t` (vLLM: `draft_id_to_target_id`), `t2d`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from hf_dynaspec.errors import ArtifactError
from hf_dynaspec.modeling.config import REQUIRED_SAVED_KEYS, layer_fields

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
BIN_WEIGHTS_NAME = "pytorch_model.bin"
BIN_WEIGHTS_INDEX_NAME = "pytorch_model.bin.index.json"
PICKLE_SUFFIXES = (".pt", ".pth", ".pkl", ".ckpt")  # never opened
DRAFTER_PREFIX = "drafter."
# Keys some EAGLE checkpoints carry that the drafter borrows from the target instead.
BORROWED_KEYS = ("embed_tokens.weight",)


def resolve_artifact_dir(path_or_repo_id: str | os.PathLike, revision: str | None = None, **hub_kwargs) -> Path:
    """A local directory, or a Hub repo id downloaded with huggingface_hub: JSON, safetensors and the card, and
    `*.bin` weights only for a repository that has no safetensors (the published EAGLE checkpoints)."""
    path = Path(path_or_repo_id)
    if path.is_dir():
        return path
    if path.exists():
        raise ArtifactError(f"{path} is a file; pass the directory that holds {CONFIG_NAME} and {WEIGHTS_NAME}.")
    from huggingface_hub import snapshot_download

    try:
        local = Path(snapshot_download(repo_id=str(path_or_repo_id), revision=revision,
                                       allow_patterns=["*.json", "*.safetensors", "*.md"], **hub_kwargs))
        if not list(local.glob("*.safetensors")):
            local = Path(snapshot_download(repo_id=str(path_or_repo_id), revision=revision,
                                           allow_patterns=["*.json", "*.bin", "*.md"], **hub_kwargs))
    except Exception as err:  # huggingface_hub raises many types; the message is what matters
        raise ArtifactError(
            f"{path_or_repo_id!r} is neither a local directory nor a Hub repo that could be downloaded "
            f"({type(err).__name__}: {err}). Pass a local directory, or check the repo id and your connection."
        ) from err
    return local


def read_config_dict(directory: Path) -> dict:
    return read_json_object(directory / CONFIG_NAME, missing="not an assistant artifact (or an incomplete copy)")


def read_json_object(path: Path, missing: str | None = None) -> dict | None:
    """The JSON object an artifact's file `path` holds (config.json, generation_config.json, card.json); None when
    there is no such file, or, with `missing` (what its absence means), refused. A file that is not a JSON object
    is refused with the fix."""
    if not path.is_file():
        if missing is not None:
            raise ArtifactError(f"{path.parent} has no {path.name}: {missing}.")
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as err:  # not JSON, or not text
        raise ArtifactError(f"{path} is corrupt ({err}); re-download or re-save the assistant.") from err
    if not isinstance(data, dict):
        raise ArtifactError(f"{path} must hold a JSON object, found {type(data).__name__}; re-download or re-save "
                            "the assistant.")
    return data


def read_state_dict(directory: Path) -> dict[str, torch.Tensor]:
    """All tensors of the artifact's weight files: safetensors (one file, or shards named by an index), else
    `pytorch_model.bin` (or its shards) through `torch.load(weights_only=True)`."""
    files = _weight_files(directory, WEIGHTS_INDEX_NAME, "*.safetensors")
    loader = load_safetensors
    if not files:
        files, loader = _weight_files(directory, BIN_WEIGHTS_INDEX_NAME, BIN_WEIGHTS_NAME), load_bin
    if not files:
        pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise ArtifactError(
                f"{directory} holds only pickled weights ({', '.join(pickles)}). hf-dynaspec never unpickles such "
                "files; convert them once in a trusted environment, e.g. "
                "`safetensors.torch.save_file(torch.load(f, weights_only=True), 'model.safetensors')`."
            )
        raise ArtifactError(f"{directory} has no {WEIGHTS_NAME}: the artifact is incomplete.")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        if not file.is_file():
            raise ArtifactError(f"{file} is listed in an index of {directory} but missing.")
        state.update(loader(file))
    return state


def _weight_files(directory: Path, index_name: str, pattern: str) -> list[Path]:
    index_path = directory / index_name
    if index_path.is_file():
        try:
            shard_names = sorted(set(json.loads(index_path.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            raise ArtifactError(f"{index_path} is corrupt ({err}).") from err
        return [directory / name for name in shard_names]
    return sorted(directory.glob(pattern))


def load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(str(file))
    except (SafetensorError, OSError, ValueError) as err:
        raise ArtifactError(f"{file} is corrupt or not a safetensors file ({err}); re-download it.") from err


def load_bin(file: Path) -> dict[str, torch.Tensor]:
    """A published `.bin` state dict, through `torch.load(weights_only=True)`: tensors and plain containers
    only; anything else in the pickle (classes, functions) is refused by torch before it runs."""
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError or EOFError by the kind of damage
        raise ArtifactError(
            f"{file} could not be read with torch.load(weights_only=True) ({type(err).__name__}: {str(err)[:200]}). "
            "hf-dynaspec reads .bin weights only that way: a file that needs more than tensors is refused. "
            "If it is a plain state dict, re-download it; else convert it once in a trusted environment to "
            "model.safetensors."
        ) from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ArtifactError(f"{file} is not a state dict of tensors (a flat name -> tensor mapping).")
    return state


def detect_layout(config: dict, keys: set[str], where: str | Path = "config.json") -> str:
    if config.get("model_type") == "dynaspec" or (
        "model_type" not in config and keys and all(k.startswith(("drafter.", "shortlists.")) for k in keys)
    ):
        # Its config.json must name its type and state the drafter's shape: a damaged one is refused naming the missing
        # keys, instead of failing later on a default that describes another drafter.
        missing = [key for key in ("model_type", *REQUIRED_SAVED_KEYS) if key not in config]
        if missing:
            raise ArtifactError(
                f"{where} lacks {missing}, which every hf-dynaspec assistant's config.json states (the weights are "
                "an hf-dynaspec assistant's). The file was truncated or edited: restore it from the original artifact "
                "or re-save the assistant with save_pretrained."
            )
        return "dynaspec"
    if "draft_vocab_size" in config or any(k.startswith("midlayer.") for k in keys) or "d2t" in keys:
        return "eagle3"
    if "fc.weight" in keys and any(k.startswith("layers.0.") for k in keys):
        return "eagle"
    raise ArtifactError(
        "Not a recognised assistant checkpoint: expected a hf-dynaspec artifact (config model_type "
        "'dynaspec'), an EAGLE-1/2 checkpoint (fc.*, layers.0.*) or an EAGLE-3 checkpoint (fc.weight, "
        f"midlayer.*, d2t, draft_vocab_size). Found config model_type={config.get('model_type')!r} and "
        f"keys {sorted(keys)[:6]}..."
    )


def _rope_parameters(config: dict) -> dict:
    if isinstance(config.get("rope_parameters"), dict):
        return dict(config["rope_parameters"])
    params = dict(config.get("rope_scaling") or {})
    params["rope_type"] = params.pop("type", None) or params.get("rope_type") or "default"
    params["rope_theta"] = float(config.get("rope_theta", 10000.0))
    return params


def eagle_config_kwargs(config: dict, layout: str, target_num_layers: int | None) -> dict:
    """DynaSpecConfig keyword arguments for a published EAGLE config (llama-style)."""
    kwargs = dict(drafter_kind=layout, layer_family="llama", vocab_size=config["vocab_size"],
                  target_hidden_size=config.get("target_hidden_size") or config["hidden_size"],
                  **layer_fields(config, _rope_parameters(config)))
    if config.get("qkv_bias"):
        # EAGLE's layer with biased q/k/v and an unbiased o_proj (cnets1.py, for Qwen2 targets): a Qwen2 layer.
        kwargs.update(layer_family="qwen2", attention_bias=False)
    if layout == "eagle":
        # EAGLE-1/2 regress the target's post-norm feature and apply the LM head to it directly.
        kwargs.update(fc_bias=bool(config.get("bias", True)), use_target_norm=False)
        return kwargs
    layer_ids = (config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    if layer_ids is not None:
        # These name layer *outputs*; hidden_states[i + 1] is the output of layer i.
        aux = [int(i) + 1 for i in layer_ids]
    elif target_num_layers is not None:
        # EAGLE-3's default: hidden states entering layers 2, L//2 and L-3.
        aux = [2, target_num_layers // 2, target_num_layers - 3]
    else:
        raise ArtifactError(
            "This EAGLE-3 checkpoint does not name the target layers it reads "
            "(eagle_config.eagle_aux_hidden_state_layer_ids); load it with target=<model> so the default "
            "layers {2, L//2, L-3} can be taken from the target."
        )
    kwargs.update(
        fc_bias=False,
        draft_vocab_size=config.get("draft_vocab_size") or config["vocab_size"],
        aux_hidden_state_layer_ids=aux,
    )
    return kwargs


def eagle_state_dict(state: dict[str, torch.Tensor], layout: str, config_kwargs: dict) -> dict[str, torch.Tensor]:
    """Published EAGLE keys -> our keys (`drafter.` prefix, vLLM renames undone, borrowed weights dropped)."""
    state = {k: v for k, v in state.items() if k not in BORROWED_KEYS}
    if layout == "eagle3":
        state = {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in state.items()}
        if "draft_id_to_target_id" in state:
            state["d2t"] = state.pop("draft_id_to_target_id")
        draft_vocab, vocab = config_kwargs["draft_vocab_size"], config_kwargs["vocab_size"]
        if "d2t" not in state:
            if draft_vocab != vocab:
                raise ArtifactError(
                    f"This EAGLE-3 checkpoint has a reduced draft vocabulary ({draft_vocab} of {vocab} tokens) but "
                    "no `d2t` map, so its draft ids cannot be turned into target ids (acceptance would silently "
                    "collapse). Use the checkpoint's complete upload, which includes `d2t` and `t2d`."
                )
            state["d2t"] = torch.zeros(draft_vocab, dtype=torch.long)
        state["d2t"] = state["d2t"].long()
        if "t2d" not in state:
            t2d = torch.zeros(vocab, dtype=torch.bool)
            t2d[torch.arange(draft_vocab) + state["d2t"]] = True
            state["t2d"] = t2d
        state["t2d"] = state["t2d"].bool()
    return {DRAFTER_PREFIX + k: v for k, v in state.items()}
