"""GPU costs without real weights: what a draft step and a verification pass cost on this card, per model shape.

Greedy acceptance does not depend on the device, so the acceptance measured on the CPU with the real models
(the shipped artifacts' tables) and these costs give a projected GPU speedup per method
(`python benchmarks/gpu_projection.py`, docs/gpu.md). Random weights of real shapes: the costs hold, acceptance
does not (none is measured here).

For each shape (Qwen2.5 0.5B, 1.5B, 7B; Llama-3.1 8B) and dtype (fp16, bf16): the median milliseconds of one
round's draft of K = 4 tokens (one verified position through the drafter's layer, 3 one-token steps, 4 head
calls) per head (full, FR-Spec 32,768, DynaSpec with a row budget), eager and, where `GPU_COSTS_CAPTURED` names
the shape (default: 0.5B and 1.5B, bf16), captured (`draft_capture="compile"`: CUDA graphs), and of the target's
verification forward of n = 1..16 tokens after a 512-token context. Written to $OUT/gpu_costs.json. Run it as its
own call (`GPU_COSTS=1 bash tests/gpu/run_suite.sh OUT -k costs`): it builds four models per dtype, so the
suite's default call leaves it out.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs a CUDA device"),
    pytest.mark.skipif(os.environ.get("GPU_COSTS") != "1",
                       reason="a measurement of its own call: GPU_COSTS=1 bash tests/gpu/run_suite.sh OUT -k costs"),
]

from hf_dynaspec import DynaSpecAssistant  # noqa: E402
from hf_dynaspec.bench.timer import interleaved_medians  # noqa: E402
from hf_dynaspec.drafting.chain import ChainDraftSession  # noqa: E402
from hf_dynaspec.drafting.runtime import captured_draft, runtime_head  # noqa: E402
from hf_dynaspec.modeling.shortlist.clustering import VocabClusters  # noqa: E402

# name: (config class, fields); the row budget R(t) of the shipped assistant of that size (7B/8B: the 0.5B's).
SHAPES = {
    "qwen2.5-0.5b": ("Qwen2Config", dict(vocab_size=151_936, hidden_size=896, intermediate_size=4864,
                                         num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2),
                     [15143, 14039, 1755]),
    "qwen2.5-1.5b": ("Qwen2Config", dict(vocab_size=151_936, hidden_size=1536, intermediate_size=8960,
                                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2),
                     [31048, 36363, 4545]),
    "qwen2.5-7b": ("Qwen2Config", dict(vocab_size=152_064, hidden_size=3584, intermediate_size=18944,
                                       num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4),
                   [15143, 14039, 1755]),
    "llama-3.1-8b": ("LlamaConfig", dict(vocab_size=128_256, hidden_size=4096, intermediate_size=14336,
                                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8),
                     [15143, 14039, 1755]),
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
CONTEXT = 512
CAPTURED = os.environ.get("GPU_COSTS_CAPTURED", "qwen2.5-0.5b:bf16,qwen2.5-1.5b:bf16").split(",")


def _target(shape: str, dtype: torch.dtype):
    import transformers

    class_name, fields, _ = SHAPES[shape]
    config = getattr(transformers, class_name)(**fields, tie_word_embeddings=False, max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa",
                                                              torch_dtype=dtype).eval()
    model.generation_config.eos_token_id = None
    return model


def _assistant(target, rows, tmp_path, strategy: str, capture: str = "off"):
    """Shortlist components of the right sizes: costs depend on the rows scored, not on which tokens they are
    (random clusters of 256 equal parts; the row budget sets the rows)."""
    vocab = target.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    assistant = DynaSpecAssistant.from_target(target, draft_plan="fixed")
    assistant.shortlists.set_frequency_list(torch.randperm(vocab, generator=generator)[:32_768], kind="frspec")
    order = torch.randperm(vocab - 1, generator=generator) + 1
    offsets = torch.linspace(0, vocab - 1, 257).long()
    assistant.shortlists.set_clusters(VocabClusters(order, offsets, torch.tensor([0])))
    assistant.save_pretrained(tmp_path)
    return DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, shortlist_rows=rows,
                                             shortlist_size=32_768, draft_capture=capture, draft_plan="fixed",
                                             prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)


def _draft_round(assistant, head, captured, input_ids, features):
    """A timed call: one round's draft of 4 tokens after one newly verified position."""
    session = ChainDraftSession(assistant.drafter, assistant.config.vocab_size, do_sample=False, head=head,
                                captured=captured)
    session.draft(input_ids[:, :-1], features[:, :-1], 4)  # the context's pass, once, untimed

    def call():
        session.cache.crop(input_ids.shape[1] - 2)
        session.num_verified_pairs = input_ids.shape[1] - 2
        return session.draft(input_ids, features[:, -1:], 4)
    for _ in range(3):  # compiles, records the CUDA graphs
        call()
    return call


def _verify_calls(target):
    from transformers import DynamicCache

    ids = torch.randint(0, target.config.vocab_size, (1, CONTEXT + 16), device="cuda")
    cache = DynamicCache(config=target.config)
    with torch.no_grad():
        target(ids[:, :CONTEXT], past_key_values=cache, use_cache=True)

    def verify(n):
        def call():
            cache.crop(CONTEXT)
            with torch.no_grad():
                return target(ids[:, CONTEXT: CONTEXT + n], past_key_values=cache, use_cache=True).logits
        return call
    return {f"verify {n}": (lambda n=n: verify(n)) for n in range(1, 17)}


class _NoFeatures:
    """What the loop's steps ask a drafter for, when only the target's cost is measured."""

    @staticmethod
    def hidden_state_selection():
        return None

    @staticmethod
    def select_target_hidden(hidden_states):
        return torch.zeros(1, CONTEXT + 1, 1)


def _static_verify_calls(target):
    """verify(n) through the static round (`verify_round="static"`: a StaticCache, the forward compiled per width
    with CUDA graphs) after the same 512-token context, n = 1, 2, 4, 8, 16 (its width buckets)."""
    from transformers.generation.logits_process import LogitsProcessorList

    from hf_dynaspec.drafting.contract import chain_tree
    from hf_dynaspec.generation.batched_loop import _prefill, _Row, _verify
    from hf_dynaspec.generation.static_round import TargetSlots

    ids = torch.randint(0, target.config.vocab_size, (1, CONTEXT), device="cuda")
    row = _Row(0, 0, ids, None, None)
    slots = TargetSlots(target, None, CONTEXT + 32, static=True)
    with torch.no_grad():
        valid, _, _ = _prefill(target, _NoFeatures, [row], ids, torch.ones_like(ids, dtype=torch.bool), slots,
                               [LogitsProcessorList()], False)

    def verify(n):
        tree = chain_tree(row.sequence[0, -1:], torch.randint(0, target.config.vocab_size, (n - 1,), device="cuda"))

        def call():
            with torch.no_grad():
                return _verify(target, _NoFeatures, [row], [tree], valid, slots).logits
        for _ in range(3):  # compiles the width, records its CUDA graph
            call()
        return call
    return {f"verify static {n}": (lambda n=n: verify(n)) for n in (1, 2, 4, 8, 16)}


@pytest.fixture(autouse=True)
def _graphs_or_error(monkeypatch):
    """A CUDA graph that cannot be recorded raises instead of running as inductor code without graphs."""
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config.triton, "cudagraph_or_error"):
        monkeypatch.setattr(inductor_config.triton, "cudagraph_or_error", True)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_gpu_costs_per_shape(tmp_path, shape):
    out = os.environ.get("OUT", str(tmp_path))
    path = os.path.join(out, "gpu_costs.json")
    record = json.load(open(path)) if os.path.exists(path) else {
        "card": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
        "torch": torch.__version__, "context": CONTEXT, "entries": []}
    for dtype_name, dtype in DTYPES.items():
        if dtype == torch.bfloat16 and torch.cuda.get_device_capability() < (8, 0):
            continue
        skips_before = _cudagraph_skips()  # before the warm-ups: a graph skipped while recording counts too
        target = _target(shape, dtype)
        rows = SHAPES[shape][2]
        hidden = target.config.hidden_size
        input_ids = torch.randint(0, target.config.vocab_size, (1, 64), device="cuda")
        features = torch.randn(1, 64, hidden, device="cuda", dtype=dtype)
        cases = {**_verify_calls(target), **_static_verify_calls(target)}
        for strategy in ("full", "frspec", "dynaspec"):
            modes = ["off"] + (["compile"] if f"{shape}:{dtype_name}" in CAPTURED else [])
            for mode in modes:
                assistant = _assistant(target, rows, tmp_path / f"{strategy}-{mode}", strategy, mode)
                head = runtime_head(assistant, assistant.generation_config)
                captured = captured_draft(assistant, assistant.generation_config, head)
                call = _draft_round(assistant, head, captured, input_ids, features)
                cases[f"draft4 {strategy} {'captured' if mode == 'compile' else 'eager'}"] = lambda call=call: call
        medians = interleaved_medians(cases, 15)
        record["entries"].append({"shape": shape, "dtype": dtype_name, "row_budget": rows, "medians_ms": medians,
                                  "cudagraph_skips": _cudagraph_skips() - skips_before})
        del target, cases
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    assert all(m > 0 for e in record["entries"] for m in e["medians_ms"].values())
    # "captured" and "static" timings are CUDA graphs only if no graph was skipped (a skip falls back to inductor
    # code without graphs, silently: the run-6 "captured draft" timings were that).
    assert all(e["cudagraph_skips"] == 0 for e in record["entries"]), record["entries"]


def _cudagraph_skips() -> int:
    """Graphs cudagraph trees silently did not record (mutated inputs that are not static addresses, ...)."""
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])  # a Counter: 0 until the first skip


PLAIN_SHAPES = ("qwen2.5-0.5b", "qwen2.5-1.5b")
PLAIN_NEW = 64


@pytest.mark.parametrize("shape", PLAIN_SHAPES)
def test_plain_generate_eager_and_compiled(tmp_path, shape):
    """The baselines of the projection: plain `generate()` per new token after a 512-token prompt, eager (a dynamic
    cache) and HF's own fast path (`cache_implementation="static"`, compiled with CUDA graphs), bf16, batch 1.
    Per token = (time of 1 + PLAIN_NEW new tokens - time of 1 new token) / PLAIN_NEW: the prefill cancels."""
    out = os.environ.get("OUT", str(tmp_path))
    path = os.path.join(out, "gpu_costs.json")
    record = json.load(open(path)) if os.path.exists(path) else {"entries": []}
    target = _target(shape, torch.bfloat16)
    ids = torch.randint(0, target.config.vocab_size, (1, CONTEXT), device="cuda")

    def generate(new: int, **options):
        def call():
            with torch.no_grad():
                return target.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, **options)
        return call
    per_token, skips_before = {}, _cudagraph_skips()
    for name, options in (("eager", {}), ("compiled", {"cache_implementation": "static"})):
        for _ in range(3):  # compiles and records the graphs (static path), warms the allocator
            generate(PLAIN_NEW + 1, **options)()
        medians = interleaved_medians({"short": lambda o=options: generate(1, **o),
                                       "long": lambda o=options: generate(PLAIN_NEW + 1, **o)}, 5)
        per_token[name] = (medians["long"] - medians["short"]) / PLAIN_NEW
    record.setdefault("plain", []).append({"shape": shape, "dtype": "bf16", "ms_per_token": per_token,
                                           "cudagraph_skips": _cudagraph_skips() - skips_before})
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    assert per_token["eager"] > 0 and per_token["compiled"] > 0
