"""Batched speculative decoding on the public routes (hf_dynaspec.generation.batched_loop): each row exact.

- fp32 greedy: every row of a left-padded batch of 1, 3 and 8 mixed-length prompts equals that prompt's own
  batch-1 plain greedy output, for chains (fixed and planned, with lookup), EAGLE-2 trees (fixed and planned) and
  Medusa chains, trees and planned rounds; the whole output equals plain batched generate()'s (pads included);
- sampling: whole batched calls of two different prompts enumerated exactly: the joint of the two rows is the
  product of the target's joints (rows independent, each exact);
- per row: EOS (a row that finishes at once beside long rows) and max_new_tokens; finished rows leave the
  verify batch; rows that accept different numbers of tokens keep masked slots that are never read;
- bad batches refused by name (right padding, per-step scores).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import VOCAB, imitating_assistant, one_layer_target, plain_generate, tiny_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint, tree_from_parents
from test_chain_generate import fresh_run_time_state
from test_enumeration import PROMPT, TOLERANCE, processors
from test_enumeration import VOCAB as SMALL_VOCAB
from test_medusa import trained_heads
from test_planner import flat_costs

from hf_dynaspec import speculative_generate
from hf_dynaspec.generation import rounds as cg
from hf_dynaspec.modeling.medusa import MedusaAssistant


def left_padded(prompts: list[torch.Tensor], pad: int = 0, extra: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts `[n_b]` -> (input_ids `[B, L]`, attention_mask `[B, L]`), padded on the left (`extra` more columns:
    a batch of one padded prompt goes through the batched loop too)."""
    width = max(len(p) for p in prompts) + extra
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, width - len(prompt) :] = prompt
        mask[i, width - len(prompt) :] = 1
    return ids, mask


def mixed_prompts(count: int, seed: int = 0, vocab: int = VOCAB) -> list[torch.Tensor]:
    """`count` prompts of lengths 2..12, some repeating themselves (prompt lookup then finds matches)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        length = 2 + (5 * i + 3) % 11
        prompt = torch.randint(0, vocab, (length,), generator=generator)
        prompts.append(torch.cat([prompt, prompt]) if i % 3 == 1 else prompt)
    return prompts


def assert_rows_exact(target, prompts, out, width, max_new_tokens, **kwargs):
    for i, prompt in enumerate(prompts):
        expected = plain_generate(target, prompt[None], max_new_tokens=max_new_tokens, do_sample=False, **kwargs)
        new = expected[0, len(prompt) :]
        assert torch.equal(out[i, width : width + len(new)], new), f"row {i}"


@pytest.fixture(scope="module")
def eagle_pair():
    target = one_layer_target("llama", seed=2)
    return target, imitating_assistant(target, noise=0.2, seed=4)


ROUTES = {
    "chain-fixed": (speculative_generate, dict(draft_plan="fixed", num_assistant_tokens=3), {}),
    "chain-auto-lookup": (speculative_generate, dict(draft_plan="auto", prompt_lookup_num_tokens=4,
                                               auto_max_assistant_tokens=4), {}),
    "chain-auto-suffix": (speculative_generate, dict(draft_plan="auto", suffix_cache_num_tokens=6, prompt_lookup_num_tokens=3,
                                               auto_max_assistant_tokens=4), {}),
    "tree-fixed": (speculative_generate, dict(draft_plan="fixed"),
                   dict(trees=True, tree_top_k=2, tree_depth=3, tree_total_tokens=6)),
    "tree-auto": (speculative_generate, dict(draft_plan="auto", auto_max_assistant_tokens=4),
                  dict(trees=True, tree_top_k=2, tree_depth=3, tree_total_tokens=6)),
}


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("route", ROUTES)
def test_every_row_equals_its_own_plain_greedy_output(eagle_pair, route, batch, monkeypatch):
    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    with_trees = dataclasses.replace(flat_costs(), tree_step_seconds=0.02)  # trees planned too
    monkeypatch.setattr(cg, "round_costs", lambda *a, **k: with_trees)
    custom, options, kwargs = ROUTES[route]
    for name, value in options.items():
        monkeypatch.setattr(assistant.generation_config, name, value)
    prompts = mixed_prompts(batch, seed=batch)
    ids, mask = left_padded(prompts, extra=2 if batch == 1 else 0)
    out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=custom, drafter=assistant,
                          max_new_tokens=24, do_sample=False, pad_token_id=0, **kwargs)
    assert_rows_exact(target, prompts, out, ids.shape[1], 24)
    assert assistant.stats.drafted > 0 and sum(
        n * c for n, c in enumerate(assistant.stats.acceptance_histogram)) > 0, "drafts must be accepted"


@pytest.fixture(scope="module")
def medusa_pair():
    target = tiny_target("llama", seed=3)
    return target, trained_heads(target, steps=60)


@pytest.mark.parametrize("draft", ["chain", "tree", "auto"])
def test_medusa_rows_equal_their_own_plain_greedy_output(medusa_pair, draft):
    target, heads = medusa_pair
    prompts = mixed_prompts(8, seed=11)
    ids, mask = left_padded(prompts)
    out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate,
                          drafter=heads, max_new_tokens=24, do_sample=False, pad_token_id=0, tree_total_tokens=6,
                          **(dict(draft_plan="auto", prompt_lookup_num_tokens=4) if draft == "auto"
                             else dict(lattice_draft=draft)))
    assert_rows_exact(target, prompts, out, ids.shape[1], 24)


def test_eos_per_row_and_the_whole_output_equal_plain_batched_generate(eagle_pair, monkeypatch):
    """Row 1's first token is made an EOS: it finishes at once beside long rows; the output (lengths, the pads
    after EOS) is plain batched generate()'s, and the finished row leaves the verify batch."""
    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 3)
    prompts = mixed_prompts(4, seed=5)
    ids, mask = left_padded(prompts)
    first = plain_generate(target, prompts[1][None], max_new_tokens=1, do_sample=False)[0, -1].item()
    kwargs = dict(max_new_tokens=20, do_sample=False, eos_token_id=first, pad_token_id=VOCAB - 1)
    expected = target.generate(input_ids=ids, attention_mask=mask, **kwargs)
    widths = []
    original = target.forward

    def forward(*args, **kw):
        widths.append(kw["input_ids"].shape[0])
        return original(*args, **kw)

    monkeypatch.setattr(target, "forward", forward)
    out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                          **kwargs)
    assert torch.equal(out, expected)
    assert out[1, ids.shape[1]].item() == first and (out[1, ids.shape[1] + 1 :] == VOCAB - 1).all()
    assert widths[0] == 4 and max(widths[1:]) <= 3, widths


def test_rows_accepting_different_lengths_never_read_rejected_slots(eagle_pair, monkeypatch):
    """Rows that accept nothing in a round beside rows that accept several drafts: the short rows' masked slots
    sit between their valid ones, and their outputs are still exact."""
    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 4)
    prompts = mixed_prompts(3, seed=8)
    ids, mask = left_padded(prompts)
    out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                          max_new_tokens=30, do_sample=False, pad_token_id=0)
    assert_rows_exact(target, prompts, out, ids.shape[1], 30)
    histogram = assistant.stats.acceptance_histogram
    assert histogram[0] > 0 and sum(histogram[2:]) > 0, "rows must accept different lengths"


def test_sampled_batches_are_exact_per_row(monkeypatch):
    """Two different prompts, two tokens each, sampled at temperature 0.7 in one batched call (chain and Medusa
    tree): the joint of the rows is the product of the target's joints."""
    fresh_run_time_state(monkeypatch)
    target = one_layer_target("llama", seed=5, vocab_size=SMALL_VOCAB)
    assistant = imitating_assistant(target, noise=1.0, seed=3, num_assistant_tokens=2)
    heads = MedusaAssistant.from_target(target, num_heads=2)
    with torch.no_grad():
        for parameter in heads.blocks.parameters():
            parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(parameter.numel()))
    second = [3, 0, 4]
    ids, mask = left_padded([torch.tensor(PROMPT), torch.tensor(second)])
    oracle = TargetOracle(target, processors("temperature"))
    first_joint, second_joint = target_joint(oracle, PROMPT, 2), target_joint(oracle, second, 2)
    expected = {(a, b): p * q for a, p in first_joint.items() for b, q in second_joint.items()}
    for drafts in (dict(custom_generate=speculative_generate, drafter=assistant),
                   dict(custom_generate=speculative_generate, drafter=heads, lattice_draft="tree",
                        tree_total_tokens=3)):
        def call(drafts=drafts):
            out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=2, do_sample=True,
                                  temperature=0.7, top_k=0, pad_token_id=0, **drafts)
            width = ids.shape[1]
            return tuple(out[0, width:].tolist()), tuple(out[1, width:].tolist())

        paths = enumerate_paths(call, max_paths=2 * SMALL_VOCAB**4)
        assert max_error(outcome_distribution(paths), expected) < TOLERANCE, drafts["custom_generate"].__name__


def test_bad_batches_are_refused_by_name(eagle_pair):
    target, assistant = eagle_pair
    ids, mask = left_padded(mixed_prompts(2))
    right = mask.flip(1)
    with pytest.raises(ValueError, match="padding_side='left'"):
        target.generate(input_ids=ids, attention_mask=right, custom_generate=speculative_generate, drafter=assistant,
                        max_new_tokens=4, pad_token_id=0)
    with pytest.raises(ValueError, match="output_scores"):
        target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                        max_new_tokens=4, pad_token_id=0, output_scores=True, return_dict_in_generate=True)


def test_batched_verify_logits_equal_each_rows_own_forward():
    """Two rounds of the batched loop's own steps on a 2-layer target (prefill of a left-padded batch, trees of
    different sizes, compaction keeping different counts per row): every row's logits equal a plain forward over
    that row's own context (no padding, no masked slots), so positions, masks and kept slots are each row's."""
    from transformers.cache_utils import DynamicCache
    from transformers.generation.logits_process import LogitsProcessorList

    from hf_dynaspec.drafting.contract import chain_tree
    from hf_dynaspec.generation.batched_loop import _compact, _prefill, _Row, _verify
    from hf_dynaspec.generation.static_round import TargetSlots

    target = tiny_target("llama", seed=3)
    heads = MedusaAssistant.from_target(target, num_heads=2)
    prompts = mixed_prompts(3, seed=21)
    ids, mask = left_padded(prompts)
    rows = [_Row(b, ids.shape[1] - len(p), ids[b : b + 1], None, None) for b, p in enumerate(prompts)]
    cache = TargetSlots(target, DynamicCache(), 0, static=False)
    with torch.no_grad():
        valid, _, _ = _prefill(target, heads, rows, ids, mask.bool(), cache, [LogitsProcessorList()] * 3, False)
        generator = torch.Generator().manual_seed(0)
        for sizes, kept_counts in (([1, 3, 2], [1, 3, 2]), ([4, 2, 3], [2, 1, 4])):
            trees = [chain_tree(row.ids[0, -1:], torch.randint(0, VOCAB, (n,), generator=generator))
                     for row, n in zip(rows, sizes)]
            out = _verify(target, heads, rows, trees, valid, cache)
            for i, (row, tree) in enumerate(zip(rows, trees)):
                context = torch.cat([row.ids[0], tree.token_ids[1:]])[None]
                reference = target(context).logits[0, -len(tree) :]
                torch.testing.assert_close(out.logits[i, : len(tree)], reference, atol=1e-4, rtol=1e-4)
            kept = [torch.arange(k) for k in kept_counts]
            valid = _compact(cache, valid, kept)
            for row, tree, k in zip(rows, trees, kept_counts):
                bonus = torch.randint(0, VOCAB, (1,), generator=generator)
                row.sequence = torch.cat([row.sequence, tree.token_ids[1:k][None], bonus[None]], dim=1)


def test_a_rows_plan_is_priced_as_its_share_of_the_batch():
    """A machine where verifying up to 8 tokens costs one step and each token past 8 costs 30% more: one row
    drafts its whole chain, while in a batch of 8 rows (8 x n tokens per forward) each row drafts less."""
    from plans import Plan, Planning

    from hf_dynaspec.drafting.planning.core import PlannerMemory, RoundCosts

    table = [0.0] + [1.0 if n <= 8 else 1.0 + 0.3 * (n - 8) for n in range(1, 80)]
    costs = RoundCosts(table, consume_seconds=0.01, first_draft_seconds=0.02, draft_step_seconds=0.02)
    memory = PlannerMemory()
    planning = Planning(costs, memory, max_draft_tokens=6)
    for _ in range(40):  # a drafter right 80% of the time at every position
        for accepted in (6, 6, 6, 6, 0):
            planning.record(Plan("drafter", 6), 6, accepted)
    alone = planning.plan_round([], 100).num_tokens
    batched = planning.plan_round([], 100, rows=8).num_tokens
    assert planning.planner.verify(2) == costs.verify(16) / 8
    assert planning.plan_round([], 100, rows=1).num_tokens == alone and planning.planner.verify(2) == costs.verify(2)
    assert alone == 6 and batched < alone, (alone, batched)


@pytest.mark.parametrize("batch", [3, 8])
def test_assistant_model_route_decodes_batches_per_row(eagle_pair, batch, monkeypatch, caplog):
    """`assistant_model=` with a batch: transformers' loop cannot carry per-row acceptance, so the call goes to the
    batched public loop, which it says (once per process); every row equals its own plain greedy output."""
    import logging

    from hf_dynaspec.generation import hook

    target, assistant = eagle_pair
    type(hook.logger).warning_once.cache_clear()
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 3)
    monkeypatch.setattr(assistant.generation_config, "draft_plan", "fixed")
    prompts = mixed_prompts(batch, seed=30 + batch)
    ids, mask = left_padded(prompts)
    with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.hook"):
        out = target.generate(input_ids=ids, attention_mask=mask, assistant_model=assistant, max_new_tokens=24,
                              do_sample=False, pad_token_id=0)
    assert "decoded by hf-dynaspec's batched loop" in caplog.text
    assert_rows_exact(target, prompts, out, ids.shape[1], 24)
    assert sum(n * c for n, c in enumerate(assistant.stats.acceptance_histogram)) > 0


def test_each_row_searches_its_own_request_and_the_shared_index():
    """Two rows' request views over one suffix cache: a row's running text is not the other's; a finished row's
    output joins the shared index, which every row then reads."""
    from hf_dynaspec.drafting.lookup import RequestView, SuffixCache

    cache = SuffixCache(max_ngram=3, min_ngram=2)
    first, second = RequestView(cache), RequestView(cache)
    first.begin_request([1, 2, 3, 4])
    second.begin_request([7, 8, 9])
    first.extend([1, 2])  # the first row's text repeats its prompt: "1 2" was followed by 3
    second.extend([1, 2])  # the second row never saw "1 2 3"
    assert first.draft(2).tokens == [3, 4] and first.draft(2).source == "suffix-request"
    assert second.draft(2) is None
    first.extend([3, 5])
    first.end_request()  # its output (1 2 3 5) joins the shared index
    assert second.draft(2).tokens[0] == 3 and second.draft(2).source == "suffix-shared"


def test_the_batched_bench_counts_rows_and_compares_them(eagle_pair):
    """`hf-dynaspec bench --batch-size`: full batches of cycled prompts, assistant methods moved to the public route,
    tokens counted per row up to its EOS, every fp32 row identical to plain batched generate()'s."""
    from hf_dynaspec.bench import EncodedPrompt
    from hf_dynaspec.bench.batched import batched_kwargs, make_batches, row_lengths, run_batched_benchmark
    from hf_dynaspec.bench.methods import Method

    target, assistant = eagle_pair
    assert row_lengths(torch.tensor([[5, 2, 9, 9], [1, 3, 4, 6]]), eos_ids={2}) == [2, 4]
    generator = torch.Generator().manual_seed(0)
    prompts = [EncodedPrompt(f"p{i}", "cat", torch.randint(0, VOCAB, (1, 3 + i), generator=generator))
               for i in range(3)]
    assert [len(batch) for batch in make_batches(prompts, 2)] == [2, 2]
    methods = [Method("vanilla"), Method("eagle", {"assistant_model": assistant}, assistant)]
    assert batched_kwargs(methods[1]) == {"custom_generate": speculative_generate, "drafter": assistant}
    report = run_batched_benchmark(target, methods, prompts, [1, 2], max_new_tokens=8, pad_token_id=0,
                                   eos_ids={VOCAB - 1}, progress=False)
    for size, rows in ((1, 3), (2, 4)):
        eagle = report["batch_sizes"][size]["eagle"]
        assert eagle["rows"] == rows and eagle["rows_identical"] == rows and eagle["tokens_per_s"] > 0
        assert report["batch_sizes"][size]["vanilla"]["speedup"] == 1.0


def test_processors_see_rows_as_plain_batched_generate_does(eagle_pair, monkeypatch):
    """min_new_tokens (counted from the padded prompt length generate() measured) and a repetition penalty: the
    whole output equals plain batched generate()'s."""
    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 3)
    prompts = mixed_prompts(4, seed=40)
    ids, mask = left_padded(prompts)
    first = plain_generate(target, prompts[2][None], max_new_tokens=1, do_sample=False)[0, -1].item()
    kwargs = dict(max_new_tokens=16, min_new_tokens=5, do_sample=False, eos_token_id=first, pad_token_id=VOCAB - 1,
                  repetition_penalty=1.3)
    expected = target.generate(input_ids=ids, attention_mask=mask, **kwargs)
    out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                          **kwargs)
    assert torch.equal(out, expected)


def test_each_rows_tree_is_read_through_its_own_ancestors():
    """Trees that branch below the root (depth >= 2): each row's nodes see the cache slots of their row and their
    own ancestors, never a sibling or a cousin (a causal mask over the flattened tree would let them)."""
    from hf_dynaspec.generation.batched_loop import _Row, _verify
    from hf_dynaspec.generation.static_round import TargetSlots

    seen = {}

    class Recorder(torch.nn.Module):
        dtype = torch.float32

        def forward(self, **kwargs):
            seen.update(kwargs)
            return None

    trees = [tree_from_parents(torch.arange(7), [-1, 0, 0, 1, 1, 2, 3]),  # root -> a, b; a -> c, d; ...
             tree_from_parents(torch.arange(4), [-1, 0, 1, 1])]
    rows = [_Row(b, 0, torch.zeros(1, 5, dtype=torch.long), None, None) for b in range(2)]
    valid = torch.tensor([[True] * 5, [False, True, True, True, True]])

    class Drafter:
        @staticmethod
        def hidden_state_selection():
            return -1

    recorder = Recorder()
    _verify(recorder, Drafter(), rows, trees, valid, TargetSlots(recorder, None, 0, static=False))
    visible = seen["attention_mask"][:, 0] == 0  # [rows, nodes, slots]
    for i, tree in enumerate(trees):
        n = len(tree)
        assert torch.equal(visible[i, :n, 5 : 5 + n], tree.ancestor_matrix())
        assert torch.equal(visible[i, :n, :5], valid[i].expand(n, -1))
    assert not torch.equal(trees[0].ancestor_matrix(), torch.ones(7, 7, dtype=torch.bool).tril())  # it branches


def word_tokenizer(vocab: int = VOCAB):
    """A word-level tokenizer of `vocab` tokens "abcdef", "w01_", "w02_", ..: a token's text never straddles a
    boundary, so a stop string of two tokens' text matches exactly where those two tokens follow each other.
    (Token 0 is the text transformers' StopStringCriteria tokenizes to learn each token's string.)"""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    words = {"abcdef": 0, **{f"w{i:02d}_": i for i in range(1, vocab)}}
    backend = Tokenizer(models.WordLevel(vocab=words, unk_token="abcdef"))
    backend.decoder = decoders.Fuse()  # the tokens' text joined without spaces
    return PreTrainedTokenizerFast(tokenizer_object=backend)


@pytest.mark.parametrize("stop", ["eos", "stop string", "stop string without eos"])
def test_a_row_that_stops_inside_its_accepted_draft_ends_there(eagle_pair, monkeypatch, stop):
    """Row 0's EOS (or a stop string spanning two of its tokens) falls inside a multi-token draft the target
    accepts: the whole output is plain batched generate()'s, token for token. With an EOS token, generate() pads a
    row from its stop on (the row commits up to it and no further); without one it pads nothing, and every row
    decodes until each has stopped once (a stopped row goes on). The case is checked to have happened (a round whose
    accepted path ran past row 0's stop). (`max_new_tokens` cannot fall inside a path: each row's draft is capped by
    the room it has left, test_every_row_equals_its_own_plain_greedy_output.)"""
    from transformers import StoppingCriteriaList, StopStringCriteria

    import hf_dynaspec.generation.batched_loop as batched_loop

    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 6)
    prompts = mixed_prompts(3, seed=21)
    ids, mask = left_padded(prompts)
    own = plain_generate(target, prompts[0][None], max_new_tokens=24, do_sample=False)[0, len(prompts[0]):]
    tokenizer = word_tokenizer()
    inside = []
    original = batched_loop._Lockstep.after_round

    def recording(self, row, stops):
        inside.append(row.index == 0 and True in stops[:-1])
        return original(self, row, stops)

    monkeypatch.setattr(batched_loop._Lockstep, "after_round", recording)
    for position in range(3, 12):  # a stop position that lands inside an accepted draft
        inside.clear()
        if stop == "eos":
            if int(own[position]) in own[:position].tolist():
                continue  # the row would stop earlier, at the token's first occurrence
            kwargs = dict(eos_token_id=int(own[position]))
        else:
            text = tokenizer.decode(own[position - 1 : position + 1])
            if text in tokenizer.decode(own[:position]):
                continue
            # As criteria: generate() drops `tokenizer=` for a custom_generate callable (transformers 5.x keeps only
            # the arguments the callable names), so `stop_strings=` cannot reach speculative_generate (docs/batching.md).
            kwargs = dict(stopping_criteria=StoppingCriteriaList([StopStringCriteria(tokenizer, [text])]))
            if stop == "stop string":  # an EOS token no row reaches first: generate() then pads after any stop
                kwargs["eos_token_id"] = VOCAB - 2
        kwargs.update(max_new_tokens=24, pad_token_id=VOCAB - 1)
        expected = target.generate(input_ids=ids, attention_mask=mask, do_sample=False, **kwargs)
        out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate,
                              drafter=assistant, do_sample=False, **kwargs)
        assert torch.equal(out, expected), position
        if any(inside):
            return
    pytest.fail("no stop fell inside an accepted draft: the test checked nothing")


def test_batched_trees_that_accept_a_second_ranked_child_below_a_branch_are_exact(eagle_pair, monkeypatch):
    """fp32 greedy identity per row on batches whose trees branch below the root and accept a node that is not its
    parent's first child (where a sibling's mask matters); the case is checked to have happened."""
    import hf_dynaspec.generation.batched_loop as batched_loop

    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "draft_plan", "fixed")
    seen = []
    original = batched_loop._accepted_paths

    def recording(rows, trees, logits, processors, do_sample):
        paths = original(rows, trees, logits, processors, do_sample)
        for tree, path in zip(trees, paths):
            children, parents = tree.children(), tree.parents.tolist()
            seen.extend(node for node in path.nodes if parents[node] > 0 and children[parents[node]][0] != node)
        return paths

    monkeypatch.setattr(batched_loop, "_accepted_paths", recording)
    for seed in range(4):
        prompts = mixed_prompts(6, seed=40 + seed)
        ids, mask = left_padded(prompts)
        out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate, trees=True, drafter=assistant,
                              max_new_tokens=24, do_sample=False, pad_token_id=0, tree_top_k=3, tree_depth=4,
                              tree_total_tokens=12)
        assert_rows_exact(target, prompts, out, ids.shape[1], 24)
    assert seen, "no row accepted a second-ranked child below a branching node: the test checked nothing"


class _StopOnTokens:
    """A stopping criterion without an `eos_token_id` (so generate() pads nothing): a row is done when its last
    token is one of `tokens`."""

    def __init__(self, tokens: set[int]):
        self.tokens = tokens

    def __call__(self, input_ids, scores, **kwargs):
        return torch.isin(input_ids[:, -1], torch.tensor(sorted(self.tokens)))


def test_without_eos_every_row_stops_inside_accepted_drafts_at_its_own_depth(eagle_pair, monkeypatch):
    """No EOS token: generate() decodes every row until each has stopped once, and all end at that step. Here
    every row stops, at a different depth, and the last one to stop does so inside a multi-token draft the target
    accepted, while another row accepted past the common length: both cases checked to have happened, the output
    compared token for token with plain batched generate()."""
    from transformers import StoppingCriteriaList

    import hf_dynaspec.generation.batched_loop as batched_loop

    target, assistant = eagle_pair
    fresh_run_time_state(monkeypatch)
    monkeypatch.setattr(assistant.generation_config, "num_assistant_tokens", 6)
    prompts = mixed_prompts(3, seed=21)
    ids, mask = left_padded(prompts)
    own = [plain_generate(target, p[None], max_new_tokens=24, do_sample=False)[0, len(p):].tolist() for p in prompts]
    seen = {"last_inside": False, "past_common": False}
    original_after, original_cut = batched_loop._Lockstep.after_round, batched_loop._Lockstep.cut

    def after_round(self, row, stops):
        first_time = row.index not in self.first_stops
        result = original_after(self, row, stops)
        if first_time and True in stops[:-1] and len(self.first_stops) == self.batch_size:
            seen["last_inside"] = True  # the last row to stop did so inside an accepted path
        return result

    def cut(self, rows):
        seen["past_common"] |= any(row.sequence.shape[1] > self.length for row in rows)
        return original_cut(self, rows)

    monkeypatch.setattr(batched_loop._Lockstep, "after_round", after_round)
    monkeypatch.setattr(batched_loop._Lockstep, "cut", cut)
    compared = 0
    for depths in ((4, 9, 14), (14, 4, 9), (9, 14, 4), (5, 11, 16), (16, 5, 11), (6, 13, 18), (18, 13, 6)):
        tokens = {own[row][depth] for row, depth in enumerate(depths)}
        firsts = [next(i for i, token in enumerate(row_tokens) if token in tokens) for row_tokens in own]
        if len(set(firsts)) < 3:
            continue  # the rows must stop at different depths
        seen.update(last_inside=False, past_common=False)
        kwargs = dict(max_new_tokens=24, pad_token_id=VOCAB - 1,
                      stopping_criteria=StoppingCriteriaList([_StopOnTokens(tokens)]))
        expected = target.generate(input_ids=ids, attention_mask=mask, do_sample=False, **kwargs)
        assert expected.shape[1] < ids.shape[1] + 24  # every row stopped before max_new_tokens
        out = target.generate(input_ids=ids, attention_mask=mask, custom_generate=speculative_generate,
                              drafter=assistant, do_sample=False, **kwargs)
        assert torch.equal(out, expected), depths
        compared += 1
        if seen["last_inside"] and seen["past_common"]:
            return
    pytest.fail(f"the case did not happen in {compared} batches: the test checked nothing")


def test_each_rows_suffix_cache_indexes_its_own_request(monkeypatch):
    """In a batch through `speculative_generate`, each row's suffix cache searches that row's own running text:
    whenever a row's round asks it for a draft, its request part is the row's prompt and output so far, never
    another row's (whose text would then be drafted into this one)."""
    from hf_dynaspec.drafting.lookup import SuffixCache

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=2,
                                    suffix_cache_num_tokens=4)
    seen = []
    draft = SuffixCache.draft

    def recorded(self, max_tokens):
        seen.append(list(self.request_tokens))
        return draft(self, max_tokens)
    monkeypatch.setattr(SuffixCache, "draft", recorded)
    prompts = [torch.tensor([5, 6, 7, 8] * 3), torch.tensor([40, 41, 42] * 3), torch.tensor([70, 71] * 4)]
    ids, mask = left_padded(prompts)
    out = target.generate(ids, attention_mask=mask, custom_generate=speculative_generate, drafter=assistant,
                          max_new_tokens=16, do_sample=False)
    assert_rows_exact(target, prompts, out, ids.shape[1], 16)
    texts = [prompt.tolist() + out[i, ids.shape[1]:].tolist() for i, prompt in enumerate(prompts)]
    asked = [[row for row, text in enumerate(texts) if text[: len(request)] == request and len(request) >= len(
        prompts[row])] for request in seen]
    assert all(asked), [request for request, rows in zip(seen, asked) if not rows][:3]
    assert {rows[0] for rows in asked} == {0, 1, 2}, "the case: every row's rounds asked its suffix cache"
