"""Bind an assistant to the target of a generate() call, whichever route it came by."""

from __future__ import annotations

import warnings

from hf_dynaspec.drafting.runtime import prepare_for_target
from hf_dynaspec.errors import AssistantMismatchError
from hf_dynaspec.modeling.assistant import DynaSpecAssistant


def ensure_attached(assistant, target, argument: str = "assistant_model") -> DynaSpecAssistant:
    """Attach `assistant` to `target` if it is not attached yet, follow a target that was cast or moved since,
    refuse one attached to another model object, and prepare the drafter's kernels for the target."""
    if not isinstance(assistant, DynaSpecAssistant):
        raise TypeError(f"{argument} must be a DynaSpecAssistant, got {type(assistant).__name__}")
    if assistant.target is None:
        assistant.attach(target)
    elif assistant.target is not target:
        raise AssistantMismatchError(
            "This assistant is attached to a different target model object. Call "
            f"`assistant.attach(model)` before `model.generate(..., {argument}=assistant)`."
        )
    else:
        _follow_target_dtype_and_device(assistant, target)
    prepare_for_target(assistant, target)
    return assistant


def _follow_target_dtype_and_device(assistant, target) -> None:
    """The target was cast or moved after `attach` (e.g. `model.to(torch.bfloat16)`): follow it, loudly."""
    if not assistant.has_drafter:
        return  # no weights of its own to follow
    weight = assistant.drafter.fc.weight
    head = target.get_output_embeddings().weight  # the drafter sits with the head (modeling.drafter.drafting_device)
    if weight.dtype != target.dtype or weight.device != head.device:
        warnings.warn(
            f"the target is now {target.dtype} on {target.device}, the assistant was attached as {weight.dtype} "
            f"on {weight.device}; re-attaching it to follow the target. Call assistant.attach(model) after "
            "casting or moving the model to avoid this check.",
            stacklevel=4,
        )
        assistant.attach(target, allow_different_target=True)
