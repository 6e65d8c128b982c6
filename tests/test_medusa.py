"""Medusa heads (hf_dynaspec.modeling.medusa, drafting.proposers.lattice, generation.medusa): exactness and losslessness of
every draft kind, published layouts loaded as published, heads trained by the recipe's loss accepted.

- greedy: chain, CPS, lattice trees, static trees, ADL, shortlisted heads: token-identical to plain generate();
- sampling: whole medusa_generate calls enumerated exactly (4 tokens), their distribution the target's;
- each head drafts its own position (head k at draft position k: an off-by-one fails);
- FasterDecoding (`medusa_lm_head.safetensors` / `.pt`) and vLLM (`original_lm_head`, `token_map`) replicas
  with the exact key names: their logits are those of the published forward, written out here, and they decode
  exactly; saving and loading keeps every value; damaged files are refused by name.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import VOCAB, plain_generate, tiny_target
from enumeration import TargetOracle, enumerate_paths, max_error, outcome_distribution, target_joint
from safetensors.torch import save_file
from test_enumeration import PROMPT, TOLERANCE, processors
from test_enumeration import VOCAB as SMALL_VOCAB

from hf_dynaspec import ArtifactError, speculative_generate
from hf_dynaspec.errors import IntegrityError
from hf_dynaspec.modeling.medusa import MedusaAssistant
from hf_dynaspec.modeling.medusa_options import MedusaGenerationConfig
from recipes.train_medusa import medusa_loss
from recipes.training_data import Sequence

DRAFTS = [
    dict(lattice_draft="chain"),
    dict(lattice_draft="cps", cps_lambda=0.5),
    dict(lattice_draft="tree", tree_total_tokens=8, cps_lambda=1.0),
    dict(lattice_draft="tree", tree_total_tokens=8, cps_lambda=0.6),
    dict(lattice_draft="choices", medusa_choices=[(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 0, 0)]),
    dict(lattice_draft="chain", draft_plan="adl"),
    dict(lattice_draft="tree", tree_total_tokens=6, shortlist="frspec"),
]
DRAFT_IDS = ["chain", "cps", "tree", "tree-cps", "choices", "chain-adl", "tree-shortlist"]


def greedy_sequences(target, prompts: int = 12, length: int = 40, seed: int = 0) -> list[Sequence]:
    """The target's greedy continuations of random prompts, as the feature shards hold them (top-8 teacher)."""
    sequences = []
    generator = torch.Generator().manual_seed(seed)
    vocab = target.config.vocab_size
    for _ in range(prompts):
        prompt = torch.randint(0, vocab, (1, 6), generator=generator)
        ids = plain_generate(target, prompt, max_new_tokens=length, do_sample=False)
        with torch.no_grad():
            out = target(ids, output_hidden_states=True)
        logp = out.logits[0].float().log_softmax(-1)
        top = logp.topk(8, dim=-1)
        response = torch.zeros(ids.shape[1], dtype=torch.bool)
        response[6:] = True
        sequences.append(Sequence(ids[0], out.hidden_states[-1][0], top.indices, top.values, response))
    return sequences


def trained_heads(target, num_heads: int = 4, steps: int = 150, frequency: int = 0) -> MedusaAssistant:
    """Heads trained by the recipe's loss on the target's own greedy text (full head, no sampled rows)."""
    heads = MedusaAssistant.from_target(target, num_heads=num_heads, num_layers=1)
    if frequency:
        heads.config.frequency_list_size = frequency
        heads.frequency_ids = torch.arange(frequency)
    sequences = greedy_sequences(target)
    optimizer = torch.optim.Adam(heads.blocks.parameters(), lr=3e-3)
    weight = target.get_output_embeddings().weight.detach()
    for _ in range(steps):
        loss, _ = medusa_loss(heads, weight, sequences, decay=0.8, negatives=0, generator=None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return heads.eval()


@pytest.fixture(scope="module")
def medusa_pair():
    target = tiny_target("llama", seed=3)
    with torch.random.fork_rng():  # the heads' initialisation, whatever ran before in this process
        torch.manual_seed(0)
        return target, trained_heads(target, frequency=VOCAB - 20)


@pytest.mark.parametrize("options", DRAFTS, ids=DRAFT_IDS)
def test_greedy_medusa_is_identical(medusa_pair, options):
    target, heads = medusa_pair
    accepted = 0
    for seed in range(3):
        prompt = torch.randint(0, VOCAB, (1, 6), generator=torch.Generator().manual_seed(100 + seed))
        expected = plain_generate(target, prompt, max_new_tokens=48, do_sample=False)
        got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=48,
                              do_sample=False, **options)
        assert torch.equal(got, expected)
        accepted += sum(n * c for n, c in enumerate(heads.stats.acceptance_histogram))
    assert accepted >= 10, "the trained heads must be accepted for this test to exercise acceptance"


def test_greedy_medusa_is_identical_on_a_second_family():
    target = tiny_target("qwen2", seed=4)
    heads = trained_heads(target, steps=60)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(7))
    expected = plain_generate(target, prompt, max_new_tokens=40, do_sample=False)
    for options in DRAFTS[:3]:
        got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=40,
                              do_sample=False, **options)
        assert torch.equal(got, expected), options


def test_trained_heads_are_accepted_more_than_untrained_ones(medusa_pair):
    """The recipe's loss teaches head k the token k + 2 ahead: on the text they were trained on (the first prompts
    of greedy_sequences), trained heads are accepted deeper than untrained ones, which repeat the LM head."""
    target, heads = medusa_pair
    with torch.random.fork_rng():  # untrained heads from a fixed initialisation (the suite's order varies)
        torch.manual_seed(1)
        untrained = MedusaAssistant.from_target(target, num_heads=4)
    generator = torch.Generator().manual_seed(0)  # greedy_sequences' prompts, in its order
    taus = {"untrained": [], "trained": []}
    for _ in range(3):
        prompt = torch.randint(0, VOCAB, (1, 6), generator=generator)
        for name, candidate in (("untrained", untrained), ("trained", heads)):
            target.generate(prompt, custom_generate=speculative_generate, drafter=candidate, max_new_tokens=40,
                            do_sample=False, lattice_draft="chain")
            taus[name].append(candidate.stats.tau)
    assert sum(taus["trained"]) / 3 > sum(taus["untrained"]) / 3 + 0.2, taus


def test_each_head_drafts_its_own_position(medusa_pair):
    """The chain is head k's argmax at draft position k, computed here from the published forward."""
    from hf_dynaspec.generation.medusa import lattice_round
    from hf_dynaspec.stats import DraftStats

    target, heads = medusa_pair
    hidden = torch.randn(1, 3, target.config.hidden_size, generator=torch.Generator().manual_seed(0))
    drafts = lattice_round(heads, MedusaGenerationConfig(lattice_draft="chain"), heads.num_positions, None,
                           DraftStats(), VOCAB)
    tree = drafts.propose(torch.tensor([[1, 2, 3]]), hidden, room=10).tree
    head = target.get_output_embeddings()
    expected = []
    for block in heads.blocks:
        x = hidden[0, -1]
        for layer in block.layers:
            x = x + F.silu(layer(x))
        expected.append(int(head(x).argmax()))
    assert tree.token_ids[1:].tolist() == expected
    assert tree.parents.tolist() == [-1, 0, 1, 2, 3]


def test_shortlisted_heads_score_the_lists_rows_exactly(medusa_pair):
    """Shortlisted logits are the full heads' logits at the list's ids (the rows gathered are the list's)."""
    target, heads = medusa_pair
    original = heads.frequency_ids.clone()
    try:
        heads.frequency_ids = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(3))[:30]
        heads.attach(target)
        hidden = torch.randn(2, target.config.hidden_size, generator=torch.Generator().manual_seed(4))
        full, _ = heads.head_logits(hidden)
        short, ids = heads.head_logits(hidden, shortlist=True)
        assert torch.equal(ids, heads.frequency_ids)
        torch.testing.assert_close(short, full[..., ids])
    finally:
        heads.frequency_ids = original
        heads.attach(target)


@pytest.mark.parametrize("options", [DRAFTS[0], DRAFTS[1], DRAFTS[2], DRAFTS[4], DRAFTS[5], DRAFTS[6]],
                         ids=["chain", "cps", "tree", "choices", "chain-adl", "tree-shortlist"])
def test_sampled_medusa_is_exact(options):
    """Four tokens sampled at temperature 0.7 through whole medusa_generate calls: exactly the target's joint."""
    target = tiny_target("llama", seed=5, vocab_size=SMALL_VOCAB)
    heads = MedusaAssistant.from_target(target, num_heads=3)
    heads.config.frequency_list_size = 4
    heads.frequency_ids = torch.tensor([0, 2, 3, 5])
    with torch.no_grad():
        for parameter in heads.blocks.parameters():
            parameter.normal_(0, 0.5, generator=torch.Generator().manual_seed(parameter.numel()))
    prompt = torch.tensor([PROMPT])

    def call():
        out = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=4,
                              do_sample=True, temperature=0.7, top_k=0, **options)
        return tuple(out[0, len(PROMPT):].tolist())

    paths = enumerate_paths(call, max_paths=4 * SMALL_VOCAB**4)
    oracle = TargetOracle(target, processors("temperature"))
    assert max_error(outcome_distribution(paths), target_joint(oracle, PROMPT, 4)) < TOLERANCE


# -- published layouts ------------------------------------------------------------------------------------
def published_forward(blocks: list[list[tuple[torch.Tensor, torch.Tensor | None]]], projections, hidden):
    """The published Medusa forward, written out: x + SiLU(W x + b) per block, then the head's projection."""
    out = []
    for layers, projection in zip(blocks, projections):
        x = hidden
        for weight, bias in layers:
            x = x + F.silu(F.linear(x, weight, bias))
        out.append(x @ projection.T)
    return torch.stack(out)


def random_blocks(heads: int, layers: int, width: int, bias: bool, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    return [[(0.2 * torch.randn(width, width, generator=generator),
              0.1 * torch.randn(width, generator=generator) if bias else None) for _ in range(layers)]
            for _ in range(heads)]


@pytest.mark.parametrize("suffix", ["safetensors", "pt"])
def test_faster_decoding_layout_loads_as_published_and_decodes_exactly(tmp_path, suffix):
    target = tiny_target("llama", seed=6)
    width, layers = target.config.hidden_size, 2
    blocks = random_blocks(3, layers, width, bias=True)
    projections = [0.5 * torch.randn(VOCAB, width, generator=torch.Generator().manual_seed(9 + k)) for k in range(3)]
    state = {}
    for k, head_layers in enumerate(blocks):
        for j, (weight, bias) in enumerate(head_layers):
            state[f"{k}.{j}.linear.weight"], state[f"{k}.{j}.linear.bias"] = weight, bias
        state[f"{k}.{layers}.weight"] = projections[k]
    if suffix == "pt":
        torch.save(state, tmp_path / "medusa_lm_head.pt")
    else:
        save_file(state, str(tmp_path / "medusa_lm_head.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"medusa_num_heads": 3, "medusa_num_layers": layers, "base_model_name_or_path": "tiny-llama"}))
    heads = MedusaAssistant.from_pretrained(tmp_path, target=target)
    hidden = torch.randn(2, width, generator=torch.Generator().manual_seed(1))
    logits, ids = heads.head_logits(hidden)
    torch.testing.assert_close(logits, published_forward(blocks, projections, hidden), atol=1e-5, rtol=1e-5)
    assert ids is None and heads.config.target_name_or_path == "tiny-llama"
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(2))
    expected = plain_generate(target, prompt, max_new_tokens=30, do_sample=False)
    got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=30, do_sample=False)
    assert torch.equal(got, expected)


@pytest.mark.parametrize("variant", ["own-heads", "original-lm-head", "token-map"])
def test_vllm_layout_loads_as_published_and_decodes_exactly(tmp_path, variant):
    target = tiny_target("qwen2", seed=7)
    width, num_heads = target.config.hidden_size, 2
    blocks = random_blocks(num_heads, 1, width, bias=False, seed=3)
    rows = VOCAB - 17 if variant == "token-map" else VOCAB
    generator = torch.Generator().manual_seed(4)
    projections = [0.5 * torch.randn(rows, width, generator=generator) for _ in range(num_heads)]
    if variant == "original-lm-head":
        projections = [projections[0]] * num_heads
    state = {f"medusa_heads.blocks.{k}.layers.0.weight": blocks[k][0][0] for k in range(num_heads)}
    stored = 1 if variant == "original-lm-head" else num_heads
    state.update({f"medusa_heads.lm_heads.{k}.weight": projections[k].clone() for k in range(stored)})
    config = {"model_type": "medusa", "num_heads": num_heads, "num_hidden_layers": 1, "hidden_size": width,
              "vocab_size": VOCAB, "original_lm_head": variant == "original-lm-head"}
    token_map = torch.randperm(VOCAB, generator=generator)[:rows]
    if variant == "token-map":
        state["token_map"] = token_map
        config["truncated_vocab_size"] = rows
    save_file(state, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config))
    heads = MedusaAssistant.from_pretrained(tmp_path, target=target)
    hidden = torch.randn(3, width, generator=torch.Generator().manual_seed(5))
    logits, ids = heads.head_logits(hidden)
    torch.testing.assert_close(logits, published_forward(blocks, projections, hidden), atol=1e-5, rtol=1e-5)
    assert (ids is None) == (variant != "token-map")
    if ids is not None:
        assert torch.equal(ids, token_map)
    prompt = torch.randint(0, VOCAB, (1, 5), generator=torch.Generator().manual_seed(6))
    expected = plain_generate(target, prompt, max_new_tokens=30, do_sample=False)
    for draft in ("chain", "tree"):
        got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=30,
                              do_sample=False, lattice_draft=draft)
        assert torch.equal(got, expected), draft


def test_saved_heads_load_with_every_value(tmp_path, medusa_pair):
    target, heads = medusa_pair
    heads.card_data = {"training": {"tokens": 480, "commands": "python -m recipes.train_medusa --heads 4"}}
    heads.save_pretrained(tmp_path)
    loaded = MedusaAssistant.from_pretrained(tmp_path, target=target)
    assert loaded.config.drafter_kind == "medusa" and loaded.config.frequency_list_size == VOCAB - 20
    assert loaded.card_data == heads.card_data
    card = (tmp_path / "README.md").read_text()
    assert "python -m recipes.train_medusa --heads 4" in card and "FR-Spec list" in card
    for name, value in heads.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value), name


def test_saved_heads_draft_as_their_saved_options_say(tmp_path, medusa_pair, monkeypatch):
    """The drafting options are saved with the heads (generation_config.json), load back, reach the round, can be
    overridden at load and per call, and a bad saved value is refused naming the option."""
    from hf_dynaspec.generation import medusa as medusa_route

    target, heads = medusa_pair
    options = dict(draft_plan="adl", lattice_draft="chain", num_assistant_tokens=2, shortlist="frspec",
                   tree_total_tokens=6, cps_lambda=0.7)
    defaults, heads.generation_config = heads.generation_config, MedusaGenerationConfig(**options)
    try:
        heads.save_pretrained(tmp_path)
    finally:
        heads.generation_config = defaults
    loaded = MedusaAssistant.from_pretrained(tmp_path, target=target)
    assert loaded.generation_config.drafting_options() == {**defaults.drafting_options(), **options}
    assert MedusaAssistant.from_pretrained(tmp_path, draft_plan="auto").generation_config.draft_plan == "auto"
    seen = []
    lattice_round = medusa_route.lattice_round
    monkeypatch.setattr(medusa_route, "lattice_round", lambda source, options, *rest: seen.append(options)
                        or lattice_round(source, options, *rest))
    prompt = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(4))
    expected = plain_generate(target, prompt, max_new_tokens=16)
    got = target.generate(prompt, custom_generate=speculative_generate, drafter=loaded, max_new_tokens=16, do_sample=False)
    assert torch.equal(got, expected)
    assert (seen[-1].lattice_kind, seen[-1].num_assistant_tokens, seen[-1].draft_plan, seen[-1].shortlisted,
            seen[-1].tree_total_tokens, seen[-1].cps_lambda) == ("chain", 2, "adl", True, 6, 0.7)
    got = target.generate(prompt, custom_generate=speculative_generate, drafter=loaded, max_new_tokens=16,
                          do_sample=False, lattice_draft="tree", draft_plan="fixed")
    assert torch.equal(got, expected)
    assert (seen[-1].lattice_kind, seen[-1].draft_plan) == ("tree", "fixed")
    assert loaded.generation_config.lattice_draft == "chain"  # a per-call value changes that call only
    stored = json.loads((tmp_path / "generation_config.json").read_text())
    (tmp_path / "generation_config.json").write_text(json.dumps({**stored, "lattice_draft": "beam"}))
    with pytest.raises(ValueError, match="lattice_draft"):
        MedusaAssistant.from_pretrained(tmp_path)


def test_a_call_leaves_the_heads_as_it_found_them(medusa_pair):
    """The gathered shortlist rows and the planner's tables live in the heads' run-time state
    (hf_dynaspec.runtime_store), not on the PreTrainedModel: a call writes nothing onto it, forgetting keeps
    what was built, and a copy starts with no run-time state."""
    import copy

    from hf_dynaspec.runtime_store import forget_learnt_state, runtime_of

    target, heads = medusa_pair
    heads.attach(target)
    before = {name: id(value) for name, value in heads.__dict__.items()}
    prompt = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(5))
    got = target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=16, do_sample=False,
                          draft_plan="auto", shortlist="frspec", prompt_lookup_num_tokens=4)
    assert torch.equal(got, plain_generate(target, prompt, max_new_tokens=16))
    after = {name: id(value) for name, value in heads.__dict__.items()}
    assert after == before, {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}
    state = runtime_of(heads)
    assert state.shortlist_rows is not None and state.planner_memories
    forget_learnt_state(heads)
    assert not state.planner_memories and state.shortlist_rows is not None
    assert runtime_of(copy.deepcopy(heads)).shortlist_rows is None


def test_damaged_heads_are_refused_by_name(tmp_path, medusa_pair):
    target, heads = medusa_pair
    heads.save_pretrained(tmp_path)
    state = dict(heads.state_dict())
    state["blocks.1.layers.0.weight"] = torch.full_like(state["blocks.1.layers.0.weight"], float("nan"))
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(IntegrityError, match="model.safetensors does not match the sha256"):
        MedusaAssistant.from_pretrained(tmp_path)  # the file differs from what was saved
    (tmp_path / "checksums.json").unlink()  # heads without checksums (published ones): the weights' own checks
    with pytest.raises(ArtifactError, match=r"NaN or inf values \(blocks.1.layers.0.weight\)"):
        MedusaAssistant.from_pretrained(tmp_path)
    del state["blocks.1.layers.0.weight"]
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(ArtifactError, match="missing"):
        MedusaAssistant.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ArtifactError, match="describes no Medusa heads"):
        MedusaAssistant.from_pretrained(tmp_path)


def test_heads_for_another_target_and_bad_options_are_refused(medusa_pair):
    from hf_dynaspec.errors import AssistantMismatchError

    target, heads = medusa_pair
    other = tiny_target("llama", seed=3, vocab_size=VOCAB + 1)
    with pytest.raises(AssistantMismatchError, match="vocabulary"):
        MedusaAssistant.from_target(target, num_heads=2).attach(other)
    prompt = torch.tensor([[1, 2, 3]])
    with pytest.raises(ValueError, match="lattice_draft .*must be one of"):
        target.generate(prompt, custom_generate=speculative_generate, drafter=heads, lattice_draft="beam")
    with pytest.raises(ValueError, match="draft_plan .*must be one of"):
        target.generate(prompt, custom_generate=speculative_generate, drafter=heads, draft_plan="planned")
    with pytest.raises(ValueError, match="beam_width"):
        target.generate(prompt, custom_generate=speculative_generate, drafter=heads, beam_width=3)
    plain = MedusaAssistant.from_target(target, num_heads=2)
    with pytest.raises(ValueError, match="store no shortlist"):
        target.generate(prompt, custom_generate=speculative_generate, drafter=plain, shortlist="frspec")


def test_medusa_bench_methods_parse_and_are_measured_exact(medusa_pair):
    from hf_dynaspec.bench import EncodedPrompt, build_methods, run_benchmark

    target, heads = medusa_pair
    keys = ["vanilla", "medusa", "medusa:2+adl", "medusa+cps:0.3", "medusa-tree:6+cps+shortlist"]
    methods = build_methods(keys, medusa_heads=heads)
    kwargs = {m.key: {k: v for k, v in m.generate_kwargs.items() if k not in ("custom_generate", "drafter")}
              for m in methods[1:]}
    assert kwargs == {
        "medusa": {"lattice_draft": "chain"},
        "medusa:2+adl": {"lattice_draft": "chain", "num_assistant_tokens": 2, "draft_plan": "adl"},
        "medusa+cps:0.3": {"lattice_draft": "cps", "cps_lambda": 0.3},
        "medusa-tree:6+cps+shortlist": {"lattice_draft": "tree", "cps_lambda": 0.5,
                                        "tree_total_tokens": 6, "shortlist": "frspec"},
    }
    for bad in ("medusa+lookup", "medusa+cps:1.5", "medusa:0"):
        with pytest.raises(ValueError, match="medusa|positive"):
            build_methods([bad], medusa_heads=heads)
    with pytest.raises(ValueError, match="--medusa PATH"):
        build_methods(["medusa"])
    generator = torch.Generator().manual_seed(0)
    prompts = [EncodedPrompt(f"p{i}", "cat", torch.randint(0, VOCAB, (1, 6), generator=generator)) for i in range(2)]
    report = run_benchmark(target, methods, prompts, max_new_tokens=16, dtype="fp32", target_name="tiny",
                           progress=False)
    for key in keys[1:]:
        assert report["methods"][key]["exact"] is True, key
        assert report["methods"][key]["tau"] >= 1.0


def test_the_recipes_pairs_give_head_k_the_token_k_plus_two_ahead():
    """Source t reads h_t; its teacher is the top-k at t + k + 1 (the distribution of token t + k + 2), within one
    sequence, and only where that token is a response token."""
    from recipes.train_medusa import frequency_list, head_pairs

    def sequence(length: int, response_from: int) -> Sequence:
        response = torch.arange(length) >= response_from
        return Sequence(torch.arange(length) + 10 * length, torch.zeros(length, 2), torch.zeros(length, 1),
                        torch.zeros(length, 1), response)

    sequences = [sequence(6, 3), sequence(4, 0)]
    for head in range(3):
        sources, teachers = head_pairs(sequences, head)
        expected = [(offset + t, offset + t + head + 1)
                    for offset, s in ((0, sequences[0]), (6, sequences[1]))
                    for t in range(len(s.input_ids) - head - 2) if s.response[t + head + 2]]
        assert list(zip(sources.tolist(), teachers.tolist())) == expected, head
    ids = frequency_list([Sequence(torch.tensor([5, 5, 7, 2, 7, 5, 9]), torch.zeros(7, 2), torch.zeros(7, 1),
                                   torch.zeros(7, 1), torch.tensor([False] + [True] * 6))], 2)
    assert ids.tolist() == [5, 7]


def test_a_calls_plan_overrides_the_configured_adl_and_old_spellings_warn_once(monkeypatch):
    """The plan a call resolves to, from the heads' config and the call's arguments: a configured ADL stays unless
    the call picks another plan. The early spellings still resolve (through the one deprecation table) with one
    FutureWarning per spelling and process, and two spellings asking one option for different values are refused."""
    from hf_dynaspec.modeling import medusa_options

    adl = MedusaGenerationConfig(draft_plan="adl", lattice_draft="chain")
    assert adl.with_options().draft_plan == "adl"
    assert adl.with_options(tree_top_k=2).draft_plan == "adl"
    assert adl.with_options(draft_plan="fixed").draft_plan == "fixed"
    planned = adl.with_options(draft_plan="auto")
    assert planned.lattice_kind == "auto" and planned.draft_plan == "auto" and adl.draft_plan == "adl"
    monkeypatch.setattr(medusa_options, "_warned", set())
    with pytest.warns(FutureWarning, match="'medusa_adaptive_length' is now the option 'draft_plan'"):
        assert adl.with_options(medusa_adaptive_length=False).draft_plan == "fixed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second use of a spelling says nothing
        assert adl.with_options(medusa_adaptive_length=True).draft_plan == "adl"
    with pytest.warns(FutureWarning, match="medusa_draft"):
        assert adl.with_options(medusa_draft="auto").lattice_kind == "auto"
    with pytest.warns(FutureWarning):
        old = MedusaGenerationConfig().with_options(medusa_draft="cps", medusa_tokens=2, medusa_shortlist=True,
                                                       medusa_cps_lambda=0.3)
    new = MedusaGenerationConfig().with_options(lattice_draft="cps", num_assistant_tokens=2, shortlist="frspec",
                                                   cps_lambda=0.3)
    assert old.drafting_options() == new.drafting_options()
    assert new.shortlisted and new.lattice_kind == "cps" and new.num_assistant_tokens == 2
    for spelling in ({"draft_plan": "auto", "medusa_adaptive_length": True},
                     {"medusa_draft": "auto", "medusa_adaptive_length": True},
                     {"draft_plan": "fixed", "medusa_adaptive_length": True}):
        with pytest.raises(ValueError, match="sets draft_plan twice.*pass one"):
            MedusaGenerationConfig().with_options(**spelling)
    with pytest.raises(ValueError, match="lattice_draft='choices' needs medusa_choices"):
        MedusaGenerationConfig().with_options(lattice_draft="choices")
