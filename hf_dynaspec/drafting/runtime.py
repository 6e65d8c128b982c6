"""What an attached assistant needs at run time that the artifact does not hold.

- `runtime_head(assistant, options)`: the shortlist head an eagle drafter scores through, built from the
  artifact's stored components and the drafting options, and reused across generate() calls while nothing it
  depends on has changed (building one copies rows: the whole permuted head for DynaSpec).
- `planner_memory(assistant, do_sample)`, `suffix_cache(assistant)`: what `draft_plan="auto"` and the suffix
  cache learn across generate() calls of one assistant; `forget_learnt_state(assistant)` starts them afresh.
- `prepare_for_target(assistant, target)`: route the drafter's Linear layers through the CPU bf16 rows kernel
  where it applies.

All of it is held in the assistant's `RuntimeState`, outside the artifact (hf_dynaspec.runtime_store, the one
store of every drafter kind): nothing is written onto the `PreTrainedModel`, so copying, saving or pickling an
assistant never carries run-time state, and the state goes away with the assistant.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import is_fake

from hf_dynaspec.drafting.captured import CapturedChainDraft
from hf_dynaspec.drafting.device_paths import use_accelerator_paths
from hf_dynaspec.drafting.lookup import SuffixCache
from hf_dynaspec.drafting.planning.core import PlannerMemory
from hf_dynaspec.drafting.selector import build_head
from hf_dynaspec.kernels.verify_rows import loader as verify_rows_loader
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch
from hf_dynaspec.modeling.acceptance_prior import prior_for
from hf_dynaspec.runtime_store import forget_learnt_state, runtime_of

__all__ = ["captured_draft", "forget_learnt_state", "planner_memory", "prepare_for_target", "runtime_head", "runtime_of", "suffix_cache"]


def planner_memory(assistant, do_sample: bool, stored=None, make=PlannerMemory) -> PlannerMemory:
    """The planner's acceptance tables of this assistant or lattice source (kept across generate() calls; greedy and
    sampled apart), `make(prior)` (a lattice source's: `proposers.lattice.lattice_memory`) started at `stored`, the
    acceptance measured with the artifact (default: its generation config's)."""
    memories = runtime_of(assistant).planner_memories
    if bool(do_sample) not in memories:  # the tables start at the acceptance measured with the artifact, if any
        if stored is None:
            stored = getattr(getattr(assistant, "generation_config", None), "expected_acceptance", None)
        memories[bool(do_sample)] = make(prior_for(stored, do_sample))
    return memories[bool(do_sample)]


def suffix_cache(assistant, options=None) -> SuffixCache | None:
    """The assistant's suffix cache (its earlier outputs and any added corpus), created on first use; None when
    `options.suffix_cache_num_tokens` is 0. `hf_dynaspec.suffix_cache(assistant).add_corpus(token_id_lists)`
    adds a corpus."""
    options = options if options is not None else assistant.generation_config
    if not options.suffix_cache_num_tokens:
        return None
    runtime = runtime_of(assistant)
    if runtime.suffix is None or runtime.suffix.max_tokens != options.suffix_cache_max_tokens:
        runtime.suffix = SuffixCache(max_tokens=options.suffix_cache_max_tokens, vocab_size=assistant.config.vocab_size)
    return runtime.suffix


def runtime_head(assistant, options):
    """The head drafting scores through (None: a drafter with its own reduced head, EAGLE-3)."""
    if assistant.drafter.has_own_head:
        if options.shortlist != "full":
            raise ValueError(
                "An eagle3 drafter has its own static draft vocabulary (d2t); shortlist strategies apply to eagle "
                f"drafters that borrow the target's head. Use shortlist='full', got {options.shortlist!r}."
            )
        return None
    head = assistant.drafter.target.lm_head
    if getattr(head, "bias", None) is not None:
        raise ValueError("targets whose LM head has a bias are not supported by the shortlisted head yet")
    tensors = [head.weight, *assistant.shortlists.buffers(), *assistant.shortlists.parameters()]
    key = (options.shortlist, options.shortlist_size, options.max_clusters, options.fixed_clusters,
           options.max_shortlist_size, str(options.shortlist_rows), head.weight.device, head.weight.dtype,
           use_accelerator_paths(head.weight.device), tuple(_tensor_key(t) for t in tensors))
    runtime = runtime_of(assistant)
    if runtime.head is None or runtime.head[0] != key:
        runtime.head = (key, build_head(options.shortlist, head.weight, assistant.shortlists, options), tensors)
    return runtime.head[1]


def captured_draft(assistant, options, head) -> CapturedChainDraft | None:
    """The fixed-shape K-token draft of `options.draft_capture` ("eager" or "compile"; None with "off"), kept
    with the assistant while its head stays the same, so that its compiled graphs serve every generate() call.
    None where a draft cannot be captured: a drafter with its own head (EAGLE-3), and DynaSpec's CPU form, whose
    row blocks are host lists (on the CPU its device form is not faster; `accelerator_paths_on_cpu` forces it)."""
    if options.draft_capture == "off" or head is None or getattr(head, "indexed", True) is False:
        return None
    runtime = runtime_of(assistant)
    key = (id(head), options.draft_capture)  # the entry holds the head: its id is not reused while it lives
    if runtime.captured is None or runtime.captured[0] != key:
        runtime.captured = (key, CapturedChainDraft(assistant.drafter, head, compile=options.draft_capture == "compile"))
    return runtime.captured[1]


def _tensor_key(tensor: torch.Tensor) -> tuple:
    """What identifies a tensor's contents for the head cache: the object, its in-place version and its storage
    (a `.data` swap keeps the object). A tensor without storage of its own (a fake tensor: how the device paths
    are tested on a CPU) has no data pointer to read; its identity stands alone (the cache entry holds the
    tensors, so their ids are not reused while it lives)."""
    storage = 0 if is_fake(tensor) else tensor.data_ptr()
    return id(tensor), tensor._version, storage


def prepare_for_target(assistant, target) -> None:
    """Route the drafter's Linear layers through the CPU rows kernel for a bf16 target on CPU (idempotent).

    The drafter's first step of a round reads every newly verified position (1..K+1 rows); the kernel makes
    those rows cost one weight pass instead of one each (no extra memory). Its one-row product is faster than
    PyTorch's too, so the drafter's one-token steps use it as well (34.1 -> 32.0 ms per 2-token draft,
    benchmarks/results/drafter_one_row_05b.json). No row cap: the drafter's pass over the prompt (its first step
    of a generate() call) is 4-5x faster through the kernel too (741 rows: 1,754 -> 401 ms,
    benchmarks/results/drafter_prompt_pass_05b.json).
    """
    drafter = assistant.drafter
    if not (target.dtype == torch.bfloat16 and target.device.type == "cpu" and verify_rows_loader.available()):
        verify_rows_patch.disable(drafter)  # e.g. re-attached to an fp32 or GPU target since an earlier call
    elif any(isinstance(m, nn.Linear) and not verify_rows_patch.is_enabled(m) for m in drafter.modules()):
        # Only when a Linear is not routed yet (first call, or one added since, e.g. feature fusion's `fuse`):
        # re-patching rebuilds every module's forward.
        verify_rows_patch.enable(drafter, method="kernel", min_rows=1, max_rows=verify_rows_patch.ANY_ROWS)
