"""The GPU suite: what only a CUDA device can show. Skipped without one; run it whenever a GPU is at hand:

    HF_DYNASPEC_TRITON_GPU=1 python -m pytest -q -m gpu tests/gpu

(HF_DYNASPEC_TRITON_GPU=1 keeps tests/conftest.py from selecting the Triton interpreter, so the real kernel
runs.) Models are random-weight models of real shapes (the GPU machines have no network): speed and
exactness do not depend on trained weights. What ran where is recorded in docs/gpu.md.
"""

from __future__ import annotations

import functools
import os
import tempfile

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs a CUDA device"),
]

from conftest import plain_generate  # noqa: E402

from hf_dynaspec import DynaSpecAssistant, check_exactness, speculative_generate  # noqa: E402
from hf_dynaspec.drafting.chain import ChainDraftSession  # noqa: E402
from hf_dynaspec.drafting.runtime import runtime_head  # noqa: E402
from hf_dynaspec.drafting.tree import TreeDraftSession  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.torch_paths import indexed_head_reference  # noqa: E402
from hf_dynaspec.kernels.streams import Pending  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True)
def real_kernel():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.fail("TRITON_INTERPRET=1 is set: run the GPU suite with HF_DYNASPEC_TRITON_GPU=1 (see the docstring)")


def _supported(dtype):
    if dtype == torch.bfloat16 and torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("this card has no bf16")


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("batch", [1, 3, 17])
@pytest.mark.parametrize("shape", [(151_936, 896), (262_144, 640), (1237, 200)], ids=["qwen-0.5b", "gemma3", "odd"])
def test_triton_head_matches_the_reference(dtype, batch, shape):
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import indexed_head_triton

    _supported(dtype)
    vocab, hidden_size = shape
    generator = torch.Generator(device="cuda").manual_seed(batch)
    weight = torch.randn(vocab, hidden_size, device="cuda", generator=generator).to(dtype)
    hidden = torch.randn(batch, hidden_size, device="cuda", generator=generator).to(dtype)
    width = 701  # given row ids with padding (-1) between runs of real rows: the kernel's given-ids form
    sizes = [701, 3, 0, 412, 97]
    rows = torch.randperm(vocab, device="cuda", generator=generator)
    row_ids = torch.cat([torch.cat([rows[i * width: i * width + n], torch.full((width - n,), -1, device="cuda")])
                         for i, n in enumerate(sizes)])
    out = indexed_head_triton(hidden, weight, row_ids)
    expected = indexed_head_reference(hidden.float(), weight.float(), row_ids)
    real = row_ids >= 0
    torch.testing.assert_close(out.scores[:, real], expected.scores[:, real], rtol=2e-2, atol=2e-2 * hidden_size**0.5)
    assert torch.isneginf(out.scores[:, ~real]).all()
    chosen = expected.scores.gather(-1, out.argmax[:, None])[:, 0]
    assert (expected.scores.max(-1).values - chosen <= 0.05 * hidden_size**0.5).all()  # argmax up to rounding
    torch.testing.assert_close(out.logsumexp, expected.scores.logsumexp(-1), rtol=1e-2, atol=1e-1)


def _ranked_tables(vocab: int, num_clusters: int, generator):
    """Random clusters of a real vocabulary as the runtime table holds them (one large, some empty)."""
    ids = torch.randperm(vocab, device="cuda", generator=generator)
    always_ids, token_order = ids[:40], ids[40:]
    cuts = torch.randint(0, len(token_order) + 1, (num_clusters - 1,), device="cuda", generator=generator)
    bounds = torch.cat([torch.zeros(1, dtype=torch.long, device="cuda"), cuts.sort().values,
                        torch.full((1,), len(token_order), device="cuda")])
    return bounds.diff(), bounds[:-1].contiguous(), token_order, always_ids


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("batch", [1, 5])
def test_the_one_launch_ranked_head_matches_the_reference_on_a_real_shape(dtype, batch):
    """The kernel's own row ids equal the torch rule's exactly, its scores and reductions the reference's, at
    Qwen2.5's shape (151,936 x 896) with 1,024 clusters (eight chunks of the in-kernel scan), R = 1 .. 16,384."""
    from hf_dynaspec.kernels.shortlist_head.torch_paths import ranked_head_reference
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import ranked_head_triton

    _supported(dtype)
    generator = torch.Generator(device="cuda").manual_seed(batch)
    weight = torch.randn(151_936, 896, device="cuda", generator=generator).to(dtype)
    hidden = torch.randn(batch, 896, device="cuda", generator=generator).to(dtype)
    tables = _ranked_tables(151_936, 1024, generator)
    for rows in (1, 1000, 4096, 16_384):
        ranking = torch.randperm(1024, device="cuda", generator=generator)
        out = ranked_head_triton(hidden, weight, ranking, *tables, rows)
        expected = ranked_head_reference(hidden.float(), weight.float(), ranking, *tables,
                                         torch.arange(rows, device="cuda"))
        assert torch.equal(out.token_ids, expected.token_ids), rows
        torch.testing.assert_close(out.scores, expected.scores, rtol=2e-2, atol=2e-2 * 896**0.5)
        chosen = expected.scores.gather(-1, out.argmax[:, None])[:, 0]
        assert (expected.scores.max(-1).values - chosen <= 0.05 * 896**0.5).all()  # argmax up to rounding
        assert torch.equal(out.argmax_token_ids, out.token_ids[out.argmax])
        torch.testing.assert_close(out.logsumexp, expected.logsumexp, rtol=1e-2, atol=1e-1)
        torch.testing.assert_close(out.top_probability, (out.max - out.logsumexp).exp(), rtol=1e-4, atol=1e-6)


def test_the_one_launch_head_replays_in_a_cuda_graph():
    """Captured once, replayed with new rankings and hidden states written into the graph's inputs: each replay
    gives the eager kernel's outputs (the arrival counter is back at zero after every launch, with no memset in
    the graph), 200 replays in a row."""
    from hf_dynaspec.kernels.shortlist_head.triton_kernel import ranked_head_triton

    generator = torch.Generator(device="cuda").manual_seed(0)
    weight = torch.randn(151_936, 896, device="cuda", generator=generator).to(torch.bfloat16)
    tables = _ranked_tables(151_936, 1024, generator)
    hidden = torch.randn(1, 896, device="cuda", generator=generator).to(torch.bfloat16)
    ranking = torch.randperm(1024, device="cuda", generator=generator)
    ranked_head_triton(hidden, weight, ranking, *tables, 4096)  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ranked_head_triton(hidden, weight, ranking, *tables, 4096)
    for _ in range(200):
        hidden.copy_(torch.randn(1, 896, device="cuda", generator=generator).to(torch.bfloat16))
        ranking.copy_(torch.randperm(1024, device="cuda", generator=generator))
        graph.replay()
        eager = ranked_head_triton(hidden, weight, ranking, *tables, 4096)
        assert torch.equal(captured.token_ids, eager.token_ids)
        assert torch.equal(captured.argmax_token_ids, eager.argmax_token_ids)
        torch.testing.assert_close(captured.logsumexp, eager.logsumexp)


@functools.cache
def _real_shape_target(dtype, layers: int = 4):
    """Qwen2.5-0.5B's shapes (vocabulary, width, heads), fewer layers, random weights, sharp logits. Built on the
    device (a CPU init of 150M+ parameters and the copy over took most of the suite's time) and shared by the
    tests, which only read it; the parameters come from one CUDA seed, so every run builds the same target."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=False,
                         max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=dtype).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.generation_config.eos_token_id = None
    return model


_ARTIFACTS: dict[int, str] = {}


def _artifact(target) -> str:
    """One saved assistant per target with every shortlist strategy's components (FR-Spec list, clusters): the
    k-means over 151,936 rows runs once per target, not once per test."""
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    if id(target) not in _ARTIFACTS:
        path = tempfile.mkdtemp(prefix="gpu-suite-assistant-")
        assistant = DynaSpecAssistant.from_target(target, draft_plan="fixed")
        head = target.get_output_embeddings().weight
        generator = torch.Generator().manual_seed(0)
        assistant.shortlists.set_frequency_list(torch.randperm(head.shape[0], generator=generator)[:32_768],
                                                kind="frspec")
        assistant.shortlists.set_clusters(cluster_vocabulary(head, 64, always_ids=[0], sample_size=20_000,
                                                             max_iter=5))
        assistant.save_pretrained(path)
        _ARTIFACTS[id(target)] = path
    return _ARTIFACTS[id(target)]


def _assistant(target, strategy: str, **options):
    """An assistant loaded with `strategy` from the target's shared artifact. The plan is pinned to "fixed" unless
    a test asks for another: with random weights the planner would learn that drafts are never accepted and stop
    drafting, and the test would check nothing."""
    options = {"draft_plan": "fixed", "suffix_cache_num_tokens": 0, "prompt_lookup_num_tokens": 0, **options}
    return DynaSpecAssistant.from_pretrained(_artifact(target), target=target, shortlist=strategy, **options)


@pytest.mark.parametrize("strategy", ["full", "frspec", "dynaspec"])
def test_drafting_never_waits_on_the_gpu(tmp_path, strategy):
    """Chain and tree drafting under torch.cuda.set_sync_debug_mode("error"): any host sync raises."""
    target = _real_shape_target(torch.bfloat16 if torch.cuda.get_device_capability() >= (8, 0) else torch.float16)
    assistant = _assistant(target, strategy, num_assistant_tokens=4)
    head = runtime_head(assistant, assistant.generation_config)
    input_ids = torch.randint(0, 151_936, (1, 40), device="cuda")
    features = torch.randn(1, 39, 896, device="cuda", dtype=target.dtype)
    chain = ChainDraftSession(assistant.drafter, 151_936, do_sample=False, head=head)
    tree = TreeDraftSession(assistant.drafter, 151_936, top_k=4, depth=4, total_tokens=24, head=head)
    chain.draft(input_ids, features, 4)  # warm-up: kernels compiled, caches allocated
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        chain = ChainDraftSession(assistant.drafter, 151_936, do_sample=False, head=head)
        draft = chain.draft(input_ids, features, 4)
        tree.draft_tree(input_ids, features)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert draft.token_ids.shape == (1, 4)


def test_side_stream_router_gives_the_sequential_shortlist(tmp_path):
    """The side stream is delayed (a sleep before the router), so a head that did not wait for it would score
    whatever the router's output buffer held: the test can fail."""
    target = _real_shape_target(torch.float16)
    assistant = _assistant(target, "dynaspec")
    head = runtime_head(assistant, assistant.generation_config)
    assert head.side_stream.stream is not None and head.indexed
    router = head.router
    e, h, hidden = (torch.randn(1, 896, device="cuda", dtype=torch.float16) for _ in range(3))

    def delayed_router(*inputs):
        torch.cuda._sleep(50_000_000)
        return router(*inputs)

    for position in range(4):
        head.router = delayed_router
        overlapped = head.scores(hidden, head.choose_clusters(e, h, position))
        head.router = router
        sequential = head.scores(hidden, (Pending(router(e, h)), position))  # computed inline, no side stream
        assert torch.equal(overlapped.token_ids, sequential.token_ids)
        torch.testing.assert_close(overlapped.scores, sequential.scores)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("route", ["chain", "tree"])
def test_greedy_is_exact_up_to_near_ties_on_a_real_shape(tmp_path, dtype, route):
    _supported(dtype)
    target = _real_shape_target(dtype)
    assistant = _assistant(target, "dynaspec", num_assistant_tokens=4)
    for seed in range(3):
        input_ids = torch.randint(0, 151_936, (1, 24), generator=torch.Generator().manual_seed(seed)).cuda()
        expected = plain_generate(target, input_ids, max_new_tokens=48)
        kwargs = dict(assistant_model=assistant) if route == "chain" else dict(custom_generate=speculative_generate, trees=True,
                                                                                drafter=assistant)
        got = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=48, **kwargs)
        divergence = check_exactness(target, input_ids, expected[0, 24:], got[0, 24:])
        assert divergence is None or divergence.near_tie, divergence


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
def test_per_step_head_and_draft_times(tmp_path, dtype):
    """Median milliseconds of one head call and of one chain draft of 4 tokens per strategy, interleaved
    (random weights: per-step costs hold, acceptance does not, so no end-to-end tokens per second). Written to
    $OUT/gpu_steps_<dtype>.json for docs/gpu.md."""
    import json

    from hf_dynaspec.bench.timer import interleaved_medians

    _supported(dtype)
    target = _real_shape_target(dtype, layers=24)
    assistants = {s: _assistant(target, s, num_assistant_tokens=4)
                  for s in ("full", "frspec", "dynaspec", "dynaspec-fixed")}
    heads = {s: runtime_head(a, a.generation_config) for s, a in assistants.items()}
    input_ids = torch.randint(0, 151_936, (1, 64), device="cuda")
    features = torch.randn(1, 63, 896, device="cuda", dtype=dtype)
    e, h, hidden = (torch.randn(1, 896, device="cuda", dtype=dtype) for _ in range(3))

    def head_call(strategy):
        head = heads[strategy]
        return lambda: head.scores(hidden, head.choose_clusters(e, h, 0))

    def draft_call(strategy):
        assistant, head = assistants[strategy], heads[strategy]
        return lambda: ChainDraftSession(assistant.drafter, 151_936, do_sample=False, head=head).draft(
            input_ids, features, 4)

    cases = {f"head {s}": (lambda s=s: head_call(s)) for s in heads}
    cases |= {f"draft4 {s}": (lambda s=s: draft_call(s)) for s in heads}
    medians = interleaved_medians(cases, 20)
    columns = {s: int(head.scores(hidden, head.choose_clusters(e, h, 0)).scores.shape[-1]) if head is not None else None
               for s, head in heads.items()}
    record = {"card": torch.cuda.get_device_name(), "capability": list(torch.cuda.get_device_capability()),
              "torch": torch.__version__, "triton": _triton_version(), "dtype": str(dtype),
              "medians_ms": medians, "columns_scored_at_position_0": columns}
    out = os.environ.get("OUT", str(tmp_path))
    with open(os.path.join(out, f"gpu_steps_{str(dtype).split('.')[-1]}.json"), "w") as f:
        json.dump(record, f, indent=2)
    assert all(m > 0 for m in medians.values())


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_chain_drafting_never_waits_on_the_gpu_greedy_or_sampled(tmp_path, do_sample):
    target = _real_shape_target(torch.float16)
    assistant = _assistant(target, "dynaspec", num_assistant_tokens=4)
    head = runtime_head(assistant, assistant.generation_config)
    input_ids = torch.randint(0, 151_936, (1, 40), device="cuda")
    features = torch.randn(1, 39, 896, device="cuda", dtype=target.dtype)
    ChainDraftSession(assistant.drafter, 151_936, do_sample=do_sample, head=head).draft(input_ids, features, 4)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        draft = ChainDraftSession(assistant.drafter, 151_936, do_sample=do_sample, head=head).draft(
            input_ids, features, 4)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert draft.token_ids.shape == (1, 4) and (draft.logits is not None) == do_sample


def test_the_default_configuration_syncs_only_where_named(tmp_path):
    """draft_plan="auto" with prompt lookup and the suffix cache (the shipped configuration): a whole
    generate() call under sync debug mode "warn", syncs counted per round. By design a round reads the committed
    ids (lookups search a host copy), the planner's cut, and transformers' own acceptance count; the test bounds
    the count per target pass and writes it to $OUT/gpu_syncs.json."""
    import json

    from test_gpu_routes import syncs_per_pass

    target = _real_shape_target(torch.float16)
    assistant = _assistant(target, "dynaspec", draft_plan="auto", suffix_cache_num_tokens=16,
                           prompt_lookup_num_tokens=5)
    input_ids = torch.randint(0, 151_936, (1, 32), device="cuda")
    plain = plain_generate(target, input_ids, max_new_tokens=8)  # warm-up
    outputs = []
    counted = syncs_per_pass(target, lambda: outputs.append(target.generate(
        input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=32, assistant_model=assistant)))
    got = outputs[0]
    # The mix of passes the planner chose on this card's costs (a drafted pass reads more than an undrafted one).
    record = {"card": torch.cuda.get_device_name(), **counted,
              "passes_by_source": dict(assistant.stats.passes_by_source)}
    with open(os.path.join(os.environ.get("OUT", str(tmp_path)), "gpu_syncs.json"), "w") as f:
        json.dump(record, f, indent=2)
    assert got.shape[1] == 32 + 32 and plain.shape[1] == 32 + 8
    assert record["syncs_per_pass"] <= 8, record


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="a device map across two devices needs two GPUs")
def test_a_target_split_across_two_devices_is_exact(tmp_path):
    """Layers on cuda:0 and cuda:1, the embedding on one and the head on the other: the drafter sits with the
    head (modeling.drafter.drafting_device) and every tensor follows its module's device."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=4,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0, "model.layers.2": 1,
                  "model.layers.3": 1, "model.norm": 1, "model.rotary_emb": 1, "lm_head": 1}
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float16).eval()
    model.save_pretrained(tmp_path / "target")
    target = AutoModelForCausalLM.from_pretrained(tmp_path / "target", torch_dtype=torch.float16,
                                                  device_map=device_map).eval()
    target.generation_config.eos_token_id = None
    assistant = _assistant(target, "dynaspec", num_assistant_tokens=4)
    input_ids = torch.randint(0, 151_936, (1, 24), device="cuda:0")
    expected = plain_generate(target, input_ids, max_new_tokens=32)
    got = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=32,
                          assistant_model=assistant)
    divergence = check_exactness(target, input_ids, expected[0, 24:], got[0, 24:])
    assert divergence is None or divergence.near_tie, divergence
