"""Target model families whose decoder layer the drafter can mirror.

The drafter's decoder layer is built from the target family's own transformers classes (attention with its
rotary embedding, MLP, RMSNorm), so a Qwen2 target gets a Qwen2 layer (biased q/k/v), a Qwen3 target a
Qwen3 layer (q/k norms) and a Phi-3 target a Phi-3 layer (fused qkv and gate/up projections). Families whose layer is not the plain pre-norm `attn -> mlp` block (Gemma's extra
norms and scaled embeddings, sliding-window-only models) are refused with a clear error instead of being
drafted wrongly.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch.nn as nn
from transformers import AutoConfig, PretrainedConfig

from hf_dynaspec.errors import UnsupportedTargetError

# model_type -> class-name prefix inside transformers.models.<model_type>.modeling_<model_type>
SUPPORTED_FAMILIES = {
    "llama": "Llama",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "mistral": "Mistral",
    "phi3": "Phi3",
}


@dataclass(frozen=True)
class FamilyClasses:
    """The transformers classes a drafter layer of one family is made of."""

    decoder_layer: type[nn.Module]
    rotary_embedding: type[nn.Module]
    rms_norm: type[nn.Module]


def family_classes(model_type: str) -> FamilyClasses:
    if model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedTargetError(
            f"The drafter cannot mirror a {model_type!r} target: supported families are "
            f"{sorted(SUPPORTED_FAMILIES)}. Use a target of one of these families, or open an issue to add "
            f"{model_type!r} (its decoder layer must be a pre-norm attention + MLP block)."
        )
    prefix = SUPPORTED_FAMILIES[model_type]
    module = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    return FamilyClasses(
        decoder_layer=getattr(module, f"{prefix}DecoderLayer"),
        rotary_embedding=getattr(module, f"{prefix}RotaryEmbedding"),
        rms_norm=getattr(module, f"{prefix}RMSNorm"),
    )


def layer_config_for(drafter_config) -> PretrainedConfig:
    """A one-layer config of the target's family with the drafter's sizes (what the layer classes read)."""
    family_classes(drafter_config.layer_family)  # raises for unsupported families
    config = AutoConfig.for_model(
        drafter_config.layer_family,
        vocab_size=drafter_config.vocab_size,
        hidden_size=drafter_config.hidden_size,
        intermediate_size=drafter_config.intermediate_size,
        num_hidden_layers=1,
        num_attention_heads=drafter_config.num_attention_heads,
        num_key_value_heads=drafter_config.num_key_value_heads,
        head_dim=drafter_config.head_dim,
        rms_norm_eps=drafter_config.rms_norm_eps,
        rope_parameters=dict(drafter_config.rope_parameters),
        max_position_embeddings=drafter_config.max_position_embeddings,
        hidden_act=drafter_config.hidden_act,
        attention_bias=drafter_config.attention_bias,
        **drafter_config.layer_config,
    )
    # The drafter passes explicit boolean masks; SDPA takes them as they are.
    config._attn_implementation = "sdpa"
    # Sliding windows would change which keys a layer sees; the drafter attends to its whole (short) cache.
    if hasattr(config, "sliding_window"):
        config.sliding_window = None
    if hasattr(config, "use_sliding_window"):
        config.use_sliding_window = False
    return config
