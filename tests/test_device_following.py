"""Everything a draft or training step reads follows the assistant, and device maps it cannot serve are refused.

On the CPU another dtype stands in for another device: a tensor left behind by `.to(...)` is the same bug
either way (on a GPU it is a device mismatch, or a silent copy every step). A dispatch mode records every
parameter and buffer the steps read, so one that did not follow is named.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import VOCAB, imitating_assistant, one_layer_target, tiny_target
from test_recipes import _cached_batch
from test_shortlists import add_shortlists
from torch.utils._python_dispatch import TorchDispatchMode

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.chain import ChainDraftSession
from hf_dynaspec.drafting.runtime import runtime_head


class ReadTensors(TorchDispatchMode):
    """Names (from `known`: storage pointer -> name) and dtypes of the known tensors that ops read."""

    def __init__(self, known: dict[int, str]):
        super().__init__()
        self.known, self.read = known, {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for arg in list(args) + list((kwargs or {}).values()):
            for tensor in arg if isinstance(arg, (list, tuple)) else [arg]:
                if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().data_ptr() in self.known:
                    self.read[self.known[tensor.untyped_storage().data_ptr()]] = tensor.dtype
        return func(*args, **(kwargs or {}))


def _known_tensors(target, assistant) -> dict[int, str]:
    known = {}
    for prefix, module in (("target.", target), ("assistant.", assistant)):
        for name, tensor in list(module.named_parameters()) + list(module.named_buffers()):
            if tensor.numel():
                known.setdefault(tensor.untyped_storage().data_ptr(), prefix + name)
    return known


@pytest.mark.parametrize("strategy", ["full", "frspec", "dynaspec"])
def test_moving_an_attached_assistant_moves_everything_a_draft_step_reads(tmp_path, strategy):
    target = one_layer_target("qwen2")
    assistant = add_shortlists(imitating_assistant(target, num_assistant_tokens=3), target)
    assistant.save_pretrained(tmp_path)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy)
    runtime_head(assistant, assistant.generation_config)  # a head built before the move must not be reused

    assistant.to(torch.float64)

    floating = [(n, t.dtype) for n, t in list(assistant.named_parameters()) + list(assistant.named_buffers())
                if t.is_floating_point()]
    parts = assistant.drafter.target
    floating += [("borrowed." + n, t.dtype) for m in (parts.embed_tokens, parts.final_norm, parts.lm_head)
                 for n, t in m.named_parameters()]
    assert {dtype for _, dtype in floating} == {torch.float64}, [x for x in floating if x[1] != torch.float64]
    head = runtime_head(assistant, assistant.generation_config)
    session = ChainDraftSession(assistant.drafter, VOCAB, do_sample=False, head=head)
    input_ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
    features = torch.randn(1, 7, 32, dtype=torch.float64)
    known = _known_tensors(target, assistant)
    for name in ("weight", "permuted_weight"):  # the rows a static or cluster head copied from the LM head
        if isinstance(getattr(head, name, None), torch.Tensor):
            known.setdefault(getattr(head, name).untyped_storage().data_ptr(), "head copy")
    with ReadTensors(known) as reads:
        draft = session.draft(input_ids, features, 3)
    assert draft.token_ids.shape == (1, 3)
    stale = {name: dtype for name, dtype in reads.read.items() if dtype.is_floating_point and dtype != torch.float64}
    assert not stale, stale
    names = set(reads.read)
    assert {"target.model.embed_tokens.weight", "target.model.norm.weight"} <= names
    assert "target.lm_head.weight" in names or "head copy" in names
    assert any(n.startswith("assistant.drafter.layers.0.") for n in names)
    if strategy == "dynaspec":
        assert any(n.startswith("assistant.shortlists.router.") for n in names)


def test_moving_the_training_module_moves_everything_a_training_step_reads(tmp_path):
    """What `accelerator.prepare(assistant)` does to the training module (a `.to(device)`), a dtype does here."""
    from recipes.training_objective import drafter_loss

    target = one_layer_target("qwen2", seed=6).requires_grad_(False)
    _, _, to_batch = _cached_batch(target)
    batch = to_batch(tmp_path / "shard.safetensors")
    assistant = DynaSpecAssistant.from_target(target)
    assistant.to(torch.float64)
    with ReadTensors(_known_tensors(target, assistant)) as reads:
        loss, _ = drafter_loss(assistant.drafter, batch, noise=0.1, cls_weight=1.0, unroll=2, negatives=8,
                               generator=torch.Generator().manual_seed(0))
    loss.backward()
    stale = {name: dtype for name, dtype in reads.read.items() if dtype.is_floating_point and dtype != torch.float64}
    assert not stale, stale
    assert {"target.model.embed_tokens.weight", "target.lm_head.weight"} <= set(reads.read)
    assert all(p.grad is not None and p.grad.dtype == torch.float64 for p in assistant.drafter.layers.parameters())


def _split_target(embed_device: str, head_device: str):
    """A target whose embedding and head report the given devices (meta stands in for an offloaded weight)."""
    target = tiny_target("llama")
    if embed_device == "meta":
        target.get_input_embeddings().to("meta")
    if head_device == "meta":
        target.get_output_embeddings().to("meta")
    return target


@pytest.mark.parametrize("placement", ["head-offloaded", "embedding-offloaded"])
def test_device_maps_the_drafter_cannot_serve_are_refused_with_the_fix(placement):
    target = _split_target(*{"head-offloaded": ("cpu", "meta"), "embedding-offloaded": ("meta", "cpu")}[placement])
    with pytest.raises(ValueError, match=r"offloaded \(meta\).*device_map=\{'': 0\}"):
        DynaSpecAssistant.from_target(target)


def test_parts_on_two_devices_are_refused_naming_each_placement():
    from hf_dynaspec.modeling.drafter import TargetParts, drafting_device

    target = tiny_target("llama")
    embed = torch.nn.Embedding(4, 2)
    norm, head = target.get_decoder().norm, torch.nn.Linear(2, 4, bias=False).to(torch.device("meta"))
    with pytest.raises(ValueError, match="embedding on cpu, final norm on cpu, LM head on meta"):
        drafting_device(TargetParts(embed, norm, head))
    head = torch.nn.Linear(2, 4, bias=False)
    assert drafting_device(TargetParts(embed, norm, head)) == torch.device("cpu")


def test_attaching_never_casts_the_targets_own_modules():
    """Only `.to(...)` of an attached assistant moves the borrowed parts; attach itself moves the assistant's own
    weights only (a model may keep its final norm in fp32 inside a bf16 model)."""
    target = tiny_target("llama").to(torch.bfloat16)
    target.get_decoder().norm.float()
    DynaSpecAssistant.from_target(target)
    assert target.get_decoder().norm.weight.dtype == torch.float32
    assert target.get_output_embeddings().weight.dtype == torch.bfloat16


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_drafters_rotary_table_stays_fp32_as_the_targets_does(tmp_path, dtype):
    """transformers keeps a half-precision target's inv_freq in fp32; attaching the drafter casts its weights to
    the target's dtype but must not round its rotary table (positions drift from the target's at long contexts)."""
    target = tiny_target("qwen2")
    fp32_table = target.model.rotary_emb.inv_freq.clone()
    target.to(dtype)
    target.model.rotary_emb.inv_freq = fp32_table.clone()  # as from_pretrained(dtype=) keeps it
    assistant = DynaSpecAssistant.from_target(target)
    assistant.attach(target)
    table = assistant.drafter.rotary_emb.inv_freq
    assert table.dtype == torch.float32 and next(assistant.drafter.fc.parameters()).dtype == dtype
    assert torch.equal(table, fp32_table)
    assistant.to(torch.float16)
    assert assistant.drafter.rotary_emb.inv_freq.dtype == torch.float32


def test_a_gemma3_target_in_fp16_is_warned_about():
    target = tiny_target("gemma3_text").to(torch.float16)
    with pytest.warns(UserWarning, match="overflow"):
        DynaSpecAssistant.from_target(target).attach(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        DynaSpecAssistant.from_target(target.to(torch.bfloat16)).attach(target)
