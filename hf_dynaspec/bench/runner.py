"""Load a target and its assistant by name, and compare plain with assisted greedy generation.

Shared by `hf-dynaspec generate` and `hf-dynaspec demo` (and the benchmark harness later).
"""

from __future__ import annotations

from pathlib import Path

from hf_dynaspec.bench.harness import timed_run
from hf_dynaspec.bench.methods import Method
from hf_dynaspec.exactness import check_exactness
from hf_dynaspec.generation.costs.verify_kernel import fast_cpu
from hf_dynaspec.loading import DTYPES, load_target, resolve_device  # noqa: F401  (the bench's and CLI's names)
from hf_dynaspec.modeling.assistant import DynaSpecAssistant

# Trained assistants shipped with the repository (a checkout; a built wheel does not carry them), one directory
# per zoo target name.
SHIPPED_ASSISTANTS = Path(__file__).resolve().parents[2] / "assistants"
SHIPPED_FOR = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct", "gemma-3-270m")


def shipped_assistant_dir(target_name: str) -> Path | None:
    """The best assistant the repository ships for a zoo target, if any."""
    candidate = SHIPPED_ASSISTANTS / Path(target_name).name
    return candidate if (candidate / "config.json").is_file() else None


def no_trained_assistant_message(target_name: str) -> str:
    return (
        f"No trained assistant found for {target_name!r}: pass --assistant DIR_OR_HUB_ID. Trained assistants ship in "
        f"this project's repository under assistants/<target> ({', '.join(SHIPPED_FOR)}); a built wheel does not "
        f"carry them, so from a wheel pass the directory of a checkout (looked for: {SHIPPED_ASSISTANTS}). For "
        "another model, train one with the recipes (docs/training.md). An untrained assistant is exact but drafts "
        "almost nothing (tau ~1): make one on purpose with DynaSpecAssistant.from_target(model)."
    )


def load_assistant(assistant: str | None, target, target_name: str) -> tuple[DynaSpecAssistant, str]:
    """(assistant, description). Without a path: the one shipped for this target; never a silent untrained one."""
    if assistant is None:
        shipped = shipped_assistant_dir(target_name)
        if shipped is None:
            raise ValueError(no_trained_assistant_message(target_name))
        assistant = str(shipped)
    return DynaSpecAssistant.from_pretrained(assistant, target=target), assistant


def compare_plain_and_assisted(model, tokenizer, assistant, input_ids, max_new_tokens: int,
                               assisted_kwargs: dict | None = None, fast_plain: bool = False) -> dict:
    """Greedy plain vs assisted on one prompt (a short warm-up of both first), with the near-tie check.

    `assisted_kwargs`: the generate() arguments of the assisted run (default: chain drafting,
    `assistant_model=assistant`; tree decoding passes `custom_generate` and `drafter`). `fast_plain`: also time
    plain generate() on the fast path (`fast_cpu`: the fastest kernels, compiled steps), the second baseline."""
    assisted_kwargs = assisted_kwargs if assisted_kwargs is not None else {"assistant_model": assistant}
    plain_method, assisted_method = Method("vanilla"), Method("assisted", assisted_kwargs, assistant)
    for method in (plain_method, assisted_method):  # warm-up: first calls allocate caches and build heads
        timed_run(model, method, input_ids, 4)
    fast = None
    if fast_plain:
        fast_method = Method("vanilla-fast", context=fast_cpu)
        # Warmed up at the timed call's own length: its cache capacity, so one compile and none in the timed run.
        timed_run(model, fast_method, input_ids, max_new_tokens)
        fast = timed_run(model, fast_method, input_ids, max_new_tokens)
    plain = timed_run(model, plain_method, input_ids, max_new_tokens)
    assisted = timed_run(model, assisted_method, input_ids, max_new_tokens)
    stats = assistant.stats.as_dict()
    divergence = check_exactness(model, input_ids, plain.new_ids, assisted.new_ids)
    return {
        "plain": tokenizer.decode(plain.new_ids, skip_special_tokens=True),
        "assisted": tokenizer.decode(assisted.new_ids, skip_special_tokens=True),
        "identical": divergence is None,
        "near_tie_margin": None if divergence is None else divergence.margin,
        "plain_tokens_per_s": plain.tokens_per_s,
        "fast_plain_tokens_per_s": None if fast is None else fast.tokens_per_s,
        "assisted_tokens_per_s": assisted.tokens_per_s,
        "tau": stats["tau"],
        "speedup": assisted.tokens_per_s / plain.tokens_per_s,
        "speedup_over_fast_plain": None if fast is None else assisted.tokens_per_s / fast.tokens_per_s,
        "divergence": None if divergence is None else divergence.as_dict(),
        "acceptance_histogram": stats["acceptance_histogram"],
        "plain_new_tokens": len(plain.new_ids),
        "assisted_new_tokens": len(assisted.new_ids),
    }
