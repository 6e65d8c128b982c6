"""`DynaSpecConfig`: what an assistant *is* (config.json).

It records the drafter's architecture (sizes, which target layers it reads), the sizes of the shortlist
components stored with it, and which target it was built for (name, revision, vocabulary and hidden sizes, a
fingerprint), never the target's weights and never how it drafts: drafting options live in
`DynaSpecGenerationConfig` (hf_dynaspec.modeling.options, generation_config.json). It is version-stamped and
forward compatible: unknown keys from a newer release are kept and warned about, not rejected.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any

from transformers import PretrainedConfig

from hf_dynaspec.modeling.options import LEGACY_CONFIG_KEYS, OPTION_DEFAULTS
from hf_dynaspec.version import __version__

DRAFTER_KINDS = ("eagle", "eagle3", "none")

# What a saved hf-dynaspec config.json must state: without them the defaults above would describe another drafter.
REQUIRED_SAVED_KEYS = ("drafter_kind", "layer_family", "target_model_type", "vocab_size", "hidden_size",
                       "target_hidden_size", "intermediate_size", "num_attention_heads")


class DynaSpecConfig(PretrainedConfig):
    """Configuration of a `DynaSpecAssistant`.

    Args:
        drafter_kind: `"eagle"` (EAGLE-1/2: fc over [token embedding ; target last hidden state], one decoder
            layer, the target's final norm and LM head borrowed) or `"eagle3"` (fc over three target layers,
            its own norm and reduced-vocabulary head with `d2t`/`t2d` maps), or `"none"` (no drafter: prompt lookup
            and the suffix cache only, `DynaSpecAssistant.for_target`).
        layer_family: transformers `model_type` whose decoder-layer classes build the drafter's layer
            (the target's own family for assistants made here; `"llama"` for public EAGLE checkpoints).
        target_model_type: `model_type` of the target (e.g. `"qwen2"`), checked when attaching.
        target_name_or_path: where the target came from (provenance, for humans and for checks).
        target_revision: the target's revision, when known.
        vocab_size: the target's LM-head rows V. Reported as the assistant's vocabulary so that transformers
            treats target and assistant as sharing one tokenizer.
        target_hidden_size: D of the target's hidden states the drafter reads.
        hidden_size: the drafter's decoder layer width (with `intermediate_size`, `num_attention_heads`,
            `num_key_value_heads`, `head_dim`, `rms_norm_eps`, `rope_parameters`, `max_position_embeddings`,
            `hidden_act` and `attention_bias`, as in the family's own config).
        fc_bias: whether the input fusion `fc` has a bias (EAGLE-1 checkpoints do).
        use_target_norm: apply the target's final norm before the LM head (own format). Public EAGLE-1/2
            checkpoints regress post-norm features directly and set this to False.
        aux_hidden_state_layer_ids: EAGLE-3 only: indices into the target's `hidden_states` tuple that are
            fused by `fc` (entries are hidden states *entering* a layer, `hidden_states[0]` is the embedding).
        draft_vocab_size: EAGLE-3 only: rows of the drafter's own LM head.
        fused_hidden_state_ids: eagle only, optional: indices into the target's `hidden_states` tuple (as for
            `aux_hidden_state_layer_ids`) whose states are fused with the target's last (post-norm) hidden state
            into the feature of a verified position: `f = fuse([rms(h_i) ; ... ; h_last])` (each fused state
            RMS-normalised without weights), EAGLE-3's multi-layer
            features with EAGLE-1/2's feature regression and the target's own head (so shortlists apply).
            `fuse` starts as a pass-through of `h_last`, so adding fusion to a trained drafter changes nothing
            until it is trained. None (the default): `f = h_last`.
        num_clusters: vocabulary clusters stored in the artifact (with `frequency_list_size`,
            `vocabtrim_list_size`, `num_always_ids` and `router_hidden_size`: sizes of the stored shortlist
            components, set by the builders, not by hand).
    """

    model_type = "dynaspec"

    def __init__(
        self,
        drafter_kind: str = "eagle",
        layer_family: str = "llama",
        target_model_type: str | None = None,
        target_name_or_path: str | None = None,
        target_revision: str | None = None,
        target_fingerprint: dict[str, Any] | None = None,
        vocab_size: int = 32000,
        target_hidden_size: int | None = None,
        hidden_size: int = 4096,
        intermediate_size: int = 11008,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = None,
        head_dim: int | None = None,
        rms_norm_eps: float = 1e-6,
        rope_parameters: dict[str, Any] | None = None,
        max_position_embeddings: int = 32768,
        hidden_act: str = "silu",
        attention_bias: bool = False,
        fc_bias: bool = False,
        use_target_norm: bool = True,
        aux_hidden_state_layer_ids: list[int] | None = None,
        draft_vocab_size: int | None = None,
        fused_hidden_state_ids: list[int] | None = None,
        library_version: str | None = None,
        layer_config: dict[str, Any] | None = None,
        frequency_list_size: int = 0,
        vocabtrim_list_size: int = 0,
        num_clusters: int = 0,
        num_always_ids: int = 0,
        router_hidden_size: int = 256,
        **kwargs,
    ):
        _check_extra_keys(kwargs)
        # Every argument is the attribute of its name (the class docstring says what each is), then the derived
        # defaults and copies below.
        arguments = dict(locals())  # a copy: the loop's own names must not join it
        for name, value in arguments.items():
            if name not in ("self", "kwargs", "__class__"):
                setattr(self, name, value)
        self.target_hidden_size = target_hidden_size if target_hidden_size is not None else hidden_size
        self.num_key_value_heads = num_key_value_heads if num_key_value_heads is not None else num_attention_heads
        self.head_dim = head_dim if head_dim is not None else hidden_size // num_attention_heads
        self.rope_parameters = rope_parameters or {"rope_type": "default", "rope_theta": 10000.0}
        self.aux_hidden_state_layer_ids = list(aux_hidden_state_layer_ids) if aux_hidden_state_layer_ids else None
        self.fused_hidden_state_ids = list(fused_hidden_state_ids) if fused_hidden_state_ids else None
        # Extra family-specific layer settings (e.g. Gemma-3's attention scale), kept in layer_config.
        self.layer_config = dict(layer_config or {})
        # Stamped at creation; a config loaded from disk keeps the version that wrote it.
        self.library_version = library_version or __version__
        super().__init__(**kwargs)
        self.validate_drafter()

    def validate_drafter(self) -> None:
        """Raise `ValueError` naming the bad field and the fix."""
        if self.drafter_kind not in DRAFTER_KINDS:
            raise ValueError(f"drafter_kind must be one of {DRAFTER_KINDS}, got {self.drafter_kind!r}.")
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_attention_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"DynaSpecConfig.{name} must be a positive integer, got {value!r}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})."
            )
        if self.fused_hidden_state_ids is not None:
            ids = self.fused_hidden_state_ids
            if self.drafter_kind != "eagle":
                raise ValueError(
                    "fused_hidden_state_ids applies to eagle drafters; an eagle3 drafter fuses its "
                    "aux_hidden_state_layer_ids already."
                )
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids) or len(set(ids)) != len(ids):
                raise ValueError(
                    "fused_hidden_state_ids must be distinct non-negative indices into the target's hidden_states "
                    f"(0 is the embedding output, i the input of layer i), got {ids!r}."
                )
        if self.drafter_kind == "eagle3":
            if not self.draft_vocab_size:
                raise ValueError("An eagle3 drafter needs draft_vocab_size (rows of its own LM head).")
            if not self.aux_hidden_state_layer_ids or len(self.aux_hidden_state_layer_ids) != 3:
                raise ValueError(
                    "An eagle3 drafter fuses exactly three target hidden states: set aux_hidden_state_layer_ids "
                    f"to three indices, got {self.aux_hidden_state_layer_ids!r}."
                )


@functools.cache
def _known_keys() -> frozenset[str]:
    """Keys a config.json of this release may hold: DynaSpecConfig's arguments and PretrainedConfig's own."""
    own = set(inspect.signature(DynaSpecConfig.__init__).parameters) - {"self", "kwargs"}
    return frozenset(own | set(PretrainedConfig().to_dict()) | set(vars(PretrainedConfig())))


def _check_extra_keys(kwargs: dict) -> None:
    """Refuse drafting options (they belong in DynaSpecGenerationConfig); warn about keys of a newer release."""
    misplaced = sorted(k for k in kwargs if k in LEGACY_CONFIG_KEYS or k in OPTION_DEFAULTS)
    if misplaced:
        raise TypeError(
            f"{misplaced} are drafting options, not architecture: set them on assistant.generation_config "
            "(DynaSpecGenerationConfig) or pass them to DynaSpecAssistant.from_pretrained / from_target."
        )
    unknown = sorted(k for k in kwargs if k not in _known_keys())
    if unknown:
        warnings.warn(
            f"DynaSpecConfig: ignoring unknown keys {unknown} (written by a newer hf-dynaspec?). "
            "They are kept in the config but have no effect.",
            stacklevel=3,
        )


def drafter_free_config(text_config, vocab_size: int, **provenance) -> DynaSpecConfig:
    """The config of a drafter-free assistant (`DynaSpecAssistant.for_target`) for a target of this text config
    and LM-head rows. There is no drafter layer: its shape fields only satisfy the checks, so any family will do."""
    hidden = text_config.hidden_size
    return DynaSpecConfig(drafter_kind="none", layer_family=text_config.model_type,
                          target_model_type=text_config.model_type, vocab_size=vocab_size, target_hidden_size=hidden,
                          hidden_size=hidden, intermediate_size=hidden, num_attention_heads=1, num_key_value_heads=1,
                          **provenance)


# The drafter layer's shape, as its family's config names it (`layer_fields` reads them, `layer_config_for` writes them).
LAYER_FIELDS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "rms_norm_eps", "rope_parameters", "max_position_embeddings", "hidden_act", "attention_bias")


def layer_fields(config: dict, rope_parameters: dict) -> dict:
    """The drafter layer's shape fields of `DynaSpecConfig` from a family config's dict (a target's text config, a
    published EAGLE config), the missing optional ones at the family's defaults (DynaSpecConfig's: the
    same). Gemma-3 names its activation `hidden_activation`."""
    fields = {name: config[name] for name in LAYER_FIELDS[:3]}  # required: a family config states them
    # The optional ones where stated; DynaSpecConfig derives the heads' defaults as the family does.
    fields.update((name, config[name]) for name in LAYER_FIELDS[3:] if config.get(name) is not None)
    return {**fields, "rope_parameters": rope_parameters, "attention_bias": bool(fields.get("attention_bias")),
            "hidden_act": config.get("hidden_act") or config.get("hidden_activation") or "silu"}
