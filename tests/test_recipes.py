"""Training recipes on tiny models: the drafter objective learns, and the router objective learns."""

from __future__ import annotations

import json
import random

import pytest
import torch
from conftest import VOCAB, one_layer_target

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.modeling.shortlist import ClusterRouter
from recipes.data_paths import shared_data_dir


def _cached_batch(target, num_sequences=4, length=40, topk=8):
    """A training batch made exactly as the recipes make one: build_features' shard tensors, then collate."""
    from safetensors.torch import save_file

    from recipes.build_features import shard_tensors
    from recipes.training_data import collate, load_sequences

    generator = torch.Generator().manual_seed(0)
    tokenized = [(torch.randint(0, VOCAB, (length - i,), generator=generator).tolist(), 5) for i in range(num_sequences)]
    tensors = shard_tensors(target, tokenized, topk, tokens_per_batch=64)
    return tensors, tokenized, (lambda path: (save_file(tensors, str(path)), collate(load_sequences(path), "cpu"))[1])


def test_feature_shards_hold_the_targets_hidden_states_and_top_k(tmp_path):
    target = one_layer_target("qwen2", seed=6)
    tensors, tokenized, to_batch = _cached_batch(target)
    batch = to_batch(tmp_path / "shard.safetensors")
    for row, (ids, _start) in enumerate(tokenized):  # sequences were run in padded batches; each must be as alone
        with torch.no_grad():
            out = target(input_ids=torch.tensor([ids]), output_hidden_states=True)
        n = len(ids)
        torch.testing.assert_close(batch.hidden[row, :n], out.hidden_states[-1][0].to(torch.bfloat16).float())
        logp = out.logits[0].float().log_softmax(-1)
        assert torch.equal(batch.topk_ids[row, :n, 0], logp.argmax(-1))
        torch.testing.assert_close(batch.topk_logp[row, :n], logp.topk(8, -1).values, atol=1e-5, rtol=1e-5)
        assert not batch.valid[row, n:].any() and batch.valid[row, :n].all()
    assert tensors["response_mask"].sum() == sum(len(ids) - start for ids, start in tokenized)


def test_held_out_split_keeps_every_other_sequence_for_training(tmp_path):
    from safetensors.torch import save_file

    from recipes.training_data import feature_shards, split_held_out

    target = one_layer_target("qwen2", seed=6)
    lengths = {}
    for index, directory in enumerate(["self_distilled", "teacher_forced"]):
        tensors, tokenized, _ = _cached_batch(target, num_sequences=4, length=20 + 10 * index)
        (tmp_path / directory).mkdir()
        save_file(tensors, str(tmp_path / directory / "shard_00000.safetensors"))
        lengths[directory] = [len(ids) for ids, _ in tokenized]
    shards = feature_shards([tmp_path / "self_distilled", tmp_path / "teacher_forced"])
    held_out, train = split_held_out(shards, val_tokens=25)
    # The first two sequences of the first directory (20 + 19 tokens reach 25) are held out; nothing else is.
    assert [len(s.input_ids) for s in held_out] == lengths["self_distilled"][:2]
    assert [len(s.input_ids) for s in train] == lengths["self_distilled"][2:] + lengths["teacher_forced"]
    assert held_out[0].response.tolist() == [False] * 5 + [True] * 15  # response starts at 5 (see _cached_batch)
    with pytest.raises(SystemExit, match="no finished shard"):
        feature_shards([tmp_path / "self_distilled", tmp_path / "missing"])
    with pytest.raises(SystemExit, match="nothing left to train on"):
        split_held_out(shards[:1], val_tokens=10**6)


def test_a_shard_named_before_its_directory_comes_first_and_trains_once(tmp_path):
    from recipes.training_data import feature_shards

    for directory, count in [("new", 3), ("old", 1)]:
        (tmp_path / directory).mkdir()
        for index in range(count):
            (tmp_path / directory / f"shard_{index:05d}.safetensors").write_bytes(b"")
    new = tmp_path / "new"
    shards = feature_shards([new / "shard_00001.safetensors", new, tmp_path / "old", new / "shard_00002.safetensors"])
    # Validation comes from the first shard, so the named shard leads; the directory adds only its other shards.
    assert [path.relative_to(tmp_path).as_posix() for path in shards] == [
        "new/shard_00001.safetensors", "new/shard_00000.safetensors", "new/shard_00002.safetensors",
        "old/shard_00000.safetensors"]
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(SystemExit, match="not a features directory or a shard"):
        feature_shards([tmp_path / "notes.txt"])


def _one_sequence_batch(tmp_path):
    """(target, a one-sequence batch, a fresh drafter, the answer's first position) for validation tests."""
    target = one_layer_target("qwen2", seed=6)
    _, tokenized, to_batch = _cached_batch(target, num_sequences=1, length=30)
    return target, to_batch(tmp_path / "shard.safetensors"), DynaSpecAssistant.from_target(target).drafter, tokenized[0][1]


def test_validation_on_response_positions_matches_a_direct_count(tmp_path):
    from recipes.train_drafter import validate
    from recipes.training_objective import draft_pass

    target, batch, drafter, start = _one_sequence_batch(tmp_path)
    with torch.no_grad():  # draft position 1: the pair (f_t, x_{t+1}) guesses the target's token after x_{t+1}
        predicted = draft_pass(drafter, drafter.embed(batch.input_ids[:, 1:]), batch.hidden[:, :-1])
        guesses = (predicted @ target.lm_head.weight.T).argmax(-1)[0]
    # Make the target agree with these guesses at known pairs: 4 in the prompt, every third one in the response.
    agree = torch.zeros(len(guesses), dtype=torch.bool)
    agree[: start - 1] = True
    agree[start - 1 :: 3] = True
    batch.topk_ids[0, 1:, 0] = torch.where(agree, guesses, (guesses + 1) % VOCAB)
    metrics = validate(drafter, [batch])
    assert metrics["val_top1_1"] == pytest.approx(agree.float().mean().item())
    assert metrics["val_response_top1_1"] == pytest.approx(agree[start - 1 :].float().mean().item())


def test_sampled_loss_over_every_row_is_the_full_loss():
    from recipes.training_objective import classification_loss, sampled_rows

    generator = torch.Generator().manual_seed(0)
    head, predicted = torch.randn(VOCAB, 16, generator=generator), torch.randn(10, 16, generator=generator)
    topk_ids = torch.stack([torch.randperm(VOCAB, generator=generator)[:5] for _ in range(10)])
    topk_logp = torch.randn(10, 5, generator=generator).log_softmax(-1).sort(-1, descending=True).values
    full = classification_loss(predicted, head, None, topk_ids, topk_logp)
    every = classification_loss(predicted, head, torch.arange(VOCAB), topk_ids, topk_logp)
    torch.testing.assert_close(full, every)
    rows = sampled_rows(topk_ids[None], torch.ones(1, 10, dtype=torch.bool), 7, VOCAB, generator)
    assert set(topk_ids.flatten().tolist()) <= set(rows.tolist()) and torch.equal(rows, rows.sort().values)
    sampled, _ = classification_loss(predicted, head, rows, topk_ids, topk_logp)
    assert sampled < full[0]  # fewer competitors in the softmax: a lower (biased) loss, never a higher one


def test_drafter_learns_from_cached_features_with_the_sampled_loss(tmp_path):
    from recipes.train_drafter import validate
    from recipes.training_objective import drafter_loss

    target = one_layer_target("qwen2", seed=6)
    target.requires_grad_(False)
    _, _, to_batch = _cached_batch(target)
    batch = to_batch(tmp_path / "shard.safetensors")
    assistant = DynaSpecAssistant.from_target(target)
    drafter = assistant.drafter
    optimizer = torch.optim.AdamW(drafter.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    before = validate(drafter, [batch])
    for _ in range(60):
        loss, metrics = drafter_loss(drafter, batch, noise=0.0, cls_weight=1.0, unroll=2, negatives=16,
                                     generator=generator)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = validate(drafter, [batch])
    # Full-vocabulary agreement with the target rises at both draft positions, although the loss saw few rows.
    assert after["val_top1_1"] > max(0.4, 10 * before["val_top1_1"]), (before, after)
    assert after["val_top1_2"] > max(0.4, 10 * before["val_top1_2"]), (before, after)
    assert metrics["rows"] < VOCAB and metrics["batch_tokens"] == int(batch.valid[:, 1:].sum())


def test_drafter_loss_weighs_regression_and_classification_as_asked(tmp_path):
    from recipes.training_objective import drafter_loss

    target = one_layer_target("qwen2", seed=6)
    _, _, to_batch = _cached_batch(target)
    batch = to_batch(tmp_path / "shard.safetensors")
    drafter = DynaSpecAssistant.from_target(target).drafter
    for reg_weight, cls_weight in [(1.0, 1.0), (0.1, 1.0), (0.0, 2.0)]:
        loss, m = drafter_loss(drafter, batch, noise=0.0, cls_weight=cls_weight, unroll=2, negatives=-1,
                               generator=torch.Generator().manual_seed(0), reg_weight=reg_weight)
        expected = sum(reg_weight * m[f"reg{d}"] + cls_weight * m[f"cls{d}"] for d in (1, 2)) / 2
        assert loss.item() == pytest.approx(expected, rel=1e-5)
        assert m["reg1"] > 0 and m["cls1"] > 0  # both terms are still reported when one is weighted out
    # Both terms weighted out: nothing trains (a regression term that ignored reg_weight would still push).
    drafter.zero_grad()
    drafter_loss(drafter, batch, noise=0.0, cls_weight=0.0, unroll=1, negatives=-1,
                 generator=torch.Generator().manual_seed(0), reg_weight=0.0)[0].backward()
    assert all(p.grad is None or not p.grad.any() for p in drafter.parameters())


def test_teacher_top_k_learns_the_targets_distribution_over_its_k_likeliest_tokens(tmp_path):
    """`teacher_top_k=1` is cross-entropy on the target's argmax: the loss of a batch whose top-k keeps all its
    mass on the first token; the default learns the renormalised top-k, which differs."""
    from dataclasses import replace

    from recipes.training_objective import drafter_loss

    target = one_layer_target("qwen2", seed=6)
    _, _, to_batch = _cached_batch(target)
    batch = to_batch(tmp_path / "shard.safetensors")
    drafter = DynaSpecAssistant.from_target(target).drafter
    common = dict(noise=0.0, cls_weight=1.0, unroll=2, negatives=-1, reg_weight=0.0)

    def loss(of_batch, **options):
        return drafter_loss(drafter, of_batch, generator=torch.Generator().manual_seed(0), **common, **options)[0].item()

    hard = batch.topk_logp.clone()
    hard[..., 1:] = -1e9
    assert loss(batch, teacher_top_k=1) == pytest.approx(loss(replace(batch, topk_logp=hard)), rel=1e-6)
    assert loss(batch, teacher_top_k=1) != pytest.approx(loss(batch), rel=1e-3)
    assert loss(batch, teacher_top_k=batch.topk_ids.shape[-1]) == loss(batch)


def test_router_objective_learns_a_learnable_mapping():
    torch.manual_seed(0)
    router = ClusterRouter(8, 8, num_clusters=5, router_hidden_size=32)
    embeds, hidden = torch.randn(512, 8), torch.randn(512, 8)
    labels = (embeds[:, 0] > 0).long() * 2 + (hidden[:, 1] > 0).long()  # 4 of 5 clusters used
    optimizer = torch.optim.Adam(router.parameters(), lr=1e-2)
    before = ClusterRouter.top_k_recall(router(embeds, hidden), labels, 1)
    for _ in range(200):
        loss = ClusterRouter.loss(router(embeds, hidden), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert ClusterRouter.top_k_recall(router(embeds, hidden), labels, 1) > max(0.9, before)
    labels[:10] = -1  # always-included tokens carry no cluster label and are ignored
    assert torch.isfinite(ClusterRouter.loss(router(embeds, hidden), labels))


def test_vocabtrim_ranking_counts_the_drafters_own_tokens(monkeypatch):
    from conftest import imitating_assistant

    import recipes.build_shortlists as build

    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
    prompts = [torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    monkeypatch.setattr(build, "conversations", lambda data=None, split="train": iter([("p", "r")] * 3))
    monkeypatch.setattr("hf_dynaspec.loading.encode_prompt", lambda tokenizer, text, chat: prompts.pop())
    drafted = []
    from hf_dynaspec.generation import hook

    original = hook.make_candidate_generator

    def spy(*args, **kwargs):  # remember each call's drafts to recount them independently
        generator = original(*args, **kwargs)
        drafted.append(assistant.stats)
        return generator

    monkeypatch.setattr(hook, "make_candidate_generator", spy)
    ranking = build.vocabtrim_ranking(assistant, target, None, num_prompts=3, max_new_tokens=12)
    all_drafts = torch.cat([t for stats in drafted for t in stats.draft_token_ids])
    assert len(all_drafts) == sum(stats.drafted for stats in drafted) > 0
    counts = torch.bincount(all_drafts, minlength=VOCAB)
    assert set(ranking.tolist()) == set(counts.nonzero().flatten().tolist())
    assert (counts[ranking].diff() <= 0).all()  # most drafted first
    assert not assistant.collect_draft_tokens


def test_router_examples_from_cached_features_pair_inputs_with_the_right_labels(tmp_path):
    from safetensors.torch import save_file

    from recipes.build_shortlists import budget_coverage, router_examples_from_features
    from recipes.training_objective import draft_pass

    target = one_layer_target("llama", seed=3)
    tensors, tokenized, _ = _cached_batch(target, num_sequences=2, length=12)
    save_file(tensors, str(tmp_path / "shard_00000.safetensors"))
    drafter = DynaSpecAssistant.from_target(target).drafter
    cluster_of_token = torch.randint(0, 5, (VOCAB,), generator=torch.Generator().manual_seed(1))
    embeds, feats, labels = router_examples_from_features([tmp_path], drafter, cluster_of_token, num_tokens=10**6)
    assert len(labels) == sum(2 * len(ids) - 3 for ids, _ in tokenized)
    ids = torch.tensor(tokenized[0][0])
    n = len(ids)
    hidden = tensors["hidden"][:n].float()
    top = tensors["topk_ids"][:n, 0].long()
    # first-position examples of sequence 0: (E(x_{t+1}), f_t) -> cluster of the target's token after x_{t+1}
    torch.testing.assert_close(embeds[: n - 1], drafter.embed(ids[1:]).float())
    torch.testing.assert_close(feats[: n - 1], hidden[:-1])
    assert torch.equal(labels[: n - 1], cluster_of_token[top[1:]])
    # second-position examples: (E(x_{t+2}), p_{t+1}) with p the drafter's own prediction
    with torch.no_grad():
        predicted = draft_pass(drafter, drafter.embed(ids[1:])[None], hidden[None, :-1])[0]
    torch.testing.assert_close(feats[n - 1 : 2 * n - 3], predicted[:-1])
    assert torch.equal(labels[n - 1 : 2 * n - 3], cluster_of_token[top[2:]])

    scores = torch.tensor([[0.0, 3.0, 2.0, 1.0], [5.0, 0.0, 0.5, 1.0], [0.0, 0.5, 0.0, 1.0]])
    result = budget_coverage(scores, torch.tensor([2, 1, -1]), torch.tensor([10, 20, 30, 40]), num_always=7, k=2)
    # rows: clusters {1, 2} = 50, {0, 3} = 50, {3, 1} = 60, plus 7 always-scored rows each
    assert result == pytest.approx({"coverage": 2 / 3, "avg_rows": (50 + 50 + 60) / 3 + 7})


def test_coverage_at_rows_counts_the_rows_the_rule_takes_before_the_token():
    from hf_dynaspec.modeling.shortlist import VocabClusters
    from recipes.build_shortlists import coverage_at_rows

    # clusters (already frequency-ordered): c0 = [3, 1, 2], c1 = [4, 5], c2 = [7, 6]; token 0 always scored
    clusters = VocabClusters(torch.tensor([3, 1, 2, 4, 5, 7, 6]), torch.tensor([0, 3, 5, 7]), torch.tensor([0]))
    scores = torch.tensor([[1.0, 2.0, 0.0]] * 3)  # ranking c1, c0, c2 for every example
    tokens = torch.tensor([2, 6, 0])  # rows taken before them: 2 + 2 = 4, 2 + 3 + 1 = 6, none (always)
    coverage = coverage_at_rows(scores, tokens, clusters, budgets=(1, 4, 5, 6, 7, 8))
    assert coverage == pytest.approx({1: 1 / 3, 4: 1 / 3, 5: 2 / 3, 6: 2 / 3, 7: 1.0})  # 8 > the 7 clustered rows


def test_router_examples_take_the_features_directories_in_turn(tmp_path):
    """A token budget smaller than the features must sample every directory, not the first-named one only."""
    from safetensors.torch import save_file

    from recipes.build_shortlists import interleaved_sequences, router_examples_from_features
    from recipes.training_data import feature_shards

    first, second = tmp_path / "tasks", tmp_path / "chat"
    first.mkdir(), second.mkdir()
    save_file(_cached_batch(one_layer_target("llama", seed=3), num_sequences=3, length=12)[0],
              str(first / "shard_00000.safetensors"))
    save_file(_cached_batch(one_layer_target("llama", seed=4), num_sequences=1, length=20)[0],
              str(second / "shard_00000.safetensors"))
    order = [len(s.input_ids) for s in interleaved_sequences(feature_shards([first, second]), fused=False)]
    assert order == [12, 20, 11, 10]  # in turn while both last, then the rest of the longer one

    drafter = DynaSpecAssistant.from_target(one_layer_target("llama", seed=3)).drafter
    cluster_of_token = torch.randint(0, 5, (VOCAB,), generator=torch.Generator().manual_seed(1))
    # a budget of two sequences: the first of each directory, not the first two of the first directory
    mixed = router_examples_from_features([first, second], drafter, cluster_of_token, num_tokens=2 * 12 - 3 + 1)
    alone = [router_examples_from_features([d], drafter, cluster_of_token, num_tokens=1) for d in (first, second)]
    for got, *parts in zip(mixed, *alone):
        torch.testing.assert_close(got, torch.cat(parts))
        assert not got.requires_grad  # plain data: the router's training must not backpropagate into the drafter


def test_self_distillation_prompt_mix_is_fixed_balanced_and_clean():
    from recipes.self_distill import prompt_mix, training_prompts

    first, rest = prompt_mix(code_fraction=0.35)
    assert (first, rest) == prompt_mix(code_fraction=0.35)  # same order every run: resuming is exact
    assert list(training_prompts(code_fraction=0.35)) == first + rest  # files of earlier runs keep their prompts
    rows = [json.loads(line) for line in (shared_data_dir() / "train" / "spec_train_prompts.jsonl").open()]
    flagged = {r["turns"][0] for r in rows if r.get("eval_10gram_overlap")}
    assert flagged and not flagged & {r["prompt"] for r in first + rest}
    code = sum(r["source"] == "gpteacher-code" for r in first)
    spec = sum(r["source"] != "gsm8k" for r in first)
    assert 0.25 < code / spec < 0.40
    assert 0 < sum(r["source"] == "gsm8k" for r in first) <= spec // 4
    assert {r["license"] for r in first} == {"Apache-2.0", "MIT"}  # each answer file row carries its prompt's licence
    # The rest is every other clean prompt, once: all of them are answered by a run to the end.
    gsm8k = [json.loads(line)["question"] for line in (shared_data_dir() / "train" / "gsm8k_train.jsonl").open()]
    clean = [r["turns"][0] for r in rows if not r.get("eval_10gram_overlap")] + gsm8k
    assert sorted(r["prompt"] for r in first + rest) == sorted(clean)


def test_self_distillation_samples_each_file_alike_when_resumed(tmp_path, monkeypatch):
    """--sample: the published settings reach generate(), and file N's draws do not depend on the files the run
    wrote before it (a killed run that resumes writes what an uninterrupted one would)."""
    import recipes.self_distill as self_distill
    from hf_dynaspec.zoo import published_sampling

    seen = []

    def fake_batch(model, tokenizer, prompts, max_new_tokens, max_prompt_tokens, capture_hidden, sampling):
        seen.append(sampling)
        return [self_distill.Answer(str(torch.randint(0, 10**9, ()).item()), [0, 1, 2], 1, num_generated=2)
                for _ in prompts]

    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": (None, None))
    monkeypatch.setattr(self_distill, "generate_batch", fake_batch)
    monkeypatch.setattr(self_distill, "prompt_lengths", lambda tokenizer, prompts, limit: [len(p) for p in prompts])
    common = ["--target", "qwen2.5-coder-0.5b-instruct", "--prompts-per-file", "3", "--batch-size", "2", "--sample",
              "--seed", "4", "--dtype", "fp32", "--batch-cost", "1000"]
    self_distill.main([*common, "--out", str(tmp_path / "whole"), "--max-prompts", "9"])
    self_distill.main([*common, "--out", str(tmp_path / "resumed"), "--max-prompts", "3"])
    self_distill.main([*common, "--out", str(tmp_path / "resumed"), "--max-prompts", "9"])
    assert seen and all(s == published_sampling("qwen2.5-coder-0.5b-instruct") for s in seen)
    files = [f"responses_{i:05d}.jsonl" for i in range(3)]
    whole = [(tmp_path / "whole" / f).read_text() for f in files]
    assert whole == [(tmp_path / "resumed" / f).read_text() for f in files]
    assert len(set(whole)) == 3  # and the files differ from each other: each has its own seed
    records = [json.loads(line) for line in (tmp_path / "whole" / "progress.log").read_text().splitlines()]
    assert [(r["file"], r["answer_tokens"], r["sample"]) for r in records] == [(i, 6, True) for i in range(3)]
    # The directory still reads as user data (`--data DIR`): only the answers are rows.
    from recipes.user_data import user_prompts

    assert len(list(user_prompts(tmp_path / "whole"))) == 9


@pytest.mark.parametrize("published", [
    {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1},  # Qwen2.5-Coder
    {"do_sample": True, "top_k": 64, "top_p": 0.95},  # Gemma 3
    {"do_sample": True, "temperature": 1.3, "top_k": 40},  # a top-k alone
])
def test_self_distillation_samples_what_transformers_samples(published, monkeypatch):
    """--sample's fast path (`sparse_sampling`: `KeptDraw` under greedy selection) draws the samples transformers'
    own sampling draws from the same seed when its draw, torch.multinomial, is the package's (the same law:
    tests/test_enumeration.py): the same processed distribution at every step, so the same law of answers."""
    from conftest import one_layer_target

    import hf_dynaspec.sampling as sampling
    from recipes.sampled_answers import KeptDraw, sparse_sampling

    # A vocabulary over 8x the kept tokens, so that the package's race runs over them only in both calls.
    target = one_layer_target("qwen2", seed=3, vocab_size=1024)
    prompts = torch.randint(0, target.config.vocab_size, (3, 6), generator=torch.Generator().manual_seed(1))
    fast = sparse_sampling(published, target.generation_config)
    draw = fast["logits_processor"][-1]
    assert fast["do_sample"] is False and isinstance(draw, KeptDraw)
    # Without a top-k transformers fills in its own default: its own sampling then (as with warpers of other kinds).
    assert sparse_sampling({"do_sample": True, "top_p": 0.9}, target.generation_config) == {"do_sample": True, "top_p": 0.9}

    def generated(settings):
        torch.manual_seed(11)
        return target.generate(prompts, attention_mask=torch.ones_like(prompts), **settings, max_new_tokens=40,
                               pad_token_id=0)

    drawn = generated(fast)
    monkeypatch.setattr(torch, "multinomial", lambda probs, num_samples: sampling.sample(probs))
    assert torch.equal(drawn, generated(published))
    # The check sees the distribution: a warper left out (the temperature, the top-p or the top-k) draws others.
    head = list(fast["logits_processor"][:-1])  # the temperature, where there is one
    variants = [head + [KeptDraw(target.config.vocab_size, draw.top_p)]]  # the top-k left out
    variants += [head + [KeptDraw(draw.top_k)]] if draw.top_p < 1.0 else []  # the top-p left out
    variants += [[draw]] if head else []  # the temperature left out
    for processors in variants:
        assert not torch.equal(drawn, generated({**fast, "logits_processor": processors}))


def test_the_kept_draw_keeps_what_transformers_top_k_and_top_p_keep():
    """`KeptDraw.kept`: the probabilities transformers' top-k then top-p leave (softmax of the processed row), on
    random rows, rows whose k-th value is tied (every tie kept) and rows whose top-p cut falls between equal scores
    (transformers' unstable sort picks which; the same number of them and the same mass here)."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper

    from recipes.sampled_answers import KeptDraw

    generator = torch.Generator().manual_seed(0)
    random_rows = torch.randn(16, 500, generator=generator) * 3
    tied_kth = torch.randint(0, 12, (16, 500), generator=generator).float()  # many entries share the k-th value
    few_tied = random_rows.clone()  # three entries past the 20th share its value: ties a short read sees
    order = few_tied.argsort(dim=-1, descending=True)
    few_tied.scatter_(1, order[:, 20:23], few_tied.gather(1, order[:, 19:20]).expand(-1, 3))
    for scores, top_k, top_p in [(random_rows, 20, 0.8), (random_rows, 64, 0.95), (random_rows, 40, 1.0),
                                 (random_rows, 20, 1e-9),  # the most likely token kept however small top_p
                                 (tied_kth, 20, 1.0), (tied_kth, 30, 0.5), (few_tied, 20, 1.0), (few_tied, 20, 0.9)]:
        processed = TopKLogitsWarper(top_k)(None, scores.clone())
        if top_p < 1.0:
            processed = TopPLogitsWarper(top_p)(None, processed)
        expected = processed.softmax(dim=-1)
        ids, probs = KeptDraw(top_k, top_p).kept(scores)
        got = torch.zeros_like(expected).scatter_(1, ids, probs)
        if scores is random_rows:
            torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
        else:  # the same mass on the same number of tokens of each score
            assert torch.equal((got > 0).sum(-1), (expected > 0).sum(-1))
            for row in range(scores.shape[0]):
                for value in scores[row].unique():
                    at = scores[row] == value
                    torch.testing.assert_close(got[row, at].sum(), expected[row, at].sum(), rtol=1e-6, atol=1e-7)
        if scores is not random_rows:
            assert ((scores >= scores.topk(top_k).values[:, -1:]).sum(-1) > top_k).all()  # the ties happened


def test_self_distillation_picks_bf16_only_where_the_cpu_multiplies_it_natively(tmp_path, monkeypatch):
    """--dtype auto loads the target in the precision the host computes natively; an explicit choice stands."""
    import recipes.self_distill as self_distill
    import recipes.training_schedule as schedule

    loaded = []
    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": loaded.append(dtype) or (None, None))
    common = ["--target", "x", "--out", str(tmp_path), "--max-prompts", "0", "--device", "cpu"]
    for native in (True, False):
        monkeypatch.setattr(schedule, "native_cpu_bf16", lambda native=native: native)
        self_distill.main(common)
        self_distill.main([*common, "--dtype", "fp16"])
    assert loaded == ["bf16", "fp16", "fp32", "fp16"]


def test_self_distillation_refuses_to_sample_without_published_settings():
    from types import SimpleNamespace

    from transformers import GenerationConfig

    from recipes.self_distill import sampling_settings

    greedy = SimpleNamespace(generation_config=GenerationConfig())
    with pytest.raises(SystemExit, match="does not sample"):
        sampling_settings("my-org/my-model", greedy)
    published = {"do_sample": True, "temperature": 0.6, "top_p": 0.9, "top_k": 40, "repetition_penalty": 1.05}
    sampled = SimpleNamespace(generation_config=GenerationConfig(**published))
    assert sampling_settings("my-org/my-model", sampled) == published


def test_self_distillation_first_file_starts_at_that_files_prompts(tmp_path, monkeypatch):
    """`--first-file N` writes files N, N+1, ... holding the same prompts those files hold in a run from 0."""
    import recipes.self_distill as self_distill

    monkeypatch.setattr(self_distill, "load_target", lambda name, dtype, device="cpu": (None, None))
    monkeypatch.setattr(self_distill, "generate_batch", lambda model, tokenizer, prompts, *args, **kwargs:
                        [self_distill.Answer(p[::-1], [0, 1, 2], 1) for p in prompts])
    monkeypatch.setattr(self_distill, "prompt_lengths", lambda tokenizer, prompts, limit: [len(p) for p in prompts])
    self_distill.main(["--target", "x", "--out", str(tmp_path), "--first-file", "2", "--prompts-per-file", "3",
                       "--max-prompts", "12", "--batch-size", "2", "--batch-cost", "1000"])
    assert sorted(p.name for p in tmp_path.glob("responses_*")) == ["responses_00002.jsonl", "responses_00003.jsonl"]
    expected = list(self_distill.training_prompts())[6:12]
    for index, rows in ((2, expected[:3]), (3, expected[3:])):
        written = [json.loads(line) for line in (tmp_path / f"responses_{index:05d}.jsonl").read_text().splitlines()]
        assert sorted(r["prompt"] for r in written) == sorted(r["prompt"] for r in rows)
        assert all(r["response"] == r["prompt"][::-1] and r["license"] for r in written)


def test_self_distilled_responses_feed_build_features(tmp_path):
    from recipes.conversations import self_distilled

    (tmp_path / "responses_00001.jsonl").write_text(json.dumps({"prompt": "b", "response": "B", "source": "x"}) + "\n")
    (tmp_path / "responses_00000.jsonl").write_text(
        json.dumps({"prompt": "a", "response": "A", "source": "x"}) + "\n"
        + json.dumps({"prompt": "empty", "response": "", "source": "x"}) + "\n")
    assert list(self_distilled(tmp_path)) == [("a", "A"), ("b", "B")]  # file order, empty answers dropped
    (tmp_path / "responses_00012.jsonl").write_text(json.dumps({"prompt": "c", "response": "C", "source": "x"}) + "\n")
    assert list(self_distilled(tmp_path, first_file=1)) == [("b", "B"), ("c", "C")]
    assert list(self_distilled(tmp_path, first_file=1, last_file=1)) == [("b", "B")]
    assert list(self_distilled(tmp_path, first_file=2)) == [("c", "C")]  # by number: 12 sorts after 2
    with pytest.raises(FileNotFoundError, match="numbered 13-"):
        list(self_distilled(tmp_path, first_file=13))
    with pytest.raises(ValueError, match="before first_file"):
        list(self_distilled(tmp_path, first_file=2, last_file=1))
    with pytest.raises(FileNotFoundError, match="self_distill"):
        list(self_distilled(tmp_path / "none"))


def test_build_features_refuses_a_file_range_without_self_distilled_conversations(tmp_path, capsys):
    from recipes.build_features import main

    with pytest.raises(SystemExit):
        main(["--target", "unused", "--out", str(tmp_path / "f"), "--first-file", "3"])
    assert "need --conversations" in capsys.readouterr().err
    assert not (tmp_path / "f").exists()  # refused before loading anything or writing


def test_build_features_refuses_to_resume_shards_of_another_file_range(tmp_path):
    from recipes.build_features import check_resumable, shard_path

    out = tmp_path / "f"
    meta = {"conversations": "data/sd", "first_file": 11}
    check_resumable(out, meta)  # nothing there yet
    out.mkdir()
    (out / "meta.json").write_text(json.dumps({"conversations": "data/sd"}))  # written before --first-file existed
    shard_path(out, 0).write_bytes(b"")
    with pytest.raises(SystemExit, match="first_file=0, not 11"):
        check_resumable(out, meta)
    check_resumable(out, {"conversations": "data/sd", "first_file": 0})  # the same stream resumes
    with pytest.raises(SystemExit, match="conversations"):
        check_resumable(out, {"conversations": "data/other", "first_file": 0})
    with pytest.raises(SystemExit, match=r"fused_hidden_state_ids=None, not \[2, 5\]"):
        check_resumable(out, {"conversations": "data/sd", "first_file": 0, "fused_hidden_state_ids": [2, 5]})


@pytest.mark.real_model
def test_batched_self_distillation_answers_equal_single_stream_greedy():
    """Left padding must not change the answers, nor the hidden states captured during generation (fp32)."""
    from hf_dynaspec import zoo
    from hf_dynaspec.bench.prompts import encode_prompt
    from hf_dynaspec.bench.runner import load_target
    from recipes.build_features import target_hidden
    from recipes.self_distill import answer_batch, generate_batch

    if zoo.cached_path("qwen2.5-coder-0.5b-instruct") is None:
        pytest.fail("qwen2.5-coder-0.5b-instruct is not cached: run `hf-dynaspec models fetch` first")
    model, tokenizer = load_target("qwen2.5-coder-0.5b-instruct", "fp32")
    prompts = ["Say hi.", "Write a Python function that returns the square of a number, with a docstring."]
    answers = answer_batch(model, tokenizer, prompts, max_new_tokens=12, max_prompt_tokens=512)
    captured = generate_batch(model, tokenizer, prompts, max_new_tokens=12, max_prompt_tokens=512,
                              capture_hidden=True)
    eos = model.generation_config.eos_token_id
    finished = []
    for prompt, answer, record in zip(prompts, answers, captured):
        ids = encode_prompt(tokenizer, prompt, True)
        single = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12)
        assert answer == record.text == tokenizer.decode(single[0, ids.shape[1]:], skip_special_tokens=True).strip()
        # The sequence stops before its last token (EOS or the 12th), which was never fed back.
        generated = single[0, ids.shape[1]:].tolist()
        finished.append(eos in generated)
        generated = generated[: generated.index(eos) + 1] if eos in generated else generated
        assert record.token_ids == ids[0].tolist() + generated[:-1] and record.response_start == ids.shape[1]
        # Captured hidden states equal those of one unpadded forward over the sequence.
        expected = target_hidden(model, [record.token_ids])[0]
        torch.testing.assert_close(record.hidden, expected, atol=2e-3, rtol=2e-3)
    assert finished == [True, False]  # one answer ends at EOS inside the batch, the other at the length cap


def test_batch_schedule_follows_each_epochs_own_batch_count():
    from recipes.training_data import BatchSchedule, Sequence, make_batches

    generator = torch.Generator().manual_seed(3)
    empty = torch.zeros(0)
    sequences = [Sequence(torch.zeros(int(n), dtype=torch.long), empty, empty, empty, empty)
                 for n in torch.randint(5, 60, (200,), generator=generator)]
    epochs = [make_batches(sequences, 256, seed) for seed in (1, 2)]
    # Packing follows the shuffle; a shorter second epoch is what a count fixed from the first runs past.
    assert len(epochs[1]) < len(epochs[0])
    for processes in (1, 2):
        schedules = [BatchSchedule(sequences, 256, seed=1, num_processes=processes) for _ in range(processes)]
        steps = schedules[0].total_steps(2.0)
        assert steps == sum(len(e) // processes for e in epochs)
        assert schedules[0].total_steps(1.5) == len(epochs[0]) // processes + -(-(len(epochs[1]) // processes) // 2)
        taken = [schedules[p].batch(step, p) for step in range(steps) for p in range(processes)]
        expected = [b for e in epochs for b in e[: len(e) // processes * processes]]
        assert [[id(s) for s in b] for b in taken] == [[id(s) for s in b] for b in expected]


def test_resume_restores_a_checkpoint_whose_empty_buffers_safetensors_dropped(tmp_path):
    from accelerate import Accelerator
    from conftest import tiny_target

    from recipes.train_drafter import resume_from

    target = tiny_target("qwen2")
    assistant = DynaSpecAssistant.from_target(target)
    assert sum(1 for t in assistant.state_dict().values() if t.numel() == 0) > 1  # unused shortlist buffers
    accelerator = Accelerator(cpu=True)
    prepared = accelerator.prepare(assistant)
    accelerator.save_state(str(tmp_path / "checkpoint"))
    saved = {k: v.clone() for k, v in assistant.state_dict().items()}
    with torch.no_grad():
        for p in assistant.drafter.parameters():
            p.zero_()
    resume_from(accelerator, tmp_path / "checkpoint", prepared)
    for key, value in assistant.state_dict().items():
        assert torch.equal(value, saved[key]), key
    other = DynaSpecAssistant.from_target(target, drafter_kind="eagle3")  # other weights: must be refused
    with pytest.raises(RuntimeError, match="does not hold"):
        resume_from(accelerator, tmp_path / "checkpoint", other)


def test_package_assistant_writes_bf16_weights_card_and_defaults(tmp_path):
    """Packaging: weights halve to bf16 and reload unchanged up to bf16 rounding, the chosen defaults land in the
    config, and the card carries the data description, commands and bench results given."""
    from safetensors import safe_open

    from recipes.package_assistant import main as package

    source = DynaSpecAssistant.from_target(one_layer_target("qwen2"))
    source.save_pretrained(tmp_path / "src")
    (tmp_path / "commands.txt").write_text("python -m recipes.train_drafter --target t\n")
    bench = {"target": "t", "methods": {"dynaspec": {"tau": 1.5, "speedup": 1.1}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    package(["--assistant", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--prompt-lookup", "3",
             "--commands", str(tmp_path / "commands.txt"), "--bench", str(tmp_path / "bench.json"),
             "--data", "the 1.5B's features over the 0.5B's answers"])
    with safe_open(tmp_path / "out" / "model.safetensors", "pt") as handle:
        dtypes = {handle.get_tensor(key).dtype for key in handle.keys() if handle.get_tensor(key).is_floating_point()}
    assert dtypes == {torch.bfloat16}
    packaged = DynaSpecAssistant.from_pretrained(tmp_path / "out")
    assert packaged.generation_config.prompt_lookup_num_tokens == 3
    for (name, before), after in zip(source.state_dict().items(), packaged.state_dict().values()):
        assert torch.equal(before.to(torch.bfloat16).to(after.dtype), after), name
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert card["training"]["data"] == "the 1.5B's features over the 0.5B's answers"
    assert card["training"]["commands"] == "python -m recipes.train_drafter --target t"
    assert card["results"] == bench
    assert "python -m recipes.train_drafter --target t" in (tmp_path / "out" / "README.md").read_text()


def test_package_assistant_counts_each_training_shard_once(tmp_path):
    """The card's feature summary follows train_drafter's --features: a shard named before its directory is
    counted in that directory, once."""
    from safetensors.torch import save_file

    from recipes.package_assistant import feature_summaries

    target = one_layer_target("qwen2", seed=6)
    tokens = {}
    for directory, shards in [("new", 2), ("old", 1)]:
        (tmp_path / directory).mkdir()
        (tmp_path / directory / "meta.json").write_text(json.dumps({"conversations": directory}))
        for index in range(shards):
            tensors, tokenized, _ = _cached_batch(target, num_sequences=3, length=12 + index)
            save_file(tensors, str(tmp_path / directory / f"shard_{index:05d}.safetensors"))
            tokens.setdefault(directory, []).append(sum(len(ids) for ids, _ in tokenized))
    summaries = feature_summaries([tmp_path / "new" / "shard_00001.safetensors", tmp_path / "new", tmp_path / "old"])
    assert summaries == [
        {"shards": 2, "sequences": 6, "tokens": sum(tokens["new"]), "conversations": "new"},
        {"shards": 1, "sequences": 3, "tokens": tokens["old"][0], "conversations": "old"},
    ]


def test_package_assistant_takes_its_own_rows_from_a_run_of_several_assistants(tmp_path):
    from recipes.package_assistant import main as package

    DynaSpecAssistant.from_target(one_layer_target("qwen2")).save_pretrained(tmp_path / "src")
    bench = {"target": "t", "assistant": {"v6": "a", "v7": "b"},
             "methods": {"vanilla": {"tau": None}, "v6/dynaspec": {"tau": 1.3}, "v7/dynaspec": {"tau": 1.4}}}
    (tmp_path / "bench.json").write_text(json.dumps(bench))
    args = ["--assistant", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--bench", str(tmp_path / "bench.json")]
    with pytest.raises(SystemExit):  # which rows are this artifact's is ambiguous without a label
        package(args)
    assert not (tmp_path / "out").exists()
    package(args + ["--bench-label", "v7"])
    card = json.loads((tmp_path / "out" / "card.json").read_text())
    assert card["results"]["methods"] == {"vanilla": {"tau": None}, "dynaspec": {"tau": 1.4}}
    assert card["results"]["assistant"] == "b" and card["results"]["other_assistants"] == {"v6": "a"}
    assert "| dynaspec | 1.40 |" in (tmp_path / "out" / "README.md").read_text()


def test_validation_at_draft_position_three_feeds_back_twice_and_answers_only_agrees(tmp_path):
    from recipes.train_drafter import validate
    from recipes.training_objective import draft_pass

    target, batch, drafter, start = _one_sequence_batch(tmp_path)
    with torch.no_grad():  # position 3: two passes on the drafter's own features, tokens teacher-forced
        embeds = drafter.embed(batch.input_ids[:, 1:])
        first = draft_pass(drafter, embeds, batch.hidden[:, :-1])
        second = draft_pass(drafter, embeds[:, 1:], first[:, :-1])
        third = draft_pass(drafter, embeds[:, 2:], second[:, :-1])
        guesses = (third @ target.lm_head.weight.T).argmax(-1)[0]  # guess for the token at t + 3
    agree = torch.zeros(len(guesses), dtype=torch.bool)
    agree[::2] = True
    batch.topk_ids[0, 3:, 0] = torch.where(agree, guesses, (guesses + 1) % VOCAB)
    metrics = validate(drafter, [batch], depths=3)
    assert metrics["val_top1_3"] == pytest.approx(agree.float().mean().item())
    assert metrics["val_response_top1_3"] == pytest.approx(agree[start - 3 :].float().mean().item())
    answers = validate(drafter, [batch], depths=3, answers_only=True)
    for depth in (1, 2, 3):
        assert answers[f"val_top1_{depth}"] == answers[f"val_response_top1_{depth}"] == metrics[f"val_response_top1_{depth}"]


@pytest.mark.parametrize("given, message", [
    (["--clusters", "0"], "--clusters must be at least 1, got 0"),
    (["--router-tokens", "-5"], "--router-tokens must be at least 1, got -5"),
    (["--core-frequent", "-1"], "--core-frequent must be 0 or more"),
    (["--features", "{tmp}/no-features"], "--features: no such directory"),
    (["--out", "{tmp}/notes.txt"], "is a file: name a directory"),
    (["--clusters", "500"], "--clusters 500 is more than the target's 97 tokens"),
])
def test_build_shortlists_refuses_bad_arguments_and_writes_nothing(tmp_path, monkeypatch, capsys, given, message):
    """The recipe run directly: what cannot give shortlists stops it (argparse's exit 2, the option and the fix
    named) before anything is written, the clusters' count checked against the target's vocabulary."""
    import recipes.build_shortlists as build

    target = one_layer_target("llama")
    loads = []
    monkeypatch.setattr(build, "load_target", lambda *args: loads.append(args) or (target, None))
    monkeypatch.setattr(build, "conversations", lambda data=None, split="train": iter([]))
    monkeypatch.setattr(build, "tokenize", lambda *args: ([], 0))
    (tmp_path / "notes.txt").write_text("mine")
    argv = ["--target", "tiny", "--out", str(tmp_path / "out"), *[arg.format(tmp=tmp_path) for arg in given]]
    with pytest.raises(SystemExit) as stopped:
        build.main(argv)
    assert stopped.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert bool(loads) == (given[-1] == "500"), "the target is loaded only when the vocabulary is what is checked"


def _cut_cost(lengths, spans, batch_cost):
    return sum((end - start) * lengths[end - 1] + batch_cost for start, end in spans)


def _all_cuts(n, batch_size):
    """Every way to cut n sorted prompts into consecutive batches of at most batch_size."""
    if n == 0:
        yield []
        return
    for size in range(1, min(batch_size, n) + 1):
        for rest in _all_cuts(n - size, batch_size):
            yield [(0, size)] + [(start + size, end + size) for start, end in rest]


def test_self_distillation_batches_are_the_cheapest_cut_of_each_file():
    """padded_batches is exact: against every cut of small files, its batches cover the file in order, hold at most
    --batch-size prompts and cost no more (padded prompt tokens plus the batch cost) than the best cut."""
    from recipes.self_distill import padded_batches

    generator = random.Random(0)
    for _ in range(200):
        n, batch_size = generator.randint(1, 8), generator.randint(1, 4)
        lengths = sorted(generator.choice([3, 5, 60, 70, 200, 512]) for _ in range(n))
        batch_cost = generator.choice([0, 10, 300, 5000])
        spans = padded_batches(lengths, batch_size, batch_cost)
        assert [start for start, _ in spans] == [0] + [end for _, end in spans[:-1]] and spans[-1][1] == n
        assert all(0 < end - start <= batch_size for start, end in spans)
        best = min(_cut_cost(lengths, cut, batch_cost) for cut in _all_cuts(n, batch_size))
        assert _cut_cost(lengths, spans, batch_cost) == best


def test_self_distillation_gives_one_long_prompt_a_batch_of_its_own_only_when_that_pays():
    from recipes.self_distill import padded_batches

    lengths = [60] * 63 + [512]
    assert padded_batches(lengths, 64, 2000) == [(0, 63), (63, 64)]  # 63 x 452 padded tokens saved > 2,000
    assert padded_batches(lengths, 64, 40000) == [(0, 64)]  # a batch dearer than the padding: one batch
    assert padded_batches([60] * 64, 64, 0) == [(0, 64)]  # nothing to save: no cut
    assert len(padded_batches([60] * 70, 64, 1)) == 2  # more prompts than a batch holds: two batches, not more


def test_self_distillation_prices_a_batch_as_its_decoding_steps_over_a_prefill_token(monkeypatch):
    """measured_batch_cost = max_new_tokens x (one one-row decoding step) / (one prefill token), on a clock the fake
    model advances: 1 ms per prefill token, 50 ms per decoding step; the first two calls of each kind also set
    kernels up (10 s each), which a median of three alone would keep."""
    from types import SimpleNamespace

    import recipes.self_distill as self_distill

    clock, calls = [0.0], []

    class Clocked:
        def get_input_embeddings(self):
            return SimpleNamespace(weight=torch.zeros(1))

        def forward(self, ids, use_cache=True, cache=None, logits_to_keep=None):
            calls.append(cache is not None)
            clock[0] += (0.05 if cache is not None else 0.001 * ids.numel()) + 10 * (calls.count(calls[-1]) <= 2)
            return {"logits": torch.zeros(ids.shape[0], ids.shape[1], 3), "cache": "cache"}

        __call__ = forward

    monkeypatch.setattr(self_distill.time, "perf_counter", lambda: clock[0])
    assert self_distill.measured_batch_cost(Clocked(), 192) == pytest.approx(192 * 50)
    calls[:] = []
    assert self_distill.measured_batch_cost(Clocked(), 96, rows=2, length=16) == pytest.approx(96 * 50)
    monkeypatch.undo()
    # A real model's forward (ids inside its vocabulary, its cache under either name, the last logits only).
    assert 0 < self_distill.measured_batch_cost(one_layer_target("qwen2"), 8) < float("inf")


def test_self_distillation_picks_the_smallest_batch_within_10_percent_of_the_fastest(monkeypatch):
    """measured_batch_size on a clock the fake model advances (decoded tokens/s 80 / 133 / 160 / 168 at batch
    8 / 16 / 32 / 64: 32 is within 10% of 64's; the process's first steps, slow, are not batch 8's rate), and its
    prefills keep the last logits only: full ones at batch 64 x 320 tokens are 6 GB of bf16 on a 152k vocabulary."""
    from types import SimpleNamespace

    import recipes.self_distill as self_distill

    clock, steps, step_seconds = [0.0], [], {8: 0.1, 16: 0.12, 32: 0.2, 64: 64 / 168}

    class Clocked:
        def get_input_embeddings(self):
            return SimpleNamespace(weight=torch.zeros(1))

        def forward(self, ids, use_cache=True, cache=None, logits_to_keep=None):
            if cache is None:
                assert logits_to_keep == 1, "a prefill computed every position's logits"
            else:  # the process's first 4 steps also set kernels up (10 s each)
                clock[0] += step_seconds[ids.shape[0]] + 10 * (len(steps) < 4)
                steps.append(ids.shape[0])
            return SimpleNamespace(logits=torch.zeros(ids.shape[0], 1, 3), get={"cache": "cache"}.get)

        __call__ = forward

    monkeypatch.setattr(self_distill.time, "perf_counter", lambda: clock[0])
    batch, rates = self_distill.measured_batch_size(Clocked())
    assert batch == 32 and rates == pytest.approx({8: 80, 16: 16 / 0.12, 32: 160, 64: 168})
    step_seconds[32], steps[:] = 0.25, []  # 128 tokens/s: now only 64 is within 10% of the best
    assert self_distill.measured_batch_size(Clocked())[0] == 64
    monkeypatch.undo()
    batch, rates = self_distill.measured_batch_size(one_layer_target("qwen2"), (2, 4), context=16)
    assert batch in (2, 4) and all(0 < rate < float("inf") for rate in rates.values())


@pytest.mark.parametrize("given", ["-1", "cheap", "nan"])
def test_self_distillation_refuses_a_batch_cost_that_is_no_price(given, capsys):
    from recipes.self_distill import parse_arguments

    with pytest.raises(SystemExit):
        parse_arguments(["--target", "x", "--out", "o", "--batch-cost", given])
    assert "--batch-cost" in capsys.readouterr().err
    assert parse_arguments(["--target", "x", "--out", "o", "--batch-cost", "0"]).batch_cost == 0.0
