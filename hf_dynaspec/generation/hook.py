"""The one module that touches transformers' private generation API (the public route is `chain_generate`).

`model.generate(assistant_model=assistant)` builds its candidate generator in the private
`GenerationMixin._get_candidate_generator`, from a fixed list with no registry. `install()` wraps that method
so that a `DynaSpecAssistant` gets our `EagleCandidateGenerator`; every other assistant goes to the original.
The wrapper binds the call's arguments to the original method's own signature (whatever mix of positional and
keyword arguments transformers uses), and fails with a clear message, pointing at the public route, if a
future transformers renames the arguments it needs.
It wraps transformers' module-level `_speculative_sampling` too, so that drafts our candidate generator marked
for block verification (`verification="block"`, hf_dynaspec.generation.block_verify) are verified as a block;
every other draft goes to the original. It also wraps `_validate_generation_mode`: where transformers would drop
an assistant without an error (beam search, with only a log line), a `DynaSpecAssistant` is refused with the
reason.

`import hf_dynaspec` installs it once (hf_dynaspec.generation's import); installing again is a no-op.
"""

from __future__ import annotations

import functools
import inspect

import transformers
from packaging import version
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.utils import GenerationMixin

import hf_dynaspec.generation.block_verify as block_verify
from hf_dynaspec.generation.calibration import target_verify_kernel
from hf_dynaspec.generation.candidate_generator import make_candidate_generator
from hf_dynaspec.modeling.assistant import DynaSpecAssistant

# `requires_model_outputs` (hidden states of the verification pass handed to the candidate generator) appeared
# in 5.8; the compatibility job of CI runs the oldest and the newest supported release.
MIN_TRANSFORMERS = version.Version("5.8.0")
_NEEDED = ("generation_config", "input_ids", "logits_processor", "model_kwargs", "assistant_model")
_ORIGINAL = "_dynaspec_original_get_candidate_generator"
_ORIGINAL_VALIDATE = "_dynaspec_original_validate_generation_mode"


class UnsupportedTransformersError(ImportError):
    """This transformers release lacks what assisted generation with a DynaSpecAssistant needs."""


def check_transformers_version() -> None:
    found = version.Version(transformers.__version__)
    if found < MIN_TRANSFORMERS:
        raise UnsupportedTransformersError(
            f"hf-dynaspec needs transformers >= {MIN_TRANSFORMERS} (found {found}): pip install -U 'transformers>=5.8,<6'"
        )


def install() -> None:
    """Route `generate(assistant_model=<DynaSpecAssistant>)` to our candidate generator. Idempotent."""
    if _ORIGINAL in GenerationMixin.__dict__:
        return
    check_transformers_version()
    _wrap_candidate_generator()
    _wrap_validate_generation_mode()
    _wrap_speculative_sampling()
    _wrap_assisted_decoding()


def _wrap_candidate_generator() -> None:
    original = GenerationMixin._get_candidate_generator
    signature = inspect.signature(original)
    missing = [name for name in _NEEDED if name not in signature.parameters]

    @functools.wraps(original)
    def _get_candidate_generator(self, *args, **kwargs):
        if missing:  # checked per call: only a DynaSpecAssistant needs the names
            return _original_or_refuse(original, missing, self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        if not isinstance(call["assistant_model"], DynaSpecAssistant):
            return original(self, *args, **kwargs)
        return make_candidate_generator(
            call["assistant_model"], target=self, input_ids=call["input_ids"],
            generation_config=call["generation_config"], logits_processor=call["logits_processor"],
            model_kwargs=call["model_kwargs"],
        )

    setattr(GenerationMixin, _ORIGINAL, original)
    GenerationMixin._get_candidate_generator = _get_candidate_generator


def _original_or_refuse(original, missing, self, *args, **kwargs):
    if any(isinstance(value, DynaSpecAssistant) for value in (*args, *kwargs.values())):
        raise UnsupportedTransformersError(
            f"transformers {transformers.__version__} changed GenerationMixin._get_candidate_generator (no "
            f"{missing} argument), so assistant_model=<DynaSpecAssistant> cannot be routed. Use the public route: "
            "model.generate(..., custom_generate=hf_dynaspec.chain_generate, drafter=assistant)."
        )
    return original(self, *args, **kwargs)


def _wrap_validate_generation_mode() -> None:
    original = GenerationMixin._validate_generation_mode
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _validate_generation_mode(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs).arguments
        generation_mode = call.get("generation_mode")
        generation_config = call.get("generation_config")
        assistant = (call.get("generation_mode_kwargs") or {}).get("assistant_model")
        if isinstance(assistant, DynaSpecAssistant) and generation_mode != GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"these generate() options select {generation_mode} (num_beams={generation_config.num_beams}), "
                "which cannot use an assistant: transformers would drop it and decode without it. Assisted decoding "
                "is greedy or sampled decoding: set num_beams=1, or drop assistant_model for beam search."
            )
        return original(self, *args, **kwargs)

    setattr(GenerationMixin, _ORIGINAL_VALIDATE, original)
    GenerationMixin._validate_generation_mode = _validate_generation_mode


def _wrap_speculative_sampling() -> None:
    import transformers.generation.utils as generation_utils

    original = generation_utils._speculative_sampling

    @functools.wraps(original)
    def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs):
        relaxed = kwargs.get("assistant_ensemble_weight") is not None  # a lossy rule the user chose: theirs
        if not relaxed and block_verify.is_marked(candidate_logits):
            return block_verify.block_verify(candidate_input_ids, candidate_logits, candidate_length, new_logits)
        return original(candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs)

    generation_utils._speculative_sampling = _speculative_sampling


def _wrap_assisted_decoding() -> None:
    """Around an assisted call with a DynaSpecAssistant planning its rounds (`draft_plan="auto"`,
    `target_verify_kernel="auto"`): the target's verification forwards through the CPU rows kernel where measured
    faster (hf_dynaspec.generation.calibration.target_verify_kernel), restored when the call ends."""
    original = GenerationMixin._assisted_decoding

    @functools.wraps(original)
    def _assisted_decoding(self, *args, **kwargs):
        assistant = kwargs.get("assistant_model")
        options = getattr(assistant, "generation_config", None)
        if (isinstance(assistant, DynaSpecAssistant) and options.draft_plan == "auto"
                and options.target_verify_kernel == "auto"):
            with target_verify_kernel(self):
                return original(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    GenerationMixin._assisted_decoding = _assisted_decoding
