"""The static verify round (`verify_round="static"`, hf_dynaspec.generation.static_round): the target's KV in a
StaticCache written by position, each round read at a power-of-two width, the forward compiled once per width.

Greedy output must equal plain `generate()` (fp32) and sampled output must keep the target's distribution exactly,
through the compiled forward (qwen2, llama) and through the same static cache uncompiled for every other family
(the cache's positions, masks and compaction are what differ by family; compilation is the same function
transform for all); recompilations stay bounded by the buckets across prompt lengths and calls.
"""

from __future__ import annotations

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, tiny_target
from enumeration import (
    TargetOracle,
    enumerate_paths,
    max_error,
    outcome_distribution,
    path_to,
    target_joint,
    tree_from_parents,
)
from test_batched import left_padded, mixed_prompts
from test_chain_generate import MAX_PATHS, fresh_run_time_state
from test_enumeration import PROMPT, TOLERANCE, VOCAB, processors
from test_greedy_exact import prompt
from transformers.cache_utils import DynamicCache

import hf_dynaspec.generation.static_round as static_round
from hf_dynaspec import speculative_generate
from hf_dynaspec.generation.tree_verify import cache_kwargs

ROUTES = {"chain": {}, "tree": {"trees": True}}


def static_assistant(target, **options):
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=3,
                                    tree_top_k=2, tree_depth=3, tree_total_tokens=6, **options)
    assistant.generation_config.verify_round = "static"
    return assistant


def uncompiled(monkeypatch):
    monkeypatch.setattr(static_round, "compiled_verify", lambda model: model)


def plain(target, ids, **options):
    return target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **options)


@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_the_compiled_static_round_is_greedy_identical(family, route):
    target = one_layer_target(family, seed=2)
    assistant = static_assistant(target)
    for seed, length in ((1, 6), (2, 11)):
        ids = prompt(seed, length)
        got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24,
                              custom_generate=speculative_generate, drafter=assistant, **ROUTES[route])
        assert torch.equal(got, plain(target, ids, max_new_tokens=24))
    assert assistant.stats.accepted > 0, "drafts must have been accepted"


@pytest.mark.parametrize("family", ["qwen3", "mistral", "phi3", "gemma3_text"])
def test_the_static_cache_is_greedy_identical_for_every_family(monkeypatch, family):
    uncompiled(monkeypatch)
    target = one_layer_target(family, seed=3)
    assistant = static_assistant(target)
    for route in ROUTES.values():
        ids = prompt(3, 9)
        got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=30,
                              custom_generate=speculative_generate, drafter=assistant, **route)
        assert torch.equal(got, plain(target, ids, max_new_tokens=30))


def test_a_static_cache_used_again_past_its_first_call_and_grown(monkeypatch):
    """One cache serves calls of any length within its capacity (stale slots hidden, overwritten); a longer call
    replaces it with the next power of two; output stays identical across both."""
    uncompiled(monkeypatch)
    target = one_layer_target("qwen2", seed=5)
    assistant = static_assistant(target)
    capacities = []
    for length, new in ((20, 30), (5, 10), (40, 120), (7, 12)):
        ids = prompt(length, length)
        got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=new,
                              custom_generate=speculative_generate, drafter=assistant)
        assert torch.equal(got, plain(target, ids, max_new_tokens=new))
        capacities.append(getattr(target, static_round._CACHE).capacity)
    assert capacities == [128, 128, 256, 256]
    target.double()  # cast since: a new cache of the new dtype, not the held one
    assistant.attach(target)
    ids = prompt(3, 9)
    got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                          custom_generate=speculative_generate, drafter=assistant)
    assert torch.equal(got, plain(target, ids, max_new_tokens=12))
    assert getattr(target, static_round._CACHE).where == (torch.float64, target.device)


def test_the_static_prefill_masks_the_prompts_keys_only(monkeypatch):
    """The static round's prefill attends over the prompt's own keys, its mask `[B, L]` (transformers builds the
    `[B, 1, L, L]` causal one), never over the capacity (`[B, 1, L, capacity]`: GBs at long prompts); its keys
    land in the static slots, so output stays identical."""
    uncompiled(monkeypatch)
    target = one_layer_target("qwen2", seed=6)
    assistant = static_assistant(target)
    masks, caches = [], []
    forward, name = target.forward, next(iter(cache_kwargs(target, None)))  # past_key_values, or cache
    monkeypatch.setattr(target, "forward", lambda *args, **kwargs: masks.append(kwargs["attention_mask"].shape)
                        or caches.append(type(kwargs[name]).__name__) or forward(*args, **kwargs))
    ids = prompt(4, 37)
    got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=20,
                          custom_generate=speculative_generate, drafter=assistant)
    capacity = getattr(target, static_round._CACHE).capacity
    assert masks[0] == (1, 37) and caches[0] == "DynamicCache" and capacity > 37 + 20
    assert set(caches[1:]) == {"StaticCache"}
    assert all(shape[-1] == capacity for shape in masks[1:])  # the rounds' masks span the static slots
    monkeypatch.setattr(target, "forward", forward)
    assert torch.equal(got, plain(target, ids, max_new_tokens=20))
    reference = DynamicCache()
    with torch.no_grad():
        target(input_ids=ids, **cache_kwargs(target, reference), use_cache=True)
    slots = getattr(target, static_round._CACHE).cache.layers[0]
    torch.testing.assert_close(slots.keys[:, :, :37], reference.layers[0].keys)
    torch.testing.assert_close(slots.values[:, :, :37], reference.layers[0].values)


def test_recompiles_stay_within_the_buckets_over_prompt_lengths_and_calls():
    """10 prompt lengths x 3 calls after a warm-up: `fail_on_recompile` raises if any call traces again."""
    target = one_layer_target("qwen2", seed=7)
    assistant = static_assistant(target)

    def call(length: int, seed: int):
        ids = prompt(seed, length)
        return target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=16,
                               custom_generate=speculative_generate, drafter=assistant)
    for length in (5, 30):  # warm-up: every width the rounds read, the capacity the calls share
        call(length, 0)
    with torch.compiler.set_stance("fail_on_recompile"):
        for repeat in range(3):
            for length in range(4, 44, 4):
                assert torch.equal(call(length, repeat), plain(target, prompt(repeat, length), max_new_tokens=16))


def test_sampled_static_rounds_are_exact(monkeypatch):
    """Four tokens sampled at temperature 0.7 through whole speculative_generate calls on the static round: their exact
    distribution is the target's (a slot left visible or a path moved to the wrong slot shifts it)."""
    fresh_run_time_state(monkeypatch)
    target = one_layer_target("llama", seed=5, vocab_size=VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, draft_plan="fixed", num_assistant_tokens=2)
    assistant.generation_config.verify_round = "static"
    ids = torch.tensor([PROMPT])

    def call():
        out = target.generate(ids, custom_generate=speculative_generate, drafter=assistant, max_new_tokens=4,
                              do_sample=True, temperature=0.7, top_k=0)
        return tuple(out[0, len(PROMPT):].tolist())

    outcomes = outcome_distribution(enumerate_paths(call, max_paths=MAX_PATHS))
    assert max_error(outcomes, target_joint(TargetOracle(target, processors("temperature")), PROMPT, 4)) < TOLERANCE
    assert assistant.stats.drafted > 0


def test_what_the_static_round_refuses_names_the_eager_route(monkeypatch):
    uncompiled(monkeypatch)
    target = one_layer_target("qwen2", seed=2)
    assistant = static_assistant(target)
    ids, mask = left_padded(mixed_prompts(5, seed=1))
    with pytest.raises(ValueError, match="verify_round='eager' for batches"):
        target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                        max_new_tokens=4, pad_token_id=0)
    with pytest.raises(ValueError, match="verify_round"):
        assistant.generation_config.verify_round = "compiled"
        assistant.generation_config.validate_options()
    with pytest.raises(ValueError, match="reads 1 to 64 nodes"):
        static_round.width_bucket(65)
    assert [static_round.width_bucket(n) for n in (1, 2, 3, 5, 9, 64)] == [1, 2, 4, 8, 16, 64]


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral", "phi3", "gemma3_text"])
def test_static_verify_logits_equal_a_plain_forward(monkeypatch, family):
    """Three rounds of the loop's own steps on a 2-layer target through the static cache (trees read at their
    bucket, compaction keeping 1..n nodes, a round whose cache was written further than it keeps): each round's
    logits equal a plain forward over the context, so positions, the capacity-wide mask and the slots moved into
    place are right whatever the greedy argmax (a one-layer target's argmax hides most attention errors)."""
    from transformers.generation.logits_process import LogitsProcessorList

    from hf_dynaspec.generation.batched_loop import _compact, _prefill, _Row, _verify
    from hf_dynaspec.generation.static_round import TargetSlots
    from hf_dynaspec.modeling.medusa import MedusaAssistant

    if family != "qwen2":
        uncompiled(monkeypatch)
    target = tiny_target(family, seed=3)
    heads = MedusaAssistant.from_target(target, num_heads=2)
    ids = prompt(4, 7)
    row = _Row(0, 0, ids, None, None)
    slots = TargetSlots(target, None, 40, static=True)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        valid, _, _ = _prefill(target, heads, [row], ids, torch.ones_like(ids, dtype=torch.bool), slots,
                               [LogitsProcessorList()], False)
        for parents, kept in (([-1, 0, 0, 1, 2], [0, 2, 4]), ([-1, 0, 1], [0]), ([-1, 0, 0, 0, 1, 1, 4], [0, 1, 4, 6])):
            tree = tree_from_parents(torch.randint(0, VOCAB, (len(parents),), generator=generator), parents)
            tree.token_ids[0] = row.sequence[0, -1]
            out = _verify(target, heads, [row], [tree], valid, slots)
            for node in range(len(tree)):
                path = path_to(tree, node)
                context = torch.cat([row.sequence[0], tree.token_ids[path[1:]]])[None]
                torch.testing.assert_close(out.logits[0, node], target(context).logits[0, -1], atol=1e-4, rtol=1e-4)
            valid = _compact(slots, valid, [torch.tensor(kept)])
            bonus = torch.randint(0, VOCAB, (1, 1), generator=generator)
            row.sequence = torch.cat([row.sequence, tree.token_ids[kept[1:]][None], bonus], dim=1)


def test_the_held_cache_is_made_again_for_a_target_cast_or_moved():
    """The static cache held on the target is reused only for the dtype and device it was made for: a target cast
    (or moved) since gets a new one, before any forward could meet tensors of the old dtype or card."""
    target = one_layer_target("qwen2", seed=5)
    first = static_round._static_cache(target, 64)
    assert static_round._static_cache(target, 64) is first and first.where == (torch.float32, target.device)
    target.to(torch.bfloat16)
    cast = static_round._static_cache(target, 64)
    assert cast is not first and cast.where == (torch.bfloat16, target.device), "the fp32 cache was reused"
    target.to("meta")  # another device (the only other one a CPU-only build has)
    moved = static_round._static_cache(target, 64)
    assert moved is not cast and moved.where == (torch.bfloat16, torch.device("meta")), "the CPU cache was reused"


@pytest.mark.parametrize("verify_round", ["eager", "static"])
def test_only_the_static_round_pads_a_tree_to_its_width(monkeypatch, verify_round):
    """The static round reads a tree of n nodes at the next power of two; the eager round verifies exactly the
    drafted nodes (padding there would give the same tokens at up to twice the verified rows)."""
    import hf_dynaspec.generation.batched_loop as batched_loop

    uncompiled(monkeypatch)
    target = one_layer_target("qwen2", seed=2)
    assistant = static_assistant(target)
    assistant.generation_config.verify_round = verify_round
    widths = []
    verify = batched_loop._verify

    def recorded(model, features, rows, trees, valid, slots):
        out = verify(model, features, rows, trees, valid, slots)
        widths.append((max(len(tree) for tree in trees), out.logits.shape[1]))
        return out
    monkeypatch.setattr(batched_loop, "_verify", recorded)
    ids = prompt(2, 11)
    got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=24,
                          custom_generate=speculative_generate, trees=True, drafter=assistant)
    assert torch.equal(got, plain(target, ids, max_new_tokens=24))
    # The case: trees whose node count is no power of two (6 drafted nodes and the root).
    assert any(nodes & (nodes - 1) for nodes, _ in widths), widths
    expected = [static_round.width_bucket(nodes) if verify_round == "static" else nodes for nodes, _ in widths]
    assert [width for _, width in widths] == expected, widths


@pytest.mark.parametrize("verify_round", ["eager", "static"])
def test_the_assistant_model_route_says_it_stays_eager(monkeypatch, verify_round):
    """transformers' assisted loop owns the target's cache on the assistant_model= route: a static round asked there
    is said (once per process: transformers' warning_once) and the output stays plain generate()'s; nothing is said
    for the eager round."""
    import hf_dynaspec.generation.candidate_generator as candidate_generator

    said = []
    monkeypatch.setattr(candidate_generator.logger, "warning_once", said.append)
    target = one_layer_target("qwen2", seed=2)
    assistant = static_assistant(target)
    assistant.generation_config.verify_round = verify_round
    ids = prompt(2, 11)
    got = target.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                          assistant_model=assistant)
    assert torch.equal(got, plain(target, ids, max_new_tokens=12))
    expected = [candidate_generator.STATIC_ROUND_WARNING] if verify_round == "static" else []
    assert [message for message in said if "verify_round" in message] == expected


@pytest.mark.parametrize("graphs", [False, True], ids=["inductor", "cuda-graphs"])
def test_every_graph_replay_begins_a_step_and_its_outputs_are_copied_out(monkeypatch, graphs):
    """With CUDA graphs each verify replay is marked as a new step (else rounds that replay no marked drafter graph
    record a new child graph each round), and the logits and hidden states it returns are copies (the next replay
    overwrites the graph's own buffers); without graphs neither happens (no copy on the CPU)."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(len(calls)))
    buffers = torch.randn(1, 4, 9), (torch.randn(1, 4, 6), torch.randn(1, 4, 6))
    calls = []

    def graph(**inputs):  # a replay: the same output buffers each time
        calls.append(inputs)
        return CausalLMOutputWithPast(logits=buffers[0], hidden_states=buffers[1])

    forward = static_round.replayed(graph, graphs)
    outs = [forward(input_ids=torch.zeros(1, 4, dtype=torch.long)) for _ in range(3)]
    assert marks == ([0, 1, 2] if graphs else [])  # a mark before each replay
    for out in outs:
        assert torch.equal(out.logits, buffers[0]) and torch.equal(out.hidden_states[1], buffers[1][1])
        copied = [out.logits.data_ptr() != buffers[0].data_ptr(),
                  *(mine.data_ptr() != theirs.data_ptr() for mine, theirs in zip(out.hidden_states, buffers[1]))]
        assert copied == [graphs] * 3
