"""Eagle drafters that fuse several target layers into their features (`fused_hidden_state_ids`)."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, assisted_generate, imitating_assistant, one_layer_target, plain_generate, tiny_target

from hf_dynaspec import DynaSpecAssistant, DynaSpecConfig, speculative_generate
from hf_dynaspec.modeling.assistant import AssistantMismatchError


def _prompt(seed: int, length: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(seed))


def _shard(target, fused_ids, num_sequences=3, length=24, topk=8):
    from recipes.build_features import shard_tensors

    generator = torch.Generator().manual_seed(0)
    tokenized = [(torch.randint(0, VOCAB, (length - 3 * i,), generator=generator).tolist(), 4)
                 for i in range(num_sequences)]
    return shard_tensors(target, tokenized, topk, tokens_per_batch=48, fused_ids=fused_ids), tokenized


def _save_features(directory, tensors, fused_ids):
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    save_file(tensors, str(directory / "shard_00000.safetensors"))
    (directory / "meta.json").write_text(json.dumps({"fused_hidden_state_ids": fused_ids}))
    return directory


def test_shards_keep_the_selected_hidden_states_side_by_side():
    target = tiny_target("qwen2", seed=2)  # 4 layers: hidden_states[0..4]
    tensors, tokenized = _shard(target, fused_ids=[3, 1])
    offsets = tensors["offsets"].tolist()
    dim = target.config.hidden_size
    for row, (ids, _) in enumerate(tokenized):  # run in padded batches; each sequence must read as if alone
        with torch.no_grad():
            states = target(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        fused = tensors["fused_hidden"][offsets[row] : offsets[row + 1]].float()
        assert fused.shape == (len(ids), 2 * dim)
        torch.testing.assert_close(fused[:, :dim], states[3][0].to(torch.bfloat16).float())  # the given order
        torch.testing.assert_close(fused[:, dim:], states[1][0].to(torch.bfloat16).float())
        torch.testing.assert_close(tensors["hidden"][offsets[row] : offsets[row + 1]].float(),
                                   states[-1][0].to(torch.bfloat16).float())
    plain, _ = _shard(target, fused_ids=None)
    assert "fused_hidden" not in plain and torch.equal(plain["hidden"], tensors["hidden"])


def test_target_forward_selection_returns_the_fused_layers_then_the_last(family):
    target = tiny_target(family, seed=1)
    assistant = DynaSpecAssistant.from_target(target, fused_hidden_state_ids=[2, 0])
    ids = _prompt(0, 9)
    with torch.no_grad():
        every = target(input_ids=ids, output_hidden_states=True).hidden_states
        selected = target(input_ids=ids, output_hidden_states=assistant.drafter.hidden_state_selection()).hidden_states
    features = assistant.drafter.select_target_hidden(selected)
    torch.testing.assert_close(features, torch.cat([every[2], every[0], every[-1]], dim=-1))


def test_pass_through_fusion_changes_no_draft_and_trained_fusion_stays_exact(tmp_path, family):
    target = one_layer_target(family)
    plain = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
    plain.save_pretrained(tmp_path / "plain")
    fused = DynaSpecAssistant.from_pretrained(tmp_path / "plain", target=target).add_feature_fusion([0])
    ids = _prompt(5, 7)
    expected = plain_generate(target, ids, max_new_tokens=30, do_sample=False)
    for assistant in (plain, fused):
        assert torch.equal(assisted_generate(target, assistant, ids, max_new_tokens=30, do_sample=False), expected)
    # A pass-through fuse drafts exactly what the drafter drafted before.
    assert (fused.stats.drafted, fused.stats.accepted) == (plain.stats.drafted, plain.stats.accepted)

    with torch.no_grad():  # now the fused layer (the embedding output) really enters the feature
        fused.drafter.fuse.weight[:, :32].normal_(0, 0.5, generator=torch.Generator().manual_seed(0))
    fused.save_pretrained(tmp_path / "fused")
    loaded = DynaSpecAssistant.from_pretrained(tmp_path / "fused", target=target)
    assert loaded.config.fused_hidden_state_ids == [0]
    assert torch.equal(loaded.drafter.fuse.weight, fused.drafter.fuse.weight)
    for seed in range(3):
        ids = _prompt(10 + seed, 6)
        expected = plain_generate(target, ids, max_new_tokens=24, do_sample=False)
        assert torch.equal(assisted_generate(target, loaded, ids, max_new_tokens=24, do_sample=False), expected)
        fused_chain = (loaded.stats.drafted_per_pass, loaded.stats.accepted_per_pass)
        assert torch.equal(assisted_generate(target, plain, ids, max_new_tokens=24, do_sample=False), expected)
        tree = target.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=speculative_generate, trees=True, drafter=loaded,
                               max_new_tokens=24, do_sample=False)
        assert torch.equal(tree, expected)
    # On the last prompt the fused drafter drafted differently from the plain one: the fused layer is read.
    assert fused_chain != (plain.stats.drafted_per_pass, plain.stats.accepted_per_pass)


def test_fusion_options_are_checked():
    with pytest.raises(ValueError, match="eagle3 drafter fuses its aux_hidden_state_layer_ids"):
        DynaSpecConfig(drafter_kind="eagle3", draft_vocab_size=50, aux_hidden_state_layer_ids=[1, 2, 3],
                       fused_hidden_state_ids=[1])
    with pytest.raises(ValueError, match="distinct non-negative"):
        DynaSpecConfig(fused_hidden_state_ids=[2, 2])
    target = one_layer_target("llama")  # hidden_states[0..1]
    with pytest.raises(AssistantMismatchError, match=r"reads hidden_states\[5\]"):
        DynaSpecAssistant.from_target(target, fused_hidden_state_ids=[5])
    assistant = DynaSpecAssistant.from_target(target)
    with pytest.raises(AssistantMismatchError, match="reads hidden_states"):
        assistant.add_feature_fusion([7])
    assert assistant.config.fused_hidden_state_ids is None and not hasattr(assistant.drafter, "fuse")
    assistant.add_feature_fusion([1])
    with pytest.raises(ValueError, match="already fuses"):
        assistant.add_feature_fusion([0])


def test_training_loss_sees_the_fused_layers_and_learns(tmp_path):
    from recipes.train_drafter import validate
    from recipes.training_data import collate, feature_shards, load_sequences
    from recipes.training_objective import drafter_loss

    target = tiny_target("qwen2", seed=4, num_hidden_layers=2)
    target.requires_grad_(False)
    tensors, _ = _shard(target, fused_ids=[1])
    directory = _save_features(tmp_path / "fused", tensors, [1])
    batch = collate(load_sequences(feature_shards([directory], [1])[0], fused=True), "cpu")
    plain_batch = collate(load_sequences(directory / "shard_00000.safetensors"), "cpu")
    assert plain_batch.fused is None and batch.fused.shape[-1] == target.config.hidden_size

    plain = DynaSpecAssistant.from_target(target)
    fused = DynaSpecAssistant.from_target(target, fused_hidden_state_ids=[1])
    fused.drafter.load_state_dict(plain.drafter.state_dict(), strict=False)  # same layer and fc; fuse passes f on

    def loss_of(assistant, batch, seed=0):
        return drafter_loss(assistant.drafter, batch, noise=0.0, cls_weight=1.0, unroll=2, negatives=-1,
                            generator=torch.Generator().manual_seed(seed))[0]

    torch.testing.assert_close(loss_of(fused, batch), loss_of(plain, plain_batch))
    with pytest.raises(ValueError, match="fused_hidden"):
        loss_of(fused, plain_batch)

    optimizer = torch.optim.AdamW(fused.drafter.parameters(), lr=3e-3)
    fuse_before = fused.drafter.fuse.weight.detach().clone()
    before = validate(fused.drafter, [batch])
    for step in range(40):
        loss = loss_of(fused, batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = validate(fused.drafter, [batch])
    assert after["val_top1_1"] > before["val_top1_1"] + 0.2, (before, after)
    # The fused layer's block gets gradient: the loss reads it.
    dim = target.config.hidden_size
    assert (fused.drafter.fuse.weight[:, :dim] - fuse_before[:, :dim]).abs().max() > 1e-3


def test_fused_features_must_match_the_drafter(tmp_path):
    from recipes.training_data import feature_shards, load_sequences

    target = tiny_target("llama", seed=4, num_hidden_layers=3)
    tensors, _ = _shard(target, fused_ids=[1, 2])
    directory = _save_features(tmp_path / "fused", tensors, [1, 2])
    with pytest.raises(SystemExit, match=r"holds fused hidden states \[1, 2\], the drafter fuses \[2\]"):
        feature_shards([directory], [2])
    plain, _ = _shard(target, fused_ids=None)
    plain_dir = _save_features(tmp_path / "plain", plain, None)
    with pytest.raises(SystemExit, match="build the features with --fused-hidden-states"):
        load_sequences(plain_dir / "shard_00000.safetensors", fused=True)


def test_router_examples_of_a_fused_drafter_read_its_fused_features(tmp_path):
    from recipes.build_shortlists import router_examples_from_features

    target = tiny_target("qwen2", seed=5, num_hidden_layers=2)
    tensors, tokenized = _shard(target, fused_ids=[1], num_sequences=1)
    directory = _save_features(tmp_path / "fused", tensors, [1])
    drafter = DynaSpecAssistant.from_target(target, fused_hidden_state_ids=[1]).drafter
    with torch.no_grad():
        drafter.fuse.weight.normal_(0, 0.2, generator=torch.Generator().manual_seed(0))
    cluster_of_token = torch.zeros(VOCAB, dtype=torch.long)
    _, feats, _ = router_examples_from_features([directory], drafter, cluster_of_token, num_tokens=10**6)
    n = len(tokenized[0][0])
    inner = tensors["fused_hidden"].float()
    inner = inner / (inner.pow(2).mean(-1, keepdim=True) + target.config.rms_norm_eps).sqrt()
    with torch.no_grad():
        expected = drafter.fuse(torch.cat([inner, tensors["hidden"].float()], dim=-1))
    torch.testing.assert_close(feats[: n - 1], expected[:-1])
