"""Tree decoding (`speculative_generate(trees=True)`): masks, positions, cache compaction, greedy identity, lossless sampling."""

from __future__ import annotations

import random

import pytest
import torch
from conftest import VOCAB, imitating_assistant, one_layer_target, plain_generate, random_assistant, tiny_target
from enumeration import (
    TargetOracle,
    enumerate_paths,
    max_error,
    outcome_distribution,
    path_to,
    target_joint,
    tree_attention_mask,
    tree_from_parents,
    tree_position_ids,
)
from transformers import LogitsProcessorList, StoppingCriteria, TemperatureLogitsWarper

from hf_dynaspec import speculative_generate
from hf_dynaspec.drafting.contract import DraftTree, depths_of
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.drafting.tree import TreeDraftSession
from hf_dynaspec.generation import tree_verify
from hf_dynaspec.generation.batched_loop import _compact
from hf_dynaspec.generation.static_round import TargetSlots
from hf_dynaspec.generation.tree_verify import accept_path, cache_kwargs

TREE = dict(custom_generate=speculative_generate, trees=True)  # generate()'s hook into tree decoding

def random_tree(seed: int, size: int, vocab: int = VOCAB) -> DraftTree:
    rng = random.Random(seed)
    parents = [-1] + [rng.randrange(i) for i in range(1, size)]
    tokens = torch.tensor([rng.randrange(vocab) for _ in range(size)])
    return tree_from_parents(tokens, parents)


def prompt(seed: int, length: int, vocab: int = VOCAB) -> torch.Tensor:
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))


# -- structure -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
def test_mask_and_positions_match_brute_force(seed):
    tree = random_tree(seed, size=3 + 4 * seed)
    past = 5
    mask = tree_attention_mask(tree, past, torch.float32)[0, 0]
    positions = tree_position_ids(tree, past)[0]
    for i in range(len(tree)):
        path = path_to(tree, i)
        assert positions[i] == past + len(path) - 1
        for j in range(past + len(tree)):
            visible = j < past or (j - past) in path
            assert (mask[i, j] == 0) == visible, (i, j)
    assert (mask[mask != 0] == torch.finfo(torch.float32).min).all()


def test_tree_rejects_parents_that_do_not_form_a_tree():
    tokens = torch.tensor([1, 2, 3])
    with pytest.raises(ValueError, match="parents must precede"):
        tree_from_parents(tokens, [-1, 2, 0])
    with pytest.raises(ValueError, match="root"):
        depths_of([0, 0, 1])


@torch.no_grad()
@pytest.mark.parametrize("seed", range(3))
def test_tree_forward_gives_each_node_the_logits_of_its_own_path(family, seed):
    """One pass over the tree = a plain forward over prefix + root-to-node path, for every node."""
    from transformers.cache_utils import DynamicCache

    target = tiny_target(family, seed=seed)
    prefix = prompt(seed, 6)
    tree = random_tree(seed, size=9)
    cache = DynamicCache(config=target.config)
    target(prefix, **cache_kwargs(target, cache), use_cache=True)
    out = target(
        tree.token_ids[None], **cache_kwargs(target, cache), use_cache=True,
        position_ids=tree_position_ids(tree, 6), attention_mask=tree_attention_mask(tree, 6, target.dtype),
    )
    for node in range(len(tree)):
        path_tokens = tree.token_ids[path_to(tree, node)][None]
        expected = target(torch.cat([prefix, path_tokens], dim=1)).logits[0, -1]
        torch.testing.assert_close(out.logits[0, node], expected, atol=1e-5, rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("seed", range(3))
def test_compacted_cache_equals_recomputation(family, seed):
    from transformers.cache_utils import DynamicCache

    target = tiny_target(family, seed=seed)
    prefix = prompt(seed, 7)
    tree = random_tree(10 + seed, size=10)
    leaf = len(tree) - 1
    path = path_to(tree, leaf)
    cache = DynamicCache(config=target.config)
    target(prefix, **cache_kwargs(target, cache), use_cache=True)
    target(
        tree.token_ids[None], **cache_kwargs(target, cache), use_cache=True,
        position_ids=tree_position_ids(tree, 7), attention_mask=tree_attention_mask(tree, 7, target.dtype),
    )
    valid = _compact(TargetSlots(target, cache, 0, static=False), torch.ones(1, 7, dtype=torch.bool), [torch.tensor(path)])
    assert bool(valid.all()) and valid.shape == (1, 7 + len(path))  # one row: every kept slot is live
    reference = DynamicCache(config=target.config)
    target(torch.cat([prefix, tree.token_ids[path][None]], dim=1), **cache_kwargs(target, reference), use_cache=True)
    assert cache.get_seq_length() == 7 + len(path)
    for got, want in zip(cache.layers, reference.layers):
        torch.testing.assert_close(got.keys, want.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.values, want.values, atol=1e-5, rtol=1e-5)
    # and decoding continues from it as from the recomputed cache
    nxt = torch.tensor([[3]])
    a = target(nxt, **cache_kwargs(target, cache), use_cache=True).logits
    b = target(nxt, **cache_kwargs(target, reference), use_cache=True).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


# -- drafting ------------------------------------------------------------------------------------------------
def test_drafted_tree_shape_and_ranking(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.3)
    session = TreeDraftSession(assistant.drafter, VOCAB, head=runtime_head(assistant, assistant.generation_config), top_k=3, depth=4,
                               total_tokens=10)
    ids = prompt(0, 8)
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states[-1]
    tree = session.draft_tree(torch.cat([ids, torch.tensor([[5]])], dim=1), torch.cat([hidden, hidden[:, -1:]], 1))
    assert len(tree) == 11 and tree.token_ids[0] == 5
    assert int(tree.depths.max()) <= 4
    children = tree.children()
    assert all(len(c) <= 3 for c in children)
    for kids in children:  # siblings are distinct tokens
        assert len({int(tree.token_ids[k]) for k in kids}) == len(kids)
    # the drafter cache keeps the verified pairs; the tree's entries are dropped at the next round
    assert session.chain.num_verified_pairs == 8
    assert session.chain.cache.length > 8


@pytest.mark.parametrize("form", ["cpu", "accelerator"])
def test_every_expanded_node_scores_what_a_chain_along_its_path_scores(family, form, monkeypatch):
    """The drafter's log-probabilities at each expanded node of a tree must be those of the drafter run as a chain
    along that node's own path (a plain causal cache), and its children that distribution's top-k: a tree mask
    that lets a node see a cousin, or hides an ancestor, changes them."""
    import contextlib

    from hf_dynaspec.drafting.chain import ChainDraftSession
    from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu

    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.6)
    top_k = 3
    ids = prompt(1, 8)
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=True).hidden_states[-1]
    ids, hidden = torch.cat([ids, torch.tensor([[5]])], dim=1), torch.cat([hidden, hidden[:, -1:]], 1)
    rows_by_depth = []  # the log-probabilities of each drafter step of the tree: root, then each frontier
    log_probs = TreeDraftSession._log_probs
    monkeypatch.setattr(TreeDraftSession, "_log_probs",
                        lambda self, *a: rows_by_depth.append(log_probs(self, *a)) or rows_by_depth[-1])
    with accelerator_paths_on_cpu() if form == "accelerator" else contextlib.nullcontext(), torch.no_grad():
        head = runtime_head(assistant, assistant.generation_config)
        # 3 + 9 + 9 + 9 candidates: the tree keeps them all, so each expanded node's children are its whole top-k,
        # and a frontier is its depth's first top_k nodes (nodes of a depth are in score order)
        session = TreeDraftSession(assistant.drafter, VOCAB, head=head, top_k=top_k, depth=4, total_tokens=30)
        tree = session.draft_tree(ids, hidden)
        children = tree.children()
        depths = tree.depths.tolist()
        checked = 0
        for node, kids in enumerate(children):
            if not kids:
                continue
            chain = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head)
            state, clusters = chain.consume_verified(ids, hidden)
            for depth, step in enumerate(path_to(tree, node)[1:]):
                embed = assistant.drafter.embed(tree.token_ids[step].view(1, 1))
                clusters = chain.chosen_clusters(embed[:, -1], state[:, -1], depth + 1)
                position = torch.full((1, 1), ids.shape[1] - 1 + depth, dtype=torch.long)
                state = assistant.drafter.step(embed, state, position, chain.cache, None)
            scores = head.scores(state[:, -1], clusters)
            row = depths[:node].count(depths[node])  # the node's place among its depth's nodes = its frontier row
            drafted, drafted_ids = rows_by_depth[depths[node]]
            torch.testing.assert_close(drafted[row], scores.scores[0].log_softmax(-1), atol=1e-5, rtol=1e-5)
            best = scores.scores[0].topk(top_k).indices
            allowed = set((best if scores.token_ids is None else scores.token_ids[best]).tolist())
            assert {int(tree.token_ids[k]) for k in kids} == allowed, (node, path_to(tree, node))
            checked += 1
    assert checked == 1 + 3 + 3 + 3 and int(tree.depths.max()) == 4  # the root and the frontiers of depths 1-3


def test_tree_of_top_k_one_is_a_chain_and_an_imitating_drafter_fills_it(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0)
    for seed in range(3):
        target.generate(**TREE, drafter=assistant, input_ids=prompt(seed, 12), max_new_tokens=40,
                           tree_top_k=1, tree_depth=4, tree_total_tokens=4)
        assert assistant.stats.tau > 4.0, assistant.stats


# -- greedy identity -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (4, 4, 12), (3, 6, 16), (8, 2, 9)])
def test_greedy_identical_over_seeds(family, shape):
    top_k, depth, total = shape
    target = one_layer_target(family)
    drafted = accepted = 0
    for seed in range(4):
        assistant = imitating_assistant(target, noise=0.2, seed=seed)
        input_ids = prompt(seed, 3 + 4 * seed)
        expected = plain_generate(target, input_ids, max_new_tokens=30, do_sample=False)
        got = target.generate(input_ids, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=30,
                              tree_top_k=top_k, tree_depth=depth, tree_total_tokens=total)
        assert torch.equal(got, expected), (seed, got, expected)
        drafted += assistant.stats.drafted
        accepted += assistant.stats.accepted
    assert 0 < accepted < drafted  # both accepted and rejected drafts were exercised


def test_greedy_identical_with_a_deep_target_and_random_drafter(family):
    target = tiny_target(family, seed=3)
    assistant = random_assistant(target)
    for seed in range(3):
        input_ids = prompt(100 + seed, 9)
        expected = plain_generate(target, input_ids, max_new_tokens=30)
        assert torch.equal(target.generate(**TREE, drafter=assistant, input_ids=input_ids, max_new_tokens=30), expected)


@pytest.mark.parametrize("max_new_tokens", [1, 2, 3, 5, 8])
def test_max_new_tokens_hit_inside_an_accepted_path(family, max_new_tokens):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0)
    input_ids = prompt(7, 6)
    expected = plain_generate(target, input_ids, max_new_tokens=max_new_tokens)
    got = target.generate(**TREE, drafter=assistant, input_ids=input_ids, max_new_tokens=max_new_tokens, tree_top_k=1, tree_depth=6,
                             tree_total_tokens=6)
    assert torch.equal(got, expected)
    stats = assistant.stats  # the statistics count committed tokens: prefill token + per pass accepted + 1
    assert 1 + stats.verify_passes + stats.accepted == max_new_tokens


def test_eos_inside_an_accepted_path_stops_like_plain_generate(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.0)
    input_ids = prompt(3, 8)
    free = plain_generate(target, input_ids, max_new_tokens=20)[0, 8:].tolist()
    eos = free[5]  # a token that appears mid-way through a draftable stretch
    expected = plain_generate(target, input_ids, max_new_tokens=20, eos_token_id=eos)
    got = target.generate(**TREE, drafter=assistant, input_ids=input_ids, max_new_tokens=20, eos_token_id=eos, tree_top_k=1,
                             tree_depth=6, tree_total_tokens=6)
    assert torch.equal(got, expected)
    assert got[0, -1] == eos and got.shape[1] < 8 + 20


def test_custom_stopping_criteria_and_processors_are_honoured(family):
    class StopAfterTokens(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            return torch.tensor([input_ids.shape[1] >= 19])

    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.2)
    input_ids = prompt(4, 10)
    options = dict(max_new_tokens=30, repetition_penalty=1.7, no_repeat_ngram_size=2)
    expected = plain_generate(target, input_ids, stopping_criteria=[StopAfterTokens()], **options)
    got = target.generate(**TREE, drafter=assistant, input_ids=input_ids, stopping_criteria=[StopAfterTokens()], **options)
    assert torch.equal(got, expected) and got.shape[1] == 19


def test_return_dict_with_scores_matches_plain_generate(family):
    target = one_layer_target(family)
    assistant = imitating_assistant(target, noise=0.2)
    input_ids = prompt(2, 6)
    options = dict(max_new_tokens=12, return_dict_in_generate=True, output_scores=True, output_logits=True)
    expected = plain_generate(target, input_ids, **options)
    got = target.generate(**TREE, drafter=assistant, input_ids=input_ids, **options)
    assert torch.equal(got.sequences, expected.sequences)
    assert len(got.scores) == len(expected.scores) == 12
    for a, b in zip(got.scores + got.logits, expected.scores + expected.logits):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("strategy", ["frspec", "dynaspec", "dynaspec-fixed"])
def test_greedy_identical_through_shortlists(tmp_path, strategy):
    from hf_dynaspec import DynaSpecAssistant
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    target = one_layer_target("qwen2")
    assistant = imitating_assistant(target, noise=0.2)
    head = target.get_output_embeddings().weight.detach()
    assistant.shortlists.set_frequency_list(torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0)),
                                            kind="frspec")
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 8, always_ids=[0], seed=0))
    assistant.save_pretrained(tmp_path)
    shortlisted = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy, shortlist_size=40,
                                                    max_clusters=4, fixed_clusters=3)
    for seed in range(3):
        input_ids = prompt(seed, 9)
        expected = plain_generate(target, input_ids, max_new_tokens=24)
        got = target.generate(**TREE, drafter=shortlisted, input_ids=input_ids, max_new_tokens=24, tree_depth=4)
        assert torch.equal(got, expected)
        assert shortlisted.stats.avg_shortlist < VOCAB


# -- errors --------------------------------------------------------------------------------------------------
def test_clear_errors_for_unsupported_inputs():
    target = one_layer_target("llama")
    assistant = imitating_assistant(target)
    two = prompt(0, 5).repeat(2, 1)  # batches decode (tests/test_batched.py); right padding is refused
    right = torch.ones_like(two)
    right[0, -1] = 0
    with pytest.raises(ValueError, match="padding_side='left'"):
        target.generate(**TREE, drafter=assistant, input_ids=two, attention_mask=right, max_new_tokens=4)
    with pytest.raises(ValueError, match="num_beams"):
        target.generate(**TREE, drafter=assistant, input_ids=prompt(0, 5), num_beams=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="needs the drafter"):
        target.generate(prompt(0, 5), custom_generate=speculative_generate, trees=True, max_new_tokens=4)
    with pytest.raises(TypeError, match="does not generate by itself"):
        assistant.generate(target, input_ids=prompt(0, 5))
    for implementation in ("flash_attention_2", "kernels-community/flash-attn2", "paged|sdpa"):
        flash = one_layer_target("llama")
        flash.config._attn_implementation = implementation  # cannot apply (or is not known to apply) a 4-D mask
        flash_assistant = imitating_assistant(flash)
        with pytest.raises(ValueError, match="attn_implementation='sdpa'"):
            flash.generate(custom_generate=speculative_generate, trees=True, drafter=flash_assistant, input_ids=prompt(0, 5),
                           max_new_tokens=4)
    other = one_layer_target("llama", seed=1)
    with pytest.raises(ValueError, match="different target"):
        other.generate(**TREE, drafter=assistant, input_ids=prompt(0, 5), max_new_tokens=4)


# -- sampling ------------------------------------------------------------------------------------------------
def test_one_sampling_step_leaves_the_distribution_unchanged():
    """The real draws (`first_accepted`'s uniforms, the residual's sample; the enumeration replaces both): three
    siblings tried at the root, the committed token distributed as p. A repeated sibling token, tried twice,
    would show here too."""
    from scipy.stats import chisquare


    probs = torch.tensor([0.05, 0.3, 0.02, 0.13, 0.2, 0.1, 0.15, 0.05])
    for tokens in ([0, 4, 1, 6], [0, 4, 4, 1]):  # root + three children (the second repeating the first)
        tree = tree_from_parents(torch.tensor(tokens), [-1, 0, 0, 0])
        logits = probs.log().expand(len(tokens), -1)
        generator = torch.Generator().manual_seed(0)
        counts = torch.zeros(8)
        for _ in range(6000):
            path = tree_verify.sampled_path(tree, logits, torch.tensor([[0]]), None, generator)
            counts[int(path.new_tokens[0])] += 1
        assert chisquare(counts.numpy(), (probs * counts.sum()).numpy()).pvalue > 1e-3, (tokens, counts)


SAMPLING_VOCAB = 8
SAMPLING_PROMPT = torch.tensor([[1, 4, 2]])
TEMPERATURE = 0.8


def enumerated_tree_calls(target, assistant) -> tuple[float, list[tuple[int, int]]]:
    """The largest difference between the exact distribution of a whole tree call's 3 new tokens (every random choice
    enumerated, tests/enumeration.py: the sibling trials, the residual and bonus draws; the tree's own drafts are
    its top-k, no draw) and the target's joint at TEMPERATURE over the whole vocabulary (512 paths), and each
    path's (drafted, accepted)."""
    counts = []

    def call():
        out = target.generate(**TREE, drafter=assistant, input_ids=SAMPLING_PROMPT, do_sample=True, temperature=TEMPERATURE,
                              top_k=0, top_p=1.0, max_new_tokens=3, tree_top_k=3, tree_depth=2, tree_total_tokens=5)
        counts.append((assistant.stats.drafted, assistant.stats.accepted))
        return tuple(out[0, SAMPLING_PROMPT.shape[1]:].tolist())

    outcomes = outcome_distribution(enumerate_paths(call, max_paths=4 * SAMPLING_VOCAB**3))
    oracle = TargetOracle(target, LogitsProcessorList([TemperatureLogitsWarper(TEMPERATURE)]))
    return max_error(outcomes, target_joint(oracle, SAMPLING_PROMPT[0].tolist(), 3)), counts


@pytest.fixture(scope="module")
def sampling_setup():
    target = one_layer_target("llama", seed=5, vocab_size=SAMPLING_VOCAB)
    return target, imitating_assistant(target, noise=1.0, seed=3)


def test_every_sampled_tree_call_is_exact(sampling_setup):
    error, counts = enumerated_tree_calls(*sampling_setup)
    assert any(accepted > 0 for _, accepted in counts) and any(drafted > accepted for drafted, accepted in counts)
    assert error < 1e-6, error


def test_enumeration_sees_a_tree_walk_without_the_residual(sampling_setup, monkeypatch):
    """Sampling from p itself after a rejected child (instead of p without it) biases the output."""
    trial = tree_verify.sibling_trial

    def no_residual(tree, node, probs):
        return trial(tree, node, probs)[0], probs

    monkeypatch.setattr(tree_verify, "sibling_trial", no_residual)
    error, _ = enumerated_tree_calls(*sampling_setup)
    assert error > 1e-3, error


def test_greedy_walk_commits_the_argmax_of_every_visited_node():
    tree = tree_from_parents(torch.tensor([9, 1, 2, 3, 4]), [-1, 0, 0, 1, 1])
    logits = torch.full((5, 10), -5.0)
    logits[0, 2] = 1.0  # root -> child token 2 (node 2), a leaf
    logits[2, 7] = 1.0  # node 2 -> 7: no such child, the target's own token
    path = accept_path(tree, logits, torch.tensor([[9]]))
    assert path.nodes == [2] and path.next_token == 7 and len(path.scores) == 2
    logits[0, 1], logits[1, 4] = 2.0, 1.0  # root -> 1 (node 1) -> 4 (node 4)
    path = accept_path(tree, logits, torch.tensor([[9]]))
    assert path.nodes == [1, 4] and path.next_token == int(logits[4].argmax())



def test_caches_that_cannot_be_compacted_are_refused():
    from transformers import Qwen2Config
    from transformers.cache_utils import DynamicCache

    from hf_dynaspec.generation.tree_verify import check_tree_cache

    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, use_sliding_window=True, sliding_window=8,
                         max_window_layers=0)
    with pytest.raises(ValueError, match="DynamicSlidingWindowLayer"):
        check_tree_cache(DynamicCache(config=config))
    check_tree_cache(DynamicCache(config=one_layer_target("qwen2").config))  # full attention: accepted


def test_dynaspec_budget_applies_per_tree_depth(tmp_path, monkeypatch):
    """Depth d of the tree is scored with R(d - 1) rows, ranked from the router scores of all its frontier nodes."""
    from hf_dynaspec import DynaSpecAssistant
    from hf_dynaspec.drafting.selector import ClusterHead
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.2)
    head = target.get_output_embeddings().weight.detach()
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 16, always_ids=[0], seed=0))
    assistant.save_pretrained(tmp_path)
    shortlisted = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist="dynaspec",
                                                    shortlist_rows=[40, 30, 9])
    calls = []
    blocks = ClusterHead._blocks

    def recording(self, cluster_scores, position):
        starts, ends = blocks(self, cluster_scores, position)
        calls.append((position, cluster_scores.shape[0], sum(b - a for a, b in zip(starts, ends)) - 1))
        return starts, ends

    monkeypatch.setattr(ClusterHead, "_blocks", recording)
    target.generate(**TREE, drafter=shortlisted, input_ids=prompt(1, 9), max_new_tokens=8, tree_top_k=3, tree_depth=4,
                         tree_total_tokens=12)
    first_round = calls[:4]
    assert [c[0] for c in first_round] == [0, 1, 2, 3]
    assert [c[1] for c in first_round] == [1, 3, 3, 3]  # the root, then the frontier of each depth
    assert [c[2] for c in first_round] == [40, 30, 9, 9]  # rows scored (the always-included one aside)


def test_tree_shape_strings():
    from hf_dynaspec.bench.command import parse_tree_shape

    assert parse_tree_shape("8,6,24") == {"tree_top_k": 8, "tree_depth": 6, "tree_total_tokens": 24}
    assert parse_tree_shape(None) == {}
    for bad in ["8,6", "a,b,c", "4,0,8"]:
        with pytest.raises(ValueError, match="--tree"):
            parse_tree_shape(bad)


def test_greedy_identical_with_an_eagle3_drafter(family, monkeypatch):
    """EAGLE-3: three fused target layers in, its own reduced head out; trees stay exact."""
    target = tiny_target(family, seed=4)
    assistant = random_assistant(target, drafter_kind="eagle3", draft_vocab_size=40, aux_hidden_state_layer_ids=[1, 2, 3])
    with torch.no_grad():  # a draft vocabulary of every other target id, as EAGLE-3 keeps a subset
        assistant.drafter.d2t.copy_(torch.arange(0, 80, 2) - torch.arange(40))
    drafted = []
    choose = TreeDraftSession._row_ids
    monkeypatch.setattr(TreeDraftSession, "_row_ids",
                        staticmethod(lambda ids, rows: drafted.append(choose(ids, rows)) or drafted[-1]))
    for seed in range(3):
        input_ids = prompt(200 + seed, 7)
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        got = target.generate(**TREE, drafter=assistant, input_ids=input_ids, max_new_tokens=20, tree_top_k=3, tree_depth=3,
                                 tree_total_tokens=7)
        assert torch.equal(got, expected)
        assert assistant.stats.verify_passes > 0
    ids = torch.cat(drafted)
    assert (ids % 2 == 0).all() and ids.max() < 80  # drafts are target ids mapped through d2t
