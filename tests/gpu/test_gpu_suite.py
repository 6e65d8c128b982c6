"""The GPU suite: what only a CUDA device can show. Skipped without one; run it whenever a GPU is at hand:

    HF_DYNASPEC_TRITON_GPU=1 python -m pytest -q -m gpu tests/gpu

(HF_DYNASPEC_TRITON_GPU=1 keeps tests/conftest.py from selecting the Triton interpreter, so the real kernel
runs.) Models are random-weight models of real shapes (the GPU machines have no network): speed and
exactness do not depend on trained weights. What ran where is recorded in docs/gpu.md.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs a CUDA device"),
]

from conftest import imitating_assistant, one_layer_target, plain_generate  # noqa: E402
from test_sampling_lossless import PROMPT, TEMPERATURE, exact_distribution, fit_p_value, sampling_target  # noqa: E402
from test_shortlists import add_shortlists  # noqa: E402

from hf_dynaspec import DynaSpecAssistant, check_exactness, tree_generate  # noqa: E402
from hf_dynaspec.drafting.chain import ChainDraftSession  # noqa: E402
from hf_dynaspec.drafting.runtime import runtime_head  # noqa: E402
from hf_dynaspec.drafting.tree import TreeDraftSession  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.reference import indexed_head_reference  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(autouse=True)
def real_kernel():
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.fail("TRITON_INTERPRET=1 is set: run the GPU suite with HF_DYNASPEC_TRITON_GPU=1 (see the docstring)")


def _supported(dtype):
    if dtype == torch.bfloat16 and not torch.cuda.is_bf16_supported():
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
    width = 701  # clusters padded to a common width, as drafting/cluster_rows.py lays them out
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


def _real_shape_target(dtype, layers: int = 4):
    """Qwen2.5-0.5B's shapes (vocabulary, width, heads), fewer layers, random weights, sharp logits."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                         num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=False,
                         max_position_embeddings=4096)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa", torch_dtype=dtype).cuda().eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    model.generation_config.eos_token_id = None
    return model


def _assistant(target, tmp_path, strategy: str, **options):
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    assistant = DynaSpecAssistant.from_target(target, **options)
    head = target.get_output_embeddings().weight
    assistant.shortlists.set_frequency_list(torch.randperm(head.shape[0])[:32_768], kind="frspec")
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 64, always_ids=[0], sample_size=20_000, max_iter=5))
    assistant.save_pretrained(tmp_path)
    return DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, **options)


@pytest.mark.parametrize("strategy", ["full", "frspec", "dynaspec"])
def test_drafting_never_waits_on_the_gpu(tmp_path, strategy):
    """Chain and tree drafting under torch.cuda.set_sync_debug_mode("error"): any host sync raises."""
    target = _real_shape_target(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16)
    assistant = _assistant(target, tmp_path, strategy, num_assistant_tokens=4)
    head = runtime_head(assistant, assistant.generation_config)
    input_ids = torch.randint(0, 151_936, (1, 40), device="cuda")
    features = torch.randn(1, 39, 896, device="cuda", dtype=target.dtype)
    chain = ChainDraftSession(assistant.drafter, 151_936, do_sample=False, head=head)
    tree = TreeDraftSession(assistant.drafter, 151_936, top_k=4, depth=4, total_tokens=24, head=head)
    chain.propose(input_ids, features, 4)  # warm-up: kernels compiled, caches allocated
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        chain = ChainDraftSession(assistant.drafter, 151_936, do_sample=False, head=head)
        draft = chain.propose(input_ids, features, 4)
        tree.propose_tree(input_ids, features)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert draft.token_ids.shape == (1, 4)


def test_side_stream_router_gives_the_sequential_shortlist(tmp_path):
    target = _real_shape_target(torch.float16)
    assistant = _assistant(target, tmp_path, "dynaspec")
    head = runtime_head(assistant, assistant.generation_config)
    assert head.side_stream.stream is not None and head.indexed
    e, h, hidden = (torch.randn(1, 896, device="cuda", dtype=torch.float16) for _ in range(3))
    for position in range(4):
        plan = head.plan(e, h, position)
        torch.cuda._sleep(1_000_000)  # keep the main stream busy while the router runs on the side stream
        overlapped = head.scores(hidden, plan)
        sequential = head.scores(hidden, (type(plan[0])(head.router(e, h)), position))
        assert torch.equal(overlapped.token_ids, sequential.token_ids)
        torch.testing.assert_close(overlapped.scores, sequential.scores)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("route", ["chain", "tree"])
def test_greedy_is_exact_up_to_near_ties_on_a_real_shape(tmp_path, dtype, route):
    _supported(dtype)
    target = _real_shape_target(dtype)
    assistant = _assistant(target, tmp_path, "dynaspec", num_assistant_tokens=4)
    for seed in range(3):
        input_ids = torch.randint(0, 151_936, (1, 24), generator=torch.Generator().manual_seed(seed)).cuda()
        expected = plain_generate(target, input_ids, max_new_tokens=48)
        kwargs = dict(assistant_model=assistant) if route == "chain" else dict(custom_generate=tree_generate,
                                                                                drafter=assistant)
        got = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=48, **kwargs)
        divergence = check_exactness(target, input_ids, expected[0, 24:], got[0, 24:])
        assert divergence is None or divergence.near_tie, divergence


def test_sampling_keeps_the_target_distribution_on_the_gpu():
    target = sampling_target()
    probs = exact_distribution(target)  # on the CPU, before the move
    target.cuda()
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2)
    counts = torch.zeros(8, 8)
    torch.manual_seed(1)
    prompt = PROMPT.cuda()
    for _ in range(3000):
        out = target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                              do_sample=True, temperature=TEMPERATURE, top_k=0, top_p=1.0, max_new_tokens=4)
        x2, x3 = out[0, 4:6].tolist()
        counts[x2, x3] += 1
    assert fit_p_value(counts, probs) > 1e-3


def test_interleaved_timing_of_vanilla_full_frspec_and_dynaspec(tmp_path):
    """Median ms per generated token, methods interleaved; written to $OUT (or tmp) for docs/gpu.md."""
    import json

    from hf_dynaspec.bench.timer import interleaved_medians

    target = _real_shape_target(torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16, layers=24)
    assistants = {s: _assistant(target, tmp_path / s, s, num_assistant_tokens=4) for s in ("full", "frspec", "dynaspec")}
    input_ids = torch.randint(0, 151_936, (1, 64), generator=torch.Generator().manual_seed(0)).cuda()

    def run(assistant=None):
        def call():
            target.generate(input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=64,
                            assistant_model=assistant)
            torch.cuda.synchronize()
        return call

    methods = {"vanilla": lambda: run()} | {name: (lambda a=a: run(a)) for name, a in assistants.items()}
    medians = interleaved_medians(methods, 5)
    record = {"card": torch.cuda.get_device_name(), "torch": torch.__version__, "medians_ms": medians,
              "new_tokens": 64, "taus": {n: a.stats.tau for n, a in assistants.items()}}
    out = os.environ.get("OUT", str(tmp_path))
    with open(os.path.join(out, "gpu_timing.json"), "w") as f:
        json.dump(record, f, indent=2)
    assert all(m > 0 for m in medians.values())
