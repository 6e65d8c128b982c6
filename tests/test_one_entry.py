"""The one `custom_generate` entry and the round contract behind it (issue 92):

- `speculative_generate` picks a drafter's route from the registry along its class, with a clear refusal otherwise;
- a drafting option by its config name overrides an EAGLE assistant's options for one call, as a Medusa one's;
- the names of earlier releases are deprecated aliases that warn and decode as the entry does;
- a round keeps no state between `propose` and `learn`: the `Draft` carries its plan back.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import imitating_assistant, one_layer_target, plain_generate, tiny_target

import hf_dynaspec
from hf_dynaspec import DynaSpecAssistant, MedusaAssistant, speculative_generate
from hf_dynaspec.drafting.round import SpeculationRound
from hf_dynaspec.generation import aliases
from hf_dynaspec.generation.medusa import lattice_route
from hf_dynaspec.generation.speculative import eagle_route, route_for

IDS = torch.tensor([[1, 4, 2, 7, 9, 3, 1, 4, 2]])


def _generate(target, **kwargs):
    return target.generate(IDS, attention_mask=torch.ones_like(IDS), max_new_tokens=20, do_sample=False, **kwargs)


def test_a_drafters_route_is_read_along_its_class():
    class OwnAssistant(DynaSpecAssistant):  # a user's subclass takes its parent's route
        pass

    class OwnHeads(MedusaAssistant):
        pass

    assert route_for(OwnAssistant.__new__(OwnAssistant)) is eagle_route
    assert route_for(OwnHeads.__new__(OwnHeads)) is lattice_route
    with pytest.raises(TypeError, match=r"must be one of DynaSpecAssistant, MedusaAssistant, DiffusionDrafter, got dict"):
        route_for({})


def test_an_eagle_option_by_its_config_name_overrides_the_assistants_for_one_call():
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=4,
                                    prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    expected = plain_generate(target, IDS, max_new_tokens=20)
    drafted = {}
    for per_call in (None, 1):
        got = _generate(target, custom_generate=speculative_generate, drafter=assistant, num_assistant_tokens=per_call)
        assert torch.equal(got, expected)
        drafted[per_call] = max(assistant.stats.drafted_per_pass)
    assert drafted == {None: 4, 1: 1}
    assert assistant.generation_config.num_assistant_tokens == 4  # the call's copy, not the assistant's own


@pytest.mark.parametrize("name, trees", [("chain_generate", False), ("tree_generate", True),
                                         ("medusa_generate", False), ("lattice_generate", False)])
def test_the_earlier_names_warn_once_and_decode_as_the_entry(name, trees, monkeypatch):
    monkeypatch.setattr(aliases, "_warned", set())
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.2, seed=4, draft_plan="fixed", num_assistant_tokens=2,
                                    prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    alias = getattr(hf_dynaspec, name)
    assert name not in hf_dynaspec.__all__
    with pytest.warns(FutureWarning, match=rf"custom_generate={name} is now custom_generate=speculative_generate"):
        got = _generate(target, custom_generate=alias, drafter=assistant, tree_total_tokens=6)
    alias_drafted = max(assistant.stats.drafted_per_pass)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        _generate(target, custom_generate=alias, drafter=assistant, tree_total_tokens=6)
    entry = _generate(target, custom_generate=speculative_generate, drafter=assistant, trees=trees,
                      tree_total_tokens=6)
    assert torch.equal(got, entry) and torch.equal(got, plain_generate(target, IDS, max_new_tokens=20))
    assert alias_drafted == max(assistant.stats.drafted_per_pass) == (6 if trees else 2)


def _stateless(cls, monkeypatch, seen: list):
    """Wrap `cls.propose` to check that it rebinds none of the round's attributes."""
    propose = cls.propose

    def checked(self, *args, **kwargs):
        before = {name: id(value) for name, value in vars(self).items()}
        draft = propose(self, *args, **kwargs)
        assert {name: id(value) for name, value in vars(self).items()} == before, "propose kept state on the round"
        seen.append(draft.plan.source)
        return draft

    monkeypatch.setattr(cls, "propose", checked)


@pytest.mark.parametrize("route", ["assistant_model", "chains", "trees"])
def test_an_eagle_round_keeps_nothing_between_propose_and_learn(route, monkeypatch):
    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, draft_plan="auto", prompt_lookup_num_tokens=4,
                                    auto_max_assistant_tokens=4)
    seen: list = []
    _stateless(SpeculationRound, monkeypatch, seen)
    kwargs = (dict(assistant_model=assistant) if route == "assistant_model" else
              dict(custom_generate=speculative_generate, drafter=assistant, trees=route == "trees"))
    prompt = torch.cat([IDS, IDS], dim=1)  # a repeat: prompt lookup finds copies
    got = target.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False,
                          **kwargs)
    assert torch.equal(got, plain_generate(target, prompt, max_new_tokens=24))
    assert len(seen) >= 3 and assistant.stats.verify_passes >= len(seen)


def test_a_lattice_round_keeps_nothing_between_propose_and_learn(monkeypatch):
    from test_medusa import trained_heads

    target = tiny_target("llama", seed=3)
    heads = trained_heads(target, steps=20)
    seen: list = []
    _stateless(SpeculationRound, monkeypatch, seen)
    got = _generate(target, custom_generate=speculative_generate, drafter=heads, draft_plan="auto",
                    prompt_lookup_num_tokens=4)
    assert torch.equal(got, plain_generate(target, IDS, max_new_tokens=20)) and len(seen) >= 3


def test_learn_reads_the_plan_of_the_draft_it_is_handed(monkeypatch):
    """A round's statistics and tables learn from the `Draft` handed back, not from whatever was proposed last:
    handing `learn` the draft under another plan changes what is recorded."""
    from dataclasses import replace

    from hf_dynaspec.drafting.lookup import CopyProposer
    from hf_dynaspec.drafting.planning.core import Offer, RoundPlan

    target = one_layer_target("llama", seed=2)
    assistant = imitating_assistant(target, noise=0.3, seed=4, draft_plan="fixed", num_assistant_tokens=2,
                                    prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    learn = SpeculationRound.learn
    copies = CopyProposer(None, 8, target.config.vocab_size)

    def relabelled(self, draft, *args, **kwargs):
        if draft.token_ids.shape[1]:
            n = draft.token_ids.shape[1]
            draft = replace(draft, plan=RoundPlan(Offer(copies, "suffix-shared", n, tokens=(0,) * n), n))
        return learn(self, draft, *args, **kwargs)

    monkeypatch.setattr(SpeculationRound, "learn", relabelled)
    _generate(target, custom_generate=speculative_generate, drafter=assistant)
    by_source = assistant.stats.passes_by_source
    assert set(by_source) <= {"suffix-shared", "none"} and "suffix-shared" in by_source, by_source
    assert assistant.stats.lookup_passes == by_source["suffix-shared"]  # recorded as a copy, as the plan says
