"""The public routes users run, on a CUDA device: the batched loop, Medusa, `speculative_generate`, sampled trees and
block verification. Greedy output is compared token for token (fp32); sampled rounds are enumerated exactly
(tests/enumeration.py follows every random choice the code makes, on whatever device the tensors live), so a
GPU-only fault in a sampled path (a residual computed on the wrong device, a draw that differs from its
probabilities) shows as an error above 1e-6 rather than as noise. Host syncs per target pass of the Medusa and
batched rounds go to $OUT/gpu_route_syncs.json for docs/gpu.md.
"""

from __future__ import annotations

import copy
import json
import os
import warnings

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="the GPU suite needs a CUDA device"),
]

from conftest import imitating_assistant, one_layer_target, tiny_target  # noqa: E402
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint  # noqa: E402
from test_batched import left_padded, mixed_prompts  # noqa: E402
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors  # noqa: E402
from test_medusa import trained_heads  # noqa: E402

from hf_dynaspec import speculative_generate  # noqa: E402
from hf_dynaspec.modeling.medusa import MedusaAssistant  # noqa: E402

SAMPLED = dict(do_sample=True, temperature=0.7, top_k=0, max_new_tokens=4)


def _plain_rows(target, prompts, max_new_tokens):
    """Each prompt's own greedy continuation, one row at a time (no padding)."""
    rows = []
    for prompt in prompts:
        ids = prompt[None].cuda()
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                              do_sample=False)
        rows.append(out[0, len(prompt):].cpu())
    return rows


def _assert_rows_exact(target, prompts, out, width, max_new_tokens):
    for i, expected in enumerate(_plain_rows(target, prompts, max_new_tokens)):
        assert torch.equal(out[i, width: width + len(expected)].cpu(), expected), f"row {i}"


@pytest.fixture(scope="module")
def eagle_pair():
    target = one_layer_target("llama", seed=2).cuda()
    return target, imitating_assistant(target, noise=0.2, seed=4)


@pytest.mark.parametrize("route", ["chain", "tree"])
@pytest.mark.parametrize("batch", [1, 5])
def test_batched_rows_equal_their_own_plain_greedy_output(eagle_pair, route, batch):
    target, assistant = eagle_pair
    prompts = mixed_prompts(batch, seed=batch)
    ids, mask = left_padded(prompts, extra=2 if batch == 1 else 0)
    extra = {} if route == "chain" else dict(trees=True, tree_top_k=2, tree_depth=3, tree_total_tokens=6)
    out = target.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), custom_generate=speculative_generate,
                          drafter=assistant,
                          max_new_tokens=24, do_sample=False, pad_token_id=0, **extra)
    assert out.device.type == "cuda"
    _assert_rows_exact(target, prompts, out, ids.shape[1], 24)
    assert assistant.stats.drafted > 0


@pytest.fixture(scope="module")
def medusa_pair():
    target = tiny_target("llama", seed=3)
    heads = trained_heads(target, steps=60)  # trained on the CPU, then moved with the target
    return target.cuda(), heads.to("cuda")


@pytest.mark.parametrize("draft", ["chain", "tree", "auto"])
def test_medusa_greedy_is_identical_one_row_and_batched(medusa_pair, draft):
    target, heads = medusa_pair
    options = dict(tree_total_tokens=6, **(dict(draft_plan="auto", prompt_lookup_num_tokens=4) if draft == "auto"
                                           else dict(lattice_draft=draft)))
    prompts = mixed_prompts(4, seed=11)
    ids, mask = left_padded(prompts)
    out = target.generate(input_ids=ids.cuda(), attention_mask=mask.cuda(), custom_generate=speculative_generate,
                          drafter=heads, max_new_tokens=24, do_sample=False, pad_token_id=0, **options)
    _assert_rows_exact(target, prompts, out, ids.shape[1], 24)
    single = prompts[0][None].cuda()
    got = target.generate(single, attention_mask=torch.ones_like(single), custom_generate=speculative_generate,
                          drafter=heads, max_new_tokens=24, do_sample=False, **options)
    assert torch.equal(got[0, single.shape[1]:].cpu(), _plain_rows(target, prompts[:1], 24)[0])


def _enumerated_error(target_cpu, target, call) -> float:
    """Max error of the exact distribution of 4 sampled tokens (`call()` on the device) against the target's."""
    paths = enumerate_paths(call, max_paths=4 * VOCAB**4)
    oracle = TargetOracle(target_cpu, processors("temperature"))
    return max_error(outcome_distribution(paths), target_joint(oracle, PROMPT, 4))


@pytest.mark.parametrize("route", ["chain", "chain-block", "tree", "medusa-tree"])
def test_sampled_routes_are_exact_on_the_device(route):
    """Four tokens sampled at temperature 0.7 through whole public calls on the GPU: their exact distribution is
    the target's (the CPU copy of the same weights gives the reference)."""
    target_cpu = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    target = copy.deepcopy(target_cpu).cuda()
    prompt = torch.tensor([PROMPT], device="cuda")
    if route.startswith("medusa"):
        drafter = MedusaAssistant.from_target(target, num_heads=3)
        with torch.no_grad():
            for parameter in drafter.blocks.parameters():
                generator = torch.Generator().manual_seed(parameter.numel())
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
        kwargs = dict(custom_generate=speculative_generate, drafter=drafter, lattice_draft="tree")
    else:
        options = dict(num_assistant_tokens=3, verification="block") if route == "chain-block" else dict(
            num_assistant_tokens=2, tree_top_k=2, tree_depth=2, tree_total_tokens=4)
        drafter = imitating_assistant(target, noise=1.0, seed=3, **options)
        kwargs = dict(custom_generate=speculative_generate, trees=route == "tree", drafter=drafter)

    def call():
        out = target.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs, **SAMPLED)
        return tuple(out[0, len(PROMPT):].tolist())

    assert _enumerated_error(target_cpu, target, call) < TOLERANCE


def syncs_per_pass(target, run) -> dict:
    """Host syncs (sync debug mode "warn") and target passes of `run()` -> their counts and ratio."""
    passes = []
    handle = target.register_forward_hook(lambda *_: passes.append(1))
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            run()
        finally:
            torch.cuda.set_sync_debug_mode(0)
            handle.remove()
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message).lower()]
    return {"target_passes": len(passes), "syncs": len(syncs), "syncs_per_pass": len(syncs) / max(len(passes), 1)}


def test_medusa_and_batched_rounds_sync_only_where_named(eagle_pair, medusa_pair):
    """Host syncs per target pass of a Medusa tree round (one row) and a batched chain round (4 rows), written to
    $OUT/gpu_route_syncs.json. The bound is the single-row default's (tests/gpu/test_gpu_suite.py)."""
    target, assistant = eagle_pair
    medusa_target, heads = medusa_pair
    prompts = mixed_prompts(4, seed=7)
    ids, mask = left_padded(prompts)
    ids, mask = ids.cuda(), mask.cuda()
    single = prompts[0][None].cuda()

    def batched():
        target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                        max_new_tokens=24, do_sample=False, pad_token_id=0)

    def medusa():
        medusa_target.generate(single, attention_mask=torch.ones_like(single), custom_generate=speculative_generate,
                               drafter=heads, max_new_tokens=24, do_sample=False, lattice_draft="tree")

    batched(), medusa()  # warm-up
    record = {"card": torch.cuda.get_device_name(), "batched_chain_4_rows": syncs_per_pass(target, batched),
              "medusa_tree_1_row": syncs_per_pass(medusa_target, medusa)}
    with open(os.path.join(os.environ.get("OUT", "."), "gpu_route_syncs.json"), "w") as f:
        json.dump(record, f, indent=2)
    for name in ("batched_chain_4_rows", "medusa_tree_1_row"):
        assert record[name]["syncs_per_pass"] <= 8, record


@pytest.mark.parametrize("route", ["chain", "tree"])
def test_the_static_round_is_greedy_identical_with_cuda_graphs(route):
    """verify_round="static" on the device (CUDA graphs, mode "reduce-overhead"): greedy output equal to plain
    `generate()` (fp32) over prompts of several lengths and two calls each, no graph skipped by cudagraph trees, and
    no compilation after the first call of each width (`fail_on_recompile`)."""
    from test_greedy_exact import prompt
    from torch._dynamo.utils import counters

    target = one_layer_target("qwen2", seed=2).cuda()
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=3)
    assistant.generation_config.verify_round = "static"
    extra = {} if route == "chain" else dict(trees=True, tree_top_k=2, tree_depth=3, tree_total_tokens=6)

    def call(seed, length):
        ids = prompt(seed, length).cuda()
        got = target.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=speculative_generate,
                              drafter=assistant, max_new_tokens=20, do_sample=False, **extra)
        plain = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False)
        assert torch.equal(got, plain), (seed, length)
    skips = int(counters["inductor"]["cudagraph_skips"])
    for seed, length in ((0, 6), (1, 30)):  # warm-up: every width, the shared capacity
        call(seed, length)
    with torch.compiler.set_stance("fail_on_recompile"):
        for seed in range(2):
            for length in (5, 12, 19, 33):
                call(seed, length)
    assert int(counters["inductor"]["cudagraph_skips"]) == skips
