"""The one module that touches transformers' private generation API (the public route is `speculative_generate`).

`model.generate(assistant_model=assistant)` builds its candidate generator in the private
`GenerationMixin._get_candidate_generator`, from a fixed list with no registry. `install()` wraps that method
so that a `DynaSpecAssistant` gets our `EagleCandidateGenerator`; every other assistant goes to the original.
The wrapper binds the call's arguments to the original method's own signature (whatever mix of positional and
keyword arguments transformers uses). Where a future transformers removes or renames what a wrapper needs, that
wrapper is not installed: what it serves is disabled with one logged warning, `import hf_dynaspec` still works,
the public routes (`speculative_generate`, `speculative_generate(trees=True)`) are unaffected, and a DynaSpecAssistant passed as
`assistant_model=` is refused naming the public route (tests/test_hook_fail_soft.py removes each function in turn).
It wraps transformers' module-level `_speculative_sampling` too, so that drafts our candidate generator marked
for block verification (`verification="block"`, hf_dynaspec.generation.block_verify) are verified as a block;
every other draft goes to the original. It also wraps `_validate_generation_mode`: where transformers would drop
an assistant without an error (beam search, with only a log line), a `DynaSpecAssistant` is refused with the
reason.

`import hf_dynaspec` installs it once (hf_dynaspec.generation's import); installing again is a no-op.
"""

from __future__ import annotations

import contextlib
import functools
import inspect

import transformers
from packaging import version
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.utils import GenerationMixin
from transformers.utils import logging

import hf_dynaspec.generation.block_verify as block_verify
from hf_dynaspec.drafting.row_processing import with_sparse_warpers
from hf_dynaspec.generation.candidate_generator import PUBLIC_ROUTE, make_candidate_generator
from hf_dynaspec.generation.costs.verify_kernel import target_verify_kernel
from hf_dynaspec.generation.every_token_stops import CROPPED_BY_TRANSFORMERS, check_every_token, cut
from hf_dynaspec.modeling.assistant import DynaSpecAssistant

# `requires_model_outputs` (hidden states of the verification pass handed to the candidate generator) appeared
# in 5.8; the compatibility job of CI runs the oldest and the newest supported release.
MIN_TRANSFORMERS = version.Version("5.8.0")
_NEEDED = ("generation_config", "input_ids", "logits_processor", "model_kwargs", "assistant_model")
_ORIGINAL_PREFIX = "_dynaspec_original"  # + the wrapped function's name: where its original is kept
_ORIGINAL = _ORIGINAL_PREFIX + "_get_candidate_generator"


class UnsupportedTransformersError(ImportError):
    """This transformers release lacks what assisted generation with a DynaSpecAssistant needs."""


# What each wrapper serves, for the warning when it cannot be installed.
_SERVES = {
    "_get_candidate_generator": f"the assistant_model= route (use the public route: {PUBLIC_ROUTE})",
    "_validate_generation_mode": "the refusal of beam search with an assistant (transformers would drop it)",
    "_speculative_sampling": "verification='block' (sampled drafts are verified token by token instead)",
    "_assisted_decoding": "the CPU rows kernel for the target's verification under draft_plan='auto', stop strings "
                          "checked at every accepted token, and batches",
}
# Wrappers that could not be installed on this transformers release: private name -> why.
DISABLED: dict[str, str] = {}
logger = logging.get_logger(__name__)


def install() -> None:
    """Route `generate(assistant_model=<DynaSpecAssistant>)` to our candidate generator. Idempotent.

    Fails soft: each wrapper is installed only where the private function it wraps exists with the arguments it
    needs; otherwise what it serves is disabled with one logged warning (the public routes, `speculative_generate` and
    `speculative_generate(trees=True)`, use only generate()'s documented `custom_generate` hook and keep working), and importing
    hf_dynaspec never fails because of it."""
    import transformers.generation.utils as generation_utils

    if _ORIGINAL in GenerationMixin.__dict__ or DISABLED:
        return
    found = version.Version(transformers.__version__)  # too old: the assistant_model= route cannot be served
    too_old = f"transformers {found} < {MIN_TRANSFORMERS} (pip install -U 'transformers>=5.8,<6')" \
        if found < MIN_TRANSFORMERS else None
    wrappers = (  # (where the function lives, its name, the arguments the wrapper reads, the wrapper's maker)
        (GenerationMixin, "_get_candidate_generator", _NEEDED, _wrap_candidate_generator),
        (GenerationMixin, "_validate_generation_mode", ("generation_mode", "generation_config",
                                                        "generation_mode_kwargs"), _wrap_validate_generation_mode),
        (generation_utils, "_speculative_sampling", ("candidate_input_ids", "candidate_logits", "candidate_length",
                                                     "new_logits"), _wrap_speculative_sampling),
        (GenerationMixin, "_assisted_decoding", (), _wrap_assisted_decoding))
    for owner, name, parameters, wrap in wrappers:
        try:
            problem = too_old if too_old and name == "_get_candidate_generator" else _needs(owner, name, parameters)
            if problem is None:
                original = getattr(owner, name)
                replacement = functools.wraps(original)(wrap(original))
                setattr(owner, _ORIGINAL_PREFIX + name, original)
                setattr(owner, name, replacement)
        except Exception as error:  # a release that changed the function beyond what the wrapper checks
            problem = f"{type(error).__name__}: {error}"
        if problem:
            DISABLED[name] = problem
            logger.warning(f"hf-dynaspec: transformers {transformers.__version__}'s {name} cannot be wrapped "
                           f"({problem}); disabled: {_SERVES[name]}.")


def _needs(owner, name: str, parameters: tuple[str, ...] = ()) -> str | None:
    """Why `owner.name` cannot be wrapped (missing, or lacking `parameters`), or None."""
    function = getattr(owner, name, None)
    if not callable(function):
        return f"{name} does not exist"
    try:
        found = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return f"{name} has no readable signature"
    missing = [p for p in parameters if p not in found]
    return f"{name} takes no {missing} argument" if missing else None


def _wrap_candidate_generator(original):
    signature = inspect.signature(original)

    def _get_candidate_generator(self, *args, **kwargs):
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
    return _get_candidate_generator


def refuse_if_route_disabled(assistant) -> None:
    """Where the assistant_model= route could not be installed, a DynaSpecAssistant passed to it is refused with
    the public route to use (transformers would otherwise run its own assisted loop with it and fail obscurely)."""
    if isinstance(assistant, DynaSpecAssistant) and "_get_candidate_generator" in DISABLED:
        raise UnsupportedTransformersError(
            f"generate(assistant_model=<DynaSpecAssistant>) is disabled on transformers {transformers.__version__} "
            f"({DISABLED['_get_candidate_generator']}). Use the public route: {PUBLIC_ROUTE}."
        )


def _wrap_validate_generation_mode(original):
    signature = inspect.signature(original)

    def _validate_generation_mode(self, *args, **kwargs):
        call = signature.bind(self, *args, **kwargs).arguments
        generation_mode = call.get("generation_mode")
        generation_config = call.get("generation_config")
        assistant = (call.get("generation_mode_kwargs") or {}).get("assistant_model")
        refuse_if_route_disabled(assistant)
        if isinstance(assistant, DynaSpecAssistant) and generation_mode != GenerationMode.ASSISTED_GENERATION:
            raise ValueError(
                f"these generate() options select {generation_mode} (num_beams={generation_config.num_beams}), "
                "which cannot use an assistant: transformers would drop it and decode without it. Assisted decoding "
                "is greedy or sampled decoding: set num_beams=1, or drop assistant_model for beam search."
            )
        return original(self, *args, **kwargs)
    return _validate_generation_mode


def _wrap_speculative_sampling(original):
    def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs):
        relaxed = kwargs.get("assistant_ensemble_weight") is not None  # a lossy rule the user chose: theirs
        if block_verify.is_marked(candidate_logits) and (not relaxed or not candidate_length):  # (empty: no draft to relax)
            return block_verify.block_verify(candidate_input_ids, candidate_logits, candidate_length, new_logits)
        return original(candidate_input_ids, candidate_logits, candidate_length, new_logits, *args, **kwargs)
    block_verify.WRAPPED = True
    return _speculative_sampling


def _batched_call(model, bound):
    """A batch (several prompts, or a padded one) on the `assistant_model=` route: transformers' assisted loop keeps
    one accepted length per step for the whole batch, so it cannot let rows accept different numbers of tokens.
    The call goes to the public chain route instead (hf_dynaspec.generation.batched_loop), with the same
    processors, stopping criteria and options (`bound`: the call's arguments bound to `_assisted_decoding`'s
    signature); -> a thunk running it, or None for one unpadded prompt."""
    from hf_dynaspec.generation.public_loop import is_batched
    from hf_dynaspec.generation.speculative import speculative_generate

    arguments = dict(bound.arguments)
    model_kwargs = dict(arguments.pop("model_kwargs", {}) or {})
    if not is_batched(arguments["input_ids"], model_kwargs):
        return None
    if arguments.get("streamer") is not None:
        raise ValueError("streaming a batch with an assistant is not supported: rows advance at different speeds; "
                         "stream one prompt at a time, or drop the streamer")
    logger.warning_once("hf-dynaspec: a batch passed with assistant_model= is decoded by hf-dynaspec's batched loop "
                        "(as custom_generate=speculative_generate would: each row drafts and accepts its own tokens), "
                        "not by "
                        "transformers' assisted loop, which is batch 1 (docs/batching.md)")
    return functools.partial(speculative_generate, model, arguments["input_ids"], arguments["logits_processor"],
                             arguments["stopping_criteria"], arguments["generation_config"],
                             drafter=arguments["assistant_model"], **model_kwargs)


def _wrap_assisted_decoding(original):
    """Around an assisted call with a DynaSpecAssistant: a batch goes to the batched loop (`_batched_call`); one
    row's stopping criteria are checked at every accepted token (hf_dynaspec.generation.every_token_stops); with
    its rounds planned (`draft_plan="auto"`, `target_verify_kernel="auto"`) the target's verification forwards
    through the CPU rows kernel where measured faster (hf_dynaspec.generation.costs.verify_kernel), restored when
    the call ends."""
    signature = inspect.signature(original)  # read once, and a call's arguments bound once

    def _assisted_decoding(self, *args, **kwargs):
        assistant = kwargs.get("assistant_model")
        refuse_if_route_disabled(assistant)
        if isinstance(assistant, DynaSpecAssistant):
            bound = signature.bind(self, *args, **kwargs)
            batched = _batched_call(self, bound)
            if batched is not None:
                return batched()
            # Criteria beyond the EOS and max length transformers crops at: checked at every accepted token.
            every_token = not all(isinstance(c, CROPPED_BY_TRANSFORMERS) for c in bound.arguments["stopping_criteria"])
            checker = check_every_token(bound.arguments) if every_token else None
            # Top-k and top-p as `SparseTopKTopP` / `SparseTopP` (transformers' results from the few logits a top-k
            # keeps, hf_dynaspec.drafting.row_processing): the target's verification runs them per position.
            bound.arguments["logits_processor"] = with_sparse_warpers(bound.arguments["logits_processor"])
            options = assistant.generation_config
            planned = options.draft_plan == "auto" and options.target_verify_kernel == "auto"
            with target_verify_kernel(self) if planned else contextlib.nullcontext():
                output = original(*bound.args, **bound.kwargs)
            return output if checker is None else cut(output, checker, bound.arguments["input_ids"].shape[1])
        return original(self, *args, **kwargs)
    return _assisted_decoding
