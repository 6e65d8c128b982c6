"""Target model families whose decoder layer the drafter can mirror.

The drafter's decoder layer is built from the target family's own transformers classes (attention with its
rotary embedding, MLP, RMSNorm), so a Qwen2 target gets a Qwen2 layer (biased q/k/v), a Qwen3 target a
Qwen3 layer (q/k norms), a Phi-3 target a Phi-3 layer (fused qkv and gate/up projections) and a Gemma-3 target a
Gemma-3 layer (four norms, q/k norms, `query_pre_attn_scalar`). Gemma-3's other differences live in the parts the
drafter borrows (the embedding scales by sqrt(hidden), the norms multiply by 1 + weight), so they need nothing
here. Families outside SUPPORTED_FAMILIES are refused with a clear error instead of being drafted wrongly.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn
from transformers import AutoConfig, PretrainedConfig

from hf_dynaspec.errors import UnsupportedTargetError
from hf_dynaspec.modeling.config import LAYER_FIELDS


@dataclass(frozen=True)
class Family:
    """Where a family's classes live (`transformers.models.<package>.modeling_<package>.<prefix>DecoderLayer`,
    ...), and the ones a drafter layer is made of."""

    prefix: str
    package: str
    rotary_per_layer_type: bool = False  # its rotary embedding takes a `layer_type` (Gemma-3)

    def named(self, kind: str) -> type[nn.Module]:
        """Its class `<prefix><kind>`: a drafter layer is made of its "DecoderLayer", "RotaryEmbedding" and
        (EAGLE-3) "RMSNorm"."""
        module = importlib.import_module(f"transformers.models.{self.package}.modeling_{self.package}")
        return getattr(module, f"{self.prefix}{kind}")


# model_type -> its family (Gemma-3's text model lives in the multimodal model's package)
SUPPORTED_FAMILIES = {
    "llama": Family("Llama", "llama"),
    "qwen2": Family("Qwen2", "qwen2"),
    "qwen3": Family("Qwen3", "qwen3"),
    "mistral": Family("Mistral", "mistral"),
    "phi3": Family("Phi3", "phi3"),
    "gemma3_text": Family("Gemma3", "gemma3", rotary_per_layer_type=True),
}
# Gemma-3 keeps rotary tables per attention kind (local 10k base for its sliding layers, 1M for its global ones).
# The drafter's one layer attends to its whole (short) cache, like the target's last layer, a global one.
DRAFTER_LAYER_TYPE = "full_attention"


# Families whose activations overflow float16 (Gemma-3 is trained in bf16 and documented to give inf/NaN in fp16).
HALF_PRECISION_OVERFLOWS = ("gemma3_text", "gemma3", "gemma2")


def warn_if_half_overflows(target) -> None:
    """Warn once per attach when `target` is of a family known to overflow float16: the output stays identical to
    plain generate() (both overflow alike), but it is garbage; bfloat16 or float32 is the fix."""
    model_type = target.config.get_text_config().model_type
    if target.dtype == torch.float16 and model_type in HALF_PRECISION_OVERFLOWS:
        warnings.warn(f"this {model_type} target runs in torch.float16, where its activations overflow (inf/NaN "
                      "logits, for plain generate() as for speculative decoding); load it with dtype=torch.bfloat16 "
                      "(or torch.float32 on a card without bf16, e.g. a T4)", UserWarning, stacklevel=3)


def family_classes(model_type: str) -> Family:
    """The family of a target's `model_type` (its classes), refused with the reason where the drafter cannot
    mirror it."""
    if model_type == "gemma3":
        raise UnsupportedTargetError(
            "A multimodal Gemma-3 (Gemma3ForConditionalGeneration) is not a supported target: load its text model "
            "with AutoModelForCausalLM (Gemma3ForCausalLM, model_type 'gemma3_text'), which the drafter mirrors."
        )
    if model_type not in SUPPORTED_FAMILIES:
        raise UnsupportedTargetError(
            f"The drafter cannot mirror a {model_type!r} target: supported families are "
            f"{sorted(SUPPORTED_FAMILIES)}. Use a target of one of these families, or open an issue to add "
            f"{model_type!r} (its decoder layer must be a pre-norm attention + MLP block)."
        )
    return SUPPORTED_FAMILIES[model_type]


def family_layer_settings(text_config: PretrainedConfig) -> dict:
    """The family-specific layer settings a drafter copies from its target (kept in `DynaSpecConfig.layer_config`).

    Gemma-3: its attention scale (`query_pre_attn_scalar`, not head_dim), its MLP activation (named
    `hidden_activation` there) and one global layer. A final logit soft-cap is refused: the drafter scores the
    target's head without it, so its drafts would follow other probabilities than the target's (still lossless,
    but a worse drafter than it looks); no Gemma-3 release sets one.
    """
    if text_config.model_type != "gemma3_text":
        return {}
    for name in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(text_config, name, None) is not None:
            raise UnsupportedTargetError(
                f"This Gemma-3 config sets {name}={getattr(text_config, name)}; the drafter does not mirror logit "
                "soft-capping. Use a Gemma-3 release without it (every published Gemma-3 sets it to null)."
            )
    return {
        "query_pre_attn_scalar": text_config.query_pre_attn_scalar,
        "hidden_activation": text_config.hidden_activation,
        "layer_types": [DRAFTER_LAYER_TYPE],
    }


def drafter_rope_parameters(text_config: PretrainedConfig) -> dict:
    """The rotary settings of the drafter's layer: the target's own, or, where the target keeps one table per
    attention kind (Gemma-3), that of its global layers."""
    rope = dict(text_config.rope_parameters)
    return dict(rope[DRAFTER_LAYER_TYPE]) if isinstance(rope.get(DRAFTER_LAYER_TYPE), dict) else rope


def layer_config_for(drafter_config) -> PretrainedConfig:
    """A one-layer config of the target's family with the drafter's sizes (what the layer classes read)."""
    classes = family_classes(drafter_config.layer_family)  # raises for unsupported families
    fields = {name: getattr(drafter_config, name) for name in LAYER_FIELDS}
    rope = dict(drafter_config.rope_parameters)
    fields["rope_parameters"] = {DRAFTER_LAYER_TYPE: rope} if classes.rotary_per_layer_type else rope
    config = AutoConfig.for_model(drafter_config.layer_family, vocab_size=drafter_config.vocab_size,
                                  num_hidden_layers=1, **fields, **drafter_config.layer_config)
    # The drafter passes explicit boolean masks; SDPA takes them as they are.
    config._attn_implementation = "sdpa"
    # Sliding windows would change which keys a layer sees; the drafter attends to its whole (short) cache.
    if hasattr(config, "sliding_window"):
        config.sliding_window = None
    if hasattr(config, "use_sliding_window"):
        config.use_sliding_window = False
    return config
