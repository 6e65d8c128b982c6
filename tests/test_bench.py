"""The benchmark harness on tiny random models: schema, pass counting, exactness detection, aggregation, order."""

from __future__ import annotations

import functools
import json
import math

import pytest
import torch
from conftest import VOCAB, imitating_assistant, one_layer_target

from hf_dynaspec.bench import EncodedPrompt, Method, build_methods, load_prompts, run_benchmark
from hf_dynaspec.bench.command import parse_assistant_options
from hf_dynaspec.bench.harness import interleaved_order
from hf_dynaspec.bench.methods import DEFAULT_LOOKUP_TOKENS, expand_assistant_labels
from hf_dynaspec.bench.report import markdown_table, single_assistant_view, write_plots
from recipes.data_paths import shared_data_dir

SHARED_EVAL = shared_data_dir() / "eval"


def _prompts(n=4):
    generator = torch.Generator().manual_seed(3)
    return [EncodedPrompt(f"p{i}", "math" if i % 2 else "code", torch.randint(0, VOCAB, (1, 5 + i), generator=generator))
            for i in range(n)]


@pytest.fixture(scope="module")
def target():
    return one_layer_target("llama", seed=2)


@pytest.fixture(scope="module")
def report_and_runs(target):
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
    methods = build_methods(["vanilla", "eagle", "prompt-lookup:3"], assistant_factory=lambda **o: assistant)
    runs = []
    report = run_benchmark(target, methods, _prompts(), max_new_tokens=12, dtype="fp32", target_name="tiny",
                           progress=False, on_run=lambda prompt, method, run: runs.append((prompt, method, run)))
    return report, runs


def test_report_schema_and_pass_counting(report_and_runs):
    report, runs = report_and_runs
    assert {k: report[k] for k in ("target", "dtype", "device", "n_prompts", "max_new_tokens")} == {
        "target": "tiny", "dtype": "fp32", "device": "cpu", "n_prompts": 4, "max_new_tokens": 12}
    assert list(report["methods"]) == ["vanilla", "eagle", "prompt-lookup:3"]
    for _key, m in report["methods"].items():
        assert set(m) >= {"tau", "avg_shortlist", "coverage", "tokens_per_s", "speedup", "exact", "n_mismatch",
                          "per_category", "divergences", "decode_speedup"}
        assert m["exact"] is True and m["n_mismatch"] == 0 and m["divergences"] == []
        assert set(m["per_category"]) == {"code", "math"}
    json.dumps(report)  # JSON-ready as returned
    assert report["methods"]["vanilla"]["tau"] is None
    for _, method, run in runs:
        if method.key == "vanilla":  # one forward per token: the hook counts every target pass
            assert run.target_passes == len(run.new_ids) == 12
        if method.key == "eagle":  # every pass commits its own token plus the drafts it accepted
            assert len(run.new_ids) == run.target_passes + run.stats["accepted"]
            assert run.target_passes > run.stats["verify_passes"]  # the prefill pass has nothing to verify
    eagle_runs = [run for _, method, run in runs if method.key == "eagle"]
    expected_tau = sum(len(r.new_ids) for r in eagle_runs) / sum(r.target_passes for r in eagle_runs)
    assert report["methods"]["eagle"]["tau"] == pytest.approx(expected_tau) and expected_tau > 1.5


def test_another_engine_is_timed_on_its_own_clock_and_its_weights_are_named(target):
    """A method that decodes with another engine (`Method.run`, how llama.cpp runs): its outputs are checked
    against plain generate()'s like every method's (a wrong token is found), one pass per token, and the report names
    its weight format beside its speed."""
    calls = []

    def engine(input_ids, max_new_tokens, wrong=False):
        calls.append(input_ids.shape)
        out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                              max_new_tokens=max_new_tokens)[0, input_ids.shape[1]:]
        if wrong and len(out) > 3:  # the timed runs (the warm-ups decode two tokens)
            out = out.clone()
            out[3] = (out[3] + 1) % VOCAB
        return out, 0.001
    methods = [Method("vanilla"), Method("same", run=engine, weight_format="bf16"),
               Method("other", run=functools.partial(engine, wrong=True), weight_format="Q8_0")]
    report = run_benchmark(target, methods, _prompts(2), max_new_tokens=8, dtype="fp32", target_name="tiny",
                           progress=False)
    same, other = report["methods"]["same"], report["methods"]["other"]
    assert same["exact"] is True and same["tau"] == 1.0 and same["weight_format"] == "bf16"
    assert other["exact"] is False and other["n_mismatch"] == 2 and {d["position"] for d in other["divergences"]} == {3}
    assert "weight_format" not in report["methods"]["vanilla"]
    table = markdown_table(report)
    assert "[bf16]" in table and "[Q8_0]" in table and "not the same model" in table
    assert len(calls) == 2 * (3 + 2)  # three warm-ups and two prompts, for each of the two engine methods
    # The widest warm-up spans the longest timed run (a 6-token prompt and 8 new tokens), less the 2 it decodes: a
    # compiled step meets no cache longer or fuller than a warm-up's (a sliding window's rolling graph).
    assert max(shape[1] for shape in calls) == 6 + 8 - 2


def test_the_llama_cpp_method_names_what_it_lacks(monkeypatch, tmp_path, target):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # not installed
    with pytest.raises(ValueError, match="llama-cpp-python binding is not installed"):
        build_methods(["vanilla", f"llama.cpp:{tmp_path / 'q.gguf'}"], target=target)
    monkeypatch.setitem(sys.modules, "llama_cpp", types.ModuleType("llama_cpp"))
    with pytest.raises(ValueError, match="no GGUF file: name one"):
        build_methods(["vanilla", "llama.cpp"], target=target)
    with pytest.raises(ValueError, match="is not a file"):
        build_methods(["vanilla", f"llama.cpp:{tmp_path / 'missing.gguf'}"], target=target)


def test_lookup_share_and_acceptance_are_summed_over_runs(target):
    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=2, prompt_lookup_num_tokens=3,
                                    prompt_lookup_min_ngram=1)
    methods = build_methods(["vanilla", "eagle"], assistant_factory=lambda **o: assistant)
    runs = []
    report = run_benchmark(target, methods, _prompts(), max_new_tokens=16, dtype="fp32", target_name="tiny",
                           progress=False, on_run=lambda prompt, method, run: runs.append(run))
    stats = [run.stats for run in runs if run.stats]
    looked_up = sum(s["lookup_passes"] for s in stats)
    assert looked_up > 0 and sum(s["verify_passes"] for s in stats) > looked_up  # both kinds of rounds
    eagle = report["methods"]["eagle"]
    assert eagle["lookup_share"] == pytest.approx(looked_up / sum(s["verify_passes"] for s in stats))
    assert eagle["lookup_acceptance"] == pytest.approx(
        sum(s["lookup_accepted"] for s in stats) / sum(s["lookup_drafted"] for s in stats))
    assert eagle["exact"] and report["methods"]["vanilla"]["lookup_share"] is None
    assert f"| {eagle['lookup_share']:.2f} / {eagle['lookup_acceptance']:.2f} |" in markdown_table(report)


def test_speedup_is_the_per_category_geometric_mean_of_same_prompt_ratios(report_and_runs):
    report, runs = report_and_runs
    by_key = {}
    for prompt, method, run in runs:
        by_key.setdefault(method.key, {})[prompt.prompt_id] = (prompt.category, run.tokens_per_s)
    for category in ("code", "math"):
        ratios = [by_key["eagle"][pid][1] / by_key["vanilla"][pid][1]
                  for pid, (cat, _) in by_key["vanilla"].items() if cat == category]
        expected = math.exp(sum(map(math.log, ratios)) / len(ratios))
        cell = report["methods"]["eagle"]["per_category"][category]
        assert cell["speedup"] == pytest.approx(expected) and cell["n_prompts"] == 2
    assert report["methods"]["vanilla"]["speedup"] == pytest.approx(1.0)


def test_methods_run_interleaved_with_a_rotating_start(report_and_runs):
    _, runs = report_and_runs
    keys = ["vanilla", "eagle", "prompt-lookup:3"]
    observed = [method.key for _, method, _ in runs]
    expected = [keys[m] for i in range(4) for m in interleaved_order(i, 3)]
    assert observed == expected
    assert [observed[3 * i] for i in range(3)] == keys  # each method leads once


def test_a_method_that_changes_the_output_is_reported_not_exact(target):
    prompts = _prompts(2)
    first_tokens = [int(target.generate(p.input_ids, max_new_tokens=1, do_sample=False)[0, -1]) for p in prompts]
    broken = Method("broken", {"suppress_tokens": first_tokens})
    report = run_benchmark(target, [Method("vanilla"), broken], prompts, max_new_tokens=6, dtype="fp32",
                           target_name="tiny", progress=False)
    result = report["methods"]["broken"]
    assert result["exact"] is False and result["n_mismatch"] == 2
    assert [d["position"] for d in result["divergences"]] == [0, 0]
    assert all(d["margin"] is not None and d["prompt_id"] in ("p0", "p1") for d in result["divergences"])
    with pytest.raises(ValueError, match="vanilla"):
        run_benchmark(target, [broken], prompts, max_new_tokens=2, dtype="fp32", target_name="tiny", progress=False)


def test_method_strings_are_validated():
    with pytest.raises(ValueError, match="unknown method 'lookahead'"):
        build_methods(["lookahead"])
    with pytest.raises(ValueError, match="needs an argument"):
        build_methods(["frspec"], assistant_factory=lambda **o: None)
    with pytest.raises(ValueError, match="--draft-model"):
        build_methods(["hf-assisted"])
    with pytest.raises(ValueError, match="--assistant"):
        build_methods(["dynaspec"])
    with pytest.raises(ValueError, match="listed twice"):
        build_methods(["vanilla", "vanilla"])
    seen = []
    methods = build_methods(["frspec:32768", "dynaspec-fixed:8", "dynaspec", "dynaspec:48"],
                            assistant_factory=lambda **o: seen.append(o) or object())
    assert [m.key for m in methods] == ["frspec:32768", "dynaspec-fixed:8", "dynaspec", "dynaspec:48"]
    off = {"assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 0, "prompt_lookup_veto": 1.0,
           "suffix_cache_num_tokens": 0, "draft_plan": "fixed"}
    with pytest.raises(ValueError, match=r"\+adl adapts a chain"):
        build_methods(["dynaspec+adl+auto"], assistant_factory=lambda **o: object())
    assert build_methods(["dynaspec+draft:5+adl"], assistant_factory=lambda **o: seen.append(o) or object())
    assert seen.pop() == {"shortlist": "dynaspec", **off, "draft_plan": "adl", "num_assistant_tokens": 5}
    assert build_methods(["dynaspec+auto+block"], assistant_factory=lambda **o: seen.append(o) or object())
    assert seen.pop() == {"shortlist": "dynaspec", **off, "draft_plan": "auto", "auto_max_assistant_tokens": 8,
                          "verification": "block"}
    with pytest.raises(ValueError, match=r"\+block verifies a sampled chain"):
        build_methods(["dynaspec-tree+block"], assistant_factory=lambda **o: object())
    assert build_methods(["dynaspec-tree:rows=900x400x50"], assistant_factory=lambda **o: seen.append(o) or object())
    assert seen.pop()["shortlist_rows"] == [900, 400, 50]
    with pytest.raises(ValueError, match="positive integer"):
        build_methods(["dynaspec:rows=900x0"], assistant_factory=lambda **o: object())
    assert seen == [{"shortlist": "frspec", "shortlist_size": 32768, **off},
                    {"shortlist": "dynaspec-fixed", "shortlist_rows": "clusters", "fixed_clusters": 8, **off},
                    {"shortlist": "dynaspec", **off}, {"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 48, **off}]


def test_prompt_files_spec_bench_and_humaneval(tmp_path):
    spec = tmp_path / "spec.jsonl"
    spec.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 1, "category": "qa", "turns": ["q1"]},
        {"question_id": 2, "category": "qa", "turns": ["q2"]},
        {"question_id": 81, "category": "writing", "turns": ["w1", "w2"]},
    ]) + "\n")
    human = tmp_path / "he.jsonl"
    human.write_text(json.dumps({"task_id": "HumanEval/0", "prompt": "def f():\n"}) + "\n")
    prompts = load_prompts([spec, human], limit_per_category=1)
    assert [(p.prompt_id, p.category, p.text, p.subcategory) for p in prompts] == [
        ("1", "qa", "q1", None), ("81", "mt_bench", "w1", "writing"), ("HumanEval/0", "code", "def f():\n", None)]
    assert [p.prompt_id for p in load_prompts([spec, human], categories=["qa", "code"])] == ["1", "2", "HumanEval/0"]
    with pytest.raises(ValueError, match="no prompts of the categories rag in"):
        load_prompts([spec], categories=["rag"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 3}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        load_prompts([bad])


def test_the_dev_split_loads_with_every_category():
    prompts = load_prompts([SHARED_EVAL / "spec_bench_dev.jsonl", SHARED_EVAL / "humaneval_dev.jsonl"], 2)
    categories = [p.category for p in prompts]
    assert sorted(set(categories)) == ["code", "math_reasoning", "mt_bench", "qa", "rag", "summarization", "translation"]
    assert all(categories.count(c) == 2 for c in set(categories))


def test_table_and_plots_show_every_method(report_and_runs, tmp_path):
    report, _ = report_and_runs
    table = markdown_table(report)
    for key in report["methods"]:
        assert f"| {key} |" in table
    assert f"{report['methods']['eagle']['tau']:.2f}" in table
    files = write_plots(report, tmp_path, vocab_size=VOCAB)
    assert [f.name for f in files] == ["tau_vs_shortlist.png", "speedup_per_category.png"]
    assert all(f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for f in files)


def test_tree_methods_are_benchmarked_exact_with_their_passes_counted(target):
    from hf_dynaspec import speculative_generate

    assistant = imitating_assistant(target, noise=0.3, tree_top_k=3, tree_depth=3, tree_total_tokens=6)
    methods = build_methods(["vanilla", "eagle-tree"], assistant_factory=lambda **o: assistant)
    assert methods[1].generate_kwargs == {"custom_generate": speculative_generate, "drafter": assistant, "trees": True}
    runs = []
    report = run_benchmark(target, methods, _prompts(), max_new_tokens=12, dtype="fp32", target_name="tiny",
                           progress=False, on_run=lambda prompt, method, run: runs.append((method.key, run)))
    tree = report["methods"]["eagle-tree"]
    assert tree["exact"] is True and tree["n_mismatch"] == 0
    tree_runs = [run for key, run in runs if key == "eagle-tree"]
    for run in tree_runs:  # the prefill pass commits one token, each tree pass its accepted path plus one
        assert len(run.new_ids) == run.target_passes + run.stats["accepted"]
        assert run.target_passes == run.stats["verify_passes"] + 1
    expected_tau = sum(len(r.new_ids) for r in tree_runs) / sum(r.target_passes for r in tree_runs)
    assert tree["tau"] == pytest.approx(expected_tau) and expected_tau > 1.5


def test_confidence_suffix_reaches_the_assistant_and_is_validated():
    seen = []
    methods = build_methods(["eagle@0.5", "dynaspec:8@0.25", "dynaspec:8"],
                            assistant_factory=lambda **o: seen.append(o) or object())
    assert [m.key for m in methods] == ["eagle@0.5", "dynaspec:8@0.25", "dynaspec:8"]
    # A key without a suffix turns the feature off explicitly: an artifact's own default must not leak in.
    off = {"prompt_lookup_num_tokens": 0, "prompt_lookup_veto": 1.0, "suffix_cache_num_tokens": 0, "draft_plan": "fixed"}
    assert seen == [{"shortlist": "full", "assistant_confidence_threshold": 0.5, **off},
                    {"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 8,
                     "assistant_confidence_threshold": 0.25, **off},
                    {"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 8,
                     "assistant_confidence_threshold": 0.0, **off}]
    for bad, message in [("eagle@1.5", "in \\[0, 1\\)"), ("eagle@x", "in \\[0, 1\\)"),
                         ("vanilla@0.5", "assistant.s methods only"), ("dynaspec-tree@0.5", "not trees")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], assistant_factory=lambda **o: object())


def test_lookup_suffix_reaches_the_assistant_and_is_validated():
    seen = []
    build_methods(["dynaspec:8+lookup:5", "eagle@0.5+lookup", "frspec:1024+lookup:3"],
                  assistant_factory=lambda **o: seen.append(o) or object())
    unchecked = {"prompt_lookup_veto": 1.0, "suffix_cache_num_tokens": 0, "draft_plan": "fixed"}
    assert seen == [{"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 8,
                     "assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 5,
                     **unchecked},
                    {"shortlist": "full", "assistant_confidence_threshold": 0.5, "prompt_lookup_num_tokens": DEFAULT_LOOKUP_TOKENS,
                     **unchecked},
                    {"shortlist": "frspec", "shortlist_size": 1024, "assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 3,
                     **unchecked}]
    for bad, message in [("eagle+lookup:0", "positive integer"), ("eagle+ngram", "the \\+ suffixes are"),
                         ("prompt-lookup+lookup", "assistant's methods only"), ("dynaspec-tree+lookup", "tree methods take \\+tree")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], assistant_factory=lambda **o: object())


def test_veto_suffix_reaches_the_assistant_and_is_validated(target):
    seen = []
    build_methods(["dynaspec:8+lookup:5+veto", "dynaspec:8+lookup:5+veto:0.3", "dynaspec:8+lookup:5"],
                  assistant_factory=lambda **o: seen.append(o) or object())
    assert [o["prompt_lookup_veto"] for o in seen] == [0.0, 0.3, 1.0]
    for bad, message in [("eagle+veto", "needs \\+lookup"), ("eagle+lookup+veto:1.5", "in \\[0, 1\\)"),
                         ("eagle+lookup+veto:x", "in \\[0, 1\\)"), ("eagle+lookup+veto+veto:0.2", "at most once"),
                         ("vanilla+veto", "assistant's methods only")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], assistant_factory=lambda **o: object())

    # In a run, the vetoed share of lookup matches is reported beside the lookup share. Prompts over 8
    # symbols give lookup matches with wrong continuations, for the drafter to veto.
    methods = build_methods(["vanilla", "eagle+lookup:3+veto"],
                            assistant_factory=lambda **o: imitating_assistant(
                                target, noise=0.3, num_assistant_tokens=2, prompt_lookup_min_ngram=1, **o))
    generator = torch.Generator().manual_seed(0)
    prompts = [EncodedPrompt(f"p{i}", "code", torch.randint(0, 8, (1, 30), generator=generator)) for i in range(6)]
    report = run_benchmark(target, methods, prompts, max_new_tokens=8, dtype="fp32", target_name="tiny",
                           progress=False)
    checked = report["methods"]["eagle+lookup:3+veto"]
    assert checked["exact"] and 0.0 < checked["lookup_vetoed"] < 1.0
    assert f"({checked['lookup_vetoed']:.2f} vetoed)" in markdown_table(report)


def test_draft_suffix_sets_each_methods_own_draft_length(target):
    seen = []
    build_methods(["dynaspec:8+lookup:5+draft:3", "eagle+draft:1", "dynaspec:8"],
                  assistant_factory=lambda **o: seen.append(o) or object())
    assert seen[0]["num_assistant_tokens"] == 3 and seen[0]["prompt_lookup_num_tokens"] == 5
    assert seen[1]["num_assistant_tokens"] == 1 and seen[1]["prompt_lookup_num_tokens"] == 0
    assert "num_assistant_tokens" not in seen[2]  # without +draft: the run's or the artifact's length
    for bad, message in [("eagle+draft", "needs the number"), ("eagle+draft:0", "positive integer"),
                         ("eagle+lookup+lookup:3", "each at most once"), ("dynaspec-tree+draft:2", "tree methods take \\+tree"),
                         ("vanilla+draft:2", "assistant's methods only")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], assistant_factory=lambda **o: object())

    # Interleaved in one run, each method drafts its own length (the run's default here is 2).
    methods = build_methods(["vanilla", "eagle+draft:1", "eagle+draft:3", "eagle"],
                            assistant_factory=lambda **o: imitating_assistant(target, noise=0.3,
                                                                              **{"num_assistant_tokens": 2, **o}))
    report = run_benchmark(target, methods, _prompts(3), max_new_tokens=16, dtype="fp32", target_name="tiny",
                           progress=False)
    per_pass = {key: m["drafted_per_pass"] for key, m in report["methods"].items()}
    assert per_pass["vanilla"] is None
    # Drafts are cut short only near max_new_tokens, so each method's mean sits just below its length.
    assert 0.8 < per_pass["eagle+draft:1"] <= 1.0
    assert 1.6 < per_pass["eagle"] <= 2.0
    assert 2.4 < per_pass["eagle+draft:3"] <= 3.0
    assert all(m["exact"] for m in report["methods"].values())


def test_tree_method_strings():
    seen = []
    methods = build_methods(["eagle-tree", "dynaspec-tree", "dynaspec-tree:32"],
                            assistant_factory=lambda **o: seen.append(o) or object())
    off = {"assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 0, "prompt_lookup_veto": 1.0,
           "suffix_cache_num_tokens": 0, "draft_plan": "fixed"}
    assert seen == [{"shortlist": "full", **off}, {"shortlist": "dynaspec", **off},
                    {"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 32, **off}]
    assert all("custom_generate" in m.generate_kwargs for m in methods)
    with pytest.raises(ValueError, match="takes no argument"):
        build_methods(["eagle-tree:4"], assistant_factory=lambda **o: object())


def test_auto_suffix_and_tree_shape_suffixes_reach_the_assistant():
    seen = []
    build_methods(["dynaspec:8+lookup:10+suffix+auto", "dynaspec:8+suffix:4+auto:5", "dynaspec-tree:8+tree:2x6x8",
                   "eagle", "dynaspec-tree+lookup:5+suffix+auto:6+tree:3x5x12"],
                  assistant_factory=lambda **o: seen.append(o) or object())
    assert seen[0]["draft_plan"] == "auto" and seen[0]["auto_max_assistant_tokens"] == 8
    assert seen[0]["suffix_cache_num_tokens"] == 16 and seen[0]["prompt_lookup_num_tokens"] == 10
    assert seen[1]["auto_max_assistant_tokens"] == 5 and seen[1]["suffix_cache_num_tokens"] == 4
    assert (seen[2]["tree_top_k"], seen[2]["tree_depth"], seen[2]["tree_total_tokens"]) == (2, 6, 8)
    assert seen[3]["draft_plan"] == "fixed" and seen[3]["suffix_cache_num_tokens"] == 0  # off unless asked for
    assert seen[2]["draft_plan"] == "fixed"  # a tree method without +auto drafts its tree every round
    planned_tree = seen[4]  # tree_generate plans trees, chains and lookups
    assert planned_tree["draft_plan"] == "auto" and planned_tree["auto_max_assistant_tokens"] == 6
    assert (planned_tree["prompt_lookup_num_tokens"], planned_tree["suffix_cache_num_tokens"]) == (5, 16)
    assert (planned_tree["tree_top_k"], planned_tree["tree_depth"], planned_tree["tree_total_tokens"]) == (3, 5, 12)
    for bad, message in [("dynaspec+tree:4x4", "three positive integers"), ("dynaspec+tree:4x4x8", "eagle-tree or"),
                         ("dynaspec-tree+auto+draft:3", "tree methods take"),
                         ("dynaspec-tree+suffix", "tree methods take"), ("eagle+auto:0", "positive integer"),
                         ("eagle+suffix+suffix", "each at most once")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], assistant_factory=lambda **o: object())


def test_mt_bench_second_turn_follows_the_targets_own_first_answer(tmp_path):
    from hf_dynaspec.bench.prompts import encode_prompts

    class RecordingTokenizer:
        chat_template = "{{ messages }}"

        def __init__(self):
            self.conversations = []

        def apply_chat_template(self, messages, **kwargs):
            self.conversations.append(messages)
            return {"input_ids": torch.tensor([[len(self.conversations), len(messages)]])}

    spec = tmp_path / "spec.jsonl"
    spec.write_text("\n".join(json.dumps(r) for r in [
        {"question_id": 1, "category": "qa", "turns": ["q1"]},
        {"question_id": 81, "category": "writing", "turns": ["w1", "w2"]},
    ]) + "\n")
    prompts = load_prompts([spec])
    tokenizer = RecordingTokenizer()
    answered = []

    def answer(input_ids):
        answered.append(input_ids)
        return "my answer"

    encoded = encode_prompts(tokenizer, prompts, answer_first_turn=answer)
    assert [(e.prompt_id, e.category) for e in encoded] == [("1", "qa"), ("81", "mt_bench"), ("81/turn2", "mt_bench")]
    assert len(answered) == 1 and torch.equal(answered[0], encoded[1].input_ids)  # answers turn 1 of question 81
    assert tokenizer.conversations[-1] == [{"role": "user", "content": "w1"},
                                           {"role": "assistant", "content": "my answer"},
                                           {"role": "user", "content": "w2"}]
    assert len(encode_prompts(RecordingTokenizer(), prompts)) == 2  # first turns only unless asked


def test_labelled_assistants_each_serve_their_own_methods():
    keys = expand_assistant_labels(["vanilla", "dynaspec:8+lookup:5", "prompt-lookup:3", "old/eagle"], ["old", "new"])
    assert keys == ["vanilla", "old/dynaspec:8+lookup:5", "new/dynaspec:8+lookup:5", "prompt-lookup:3", "old/eagle"]
    assert expand_assistant_labels(["vanilla", "eagle"], []) == ["vanilla", "eagle"]  # one unlabelled assistant
    seen = []
    factories = {label: functools.partial(lambda label, **o: seen.append((label, o)) or object(), label)
                 for label in ("old", "new")}
    methods = build_methods(keys, labelled_factories=factories)
    assert [m.key for m in methods] == keys
    fixed = {"suffix_cache_num_tokens": 0, "draft_plan": "fixed"}
    lookup = {"shortlist": "dynaspec", "shortlist_rows": "clusters", "max_clusters": 8,
                     "assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 5,
              "prompt_lookup_veto": 1.0, **fixed}
    assert seen == [("old", lookup), ("new", lookup),
                    ("old", {"shortlist": "full", "assistant_confidence_threshold": 0.0, "prompt_lookup_num_tokens": 0,
                             "prompt_lookup_veto": 1.0, **fixed})]
    for bad, message in [("cur/eagle", "no assistant is labelled 'cur'"), ("old/vanilla", "assistant's methods only"),
                         ("eagle", "write LABEL/eagle"), ("old/eagle+draft", "needs the number")]:
        with pytest.raises(ValueError, match=message):
            build_methods([bad], labelled_factories=factories)
    with pytest.raises(ValueError, match="no assistant is labelled 'old'.*--assistant LABEL=PATH"):
        build_methods(["old/eagle"], assistant_factory=lambda **o: object())


def test_two_assistants_interleaved_in_one_run_are_measured_apart(target):
    # A faithful drafter and a noisy one: a harness that mixed up their assistants would report equal taus.
    assistants = {"good": imitating_assistant(target, num_assistant_tokens=3),
                  "noisy": imitating_assistant(target, noise=3.0, seed=5, num_assistant_tokens=3)}
    keys = expand_assistant_labels(["vanilla", "eagle"], list(assistants))
    methods = build_methods(keys, labelled_factories={k: functools.partial(lambda a, **o: a, a) for k, a in assistants.items()})
    runs = []
    report = run_benchmark(target, methods, _prompts(3), max_new_tokens=16, dtype="fp32", target_name="tiny",
                           progress=False, on_run=lambda prompt, method, run: runs.append((method.key, run)))
    good, noisy = report["methods"]["good/eagle"], report["methods"]["noisy/eagle"]
    assert good["exact"] and noisy["exact"]  # every method is lossless, whatever its drafter
    assert good["tau"] > noisy["tau"] + 0.3
    for key in assistants:  # each run's stats came from its own assistant
        own = [run for k, run in runs if k == f"{key}/eagle"]
        assert report["methods"][f"{key}/eagle"]["tau"] == pytest.approx(
            sum(len(r.new_ids) for r in own) / sum(r.target_passes for r in own))


def test_assistant_options_parse_labels_and_reject_clashes():
    assert parse_assistant_options(None) == {}
    assert parse_assistant_options(["outputs/package"]) == {None: "outputs/package"}
    assert parse_assistant_options(["v7=outputs/package-15b-v7"]) == {"v7": "outputs/package-15b-v7"}
    assert parse_assistant_options(["a/v6/", "v7=b/package"]) == {"v6": "a/v6/", "v7": "b/package"}
    with pytest.raises(ValueError, match="two assistants are labelled 'package'"):
        parse_assistant_options(["x/package", "y/package"])
    for bad in ["=path", "v7=", "a/b=path"]:
        with pytest.raises(ValueError, match="LABEL=PATH"):
            parse_assistant_options([bad])


def test_a_labelled_report_narrows_to_one_assistant_for_its_card():
    row = lambda tau: {"tau": tau, "exact": True}  # noqa: E731
    report = {"n_prompts": 7, "assistant": {"v6": "outputs/package-15b-v6", "v7": "outputs/package-15b-v7"},
              "methods": {"vanilla": row(None), "v6/dynaspec:8": row(1.3), "v7/dynaspec:8": row(1.4),
                          "prompt-lookup": row(1.35), "v7/eagle": row(1.5)}}
    view = single_assistant_view(report, "v7")
    assert view["methods"] == {"vanilla": row(None), "dynaspec:8": row(1.4), "prompt-lookup": row(1.35),
                               "eagle": row(1.5)}
    assert view["assistant"] == "outputs/package-15b-v7" and view["other_assistants"] == {"v6": "outputs/package-15b-v6"}
    assert view["n_prompts"] == 7 and "v6/dynaspec:8" in report["methods"]  # the original is left as it was
    with pytest.raises(ValueError, match="no assistant labelled 'v8'.*v6, v7"):
        single_assistant_view(report, "v8")
    with pytest.raises(ValueError, match="one unlabelled assistant"):
        single_assistant_view({**report, "assistant": "outputs/package"}, "v7")


def test_the_shared_timer_interleaves_and_keeps_set_up_out_of_the_time():
    """hf_dynaspec.bench.timer: each case's factory (its set-up) runs before every measurement but is not timed;
    the starting case rotates from repeat to repeat."""
    import time

    from hf_dynaspec.bench.timer import interleaved_medians

    order = []

    def case(name: str, setup_s: float, run_s: float):
        def factory():
            time.sleep(setup_s)
            return lambda: (order.append(name), time.sleep(run_s))
        return factory
    medians = interleaved_medians({"a": case("a", 0.03, 0.002), "b": case("b", 0.0, 0.012)}, repeats=4, warmup=0)
    assert 1.5 < medians["a"] < 10 and 11 < medians["b"] < 25, medians  # a's 30 ms set-up is not counted
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_results_table_records_say_what_and_where(tmp_path):
    from hf_dynaspec.bench.results_table import append_records, make_record, read_records

    record = make_record("generate", "dynaspec:8", {"tau": 2.0}, target="t", assistant_version="8", command="cmd")
    append_records(tmp_path / "r" / "table.jsonl", [record, make_record("generate", "vanilla", {}, command="cmd")])
    rows = read_records(tmp_path / "r" / "table.jsonl", method="dynaspec:8")
    assert len(rows) == 1 and rows[0]["metrics"] == {"tau": 2.0} and rows[0]["assistant_version"] == "8"
    assert {"cpu", "cpu_flags", "cores"} <= set(rows[0]["host"]) and rows[0]["date"].endswith("+00:00")
    assert rows[0]["torch"] and rows[0]["transformers"] and rows[0]["command"] == "cmd"


def test_bench_results_table_records_one_row_per_method_with_host_and_command(tmp_path):
    from hf_dynaspec.bench.command import report_records
    from hf_dynaspec.bench.results_table import append_records, read_records

    report = {"target": "t", "dtype": "bf16", "n_prompts": 3, "max_new_tokens": 16, "assistant": "a", "cpu_verify": None,
              "command": "hf-dynaspec bench ...",
              "methods": {"vanilla": {"tokens_per_s": 10.0, "speedup": 1.0, "exact": True, "n_mismatch": 0},
                          "dynaspec:8": {"tau": 2.5, "avg_shortlist": 900.0, "tokens_per_s": 20.0, "speedup": 2.0,
                                         "exact": True, "n_mismatch": 1}}}
    append_records(tmp_path / "r.jsonl", report_records(report, "run.json"))
    rows = read_records(tmp_path / "r.jsonl", benchmark="generate")
    assert [r["method"] for r in rows] == ["vanilla", "dynaspec:8"]
    assert rows[1]["metrics"]["tau"] == 2.5 and rows[1]["metrics"]["file"] == "run.json"
    assert rows[1]["command"] == "hf-dynaspec bench ..." and rows[1]["host"]["cores"] >= 1
    assert rows[0]["assistant_version"] == "a"  # no saved artifact there: the path alone


def test_a_results_record_names_the_weights_of_a_saved_assistant(tmp_path):
    """assistants/ is rewritten when a version ships: the record carries the weights' sha256 beside the path."""
    from hf_dynaspec.bench.command import report_records

    (tmp_path / "checksums.json").write_text(json.dumps({"sha256": {"model.safetensors": "ab" * 32}}))
    report = {"target": "t", "dtype": "bf16", "n_prompts": 1, "max_new_tokens": 4, "assistant": str(tmp_path),
              "methods": {"vanilla": {"tokens_per_s": 1.0}}}
    assert report_records(report)[0]["assistant_version"] == f"{tmp_path} (weights sha256 {'ab' * 6})"


def test_a_timed_run_synchronises_the_device_at_its_start_its_prefill_and_its_end(monkeypatch):
    """On CUDA the clock reads must follow a synchronisation, or the prefill/decode split stamps when kernels
    were queued. The order of events: wait, prefill forward (then wait), later forwards (no waits), wait."""
    import hf_dynaspec.bench.harness as harness

    target = one_layer_target("qwen2")
    events = []
    # Every card the target spans is waited for (one here: the CPU, which has nothing to wait for).
    monkeypatch.setattr(harness, "synchronize", lambda devices: events.append(("sync", [d.type for d in devices])))
    target.register_forward_hook(lambda *_: events.append(("forward", None)))
    run = harness.timed_run(target, Method("target"), torch.tensor([[3, 4, 5, 6]]), max_new_tokens=3)
    waited = ("sync", ["cpu"])
    assert events == [waited, ("forward", None), waited, ("forward", None), ("forward", None), waited]
    assert run.target_passes == 3 and 0 < run.prefill_seconds <= run.seconds


def test_the_readme_summary_picks_each_hosts_latest_default_run():
    """Per host kind, target and dtype: the latest run that timed `auto` (not a later run without it), its best
    other method (never another `auto`), and AVX2, AVX-512 BF16 and AMX hosts kept apart."""
    from hf_dynaspec.bench.summary import host_kind, summary_tables

    def record(flags, file, method, speedup, date, target="t"):
        return {"benchmark": "generate", "target": target, "method": method, "date": date,
                "host": {"cpu_flags": flags},
                "metrics": {"file": f"benchmarks/results/{file}", "speedup": speedup, "tau": 1.5, "dtype": "bf16",
                            "n_prompts": 7, "max_new_tokens": 64, "tokens_per_s": 10.0}}

    fast, avx2, amx = ["avx512_bf16", "avx512f", "avx2"], ["avx2"], ["amx_bf16", "avx512_bf16", "avx512f", "avx2"]
    wide = ["avx512f", "avx2"]  # AVX-512 without bf16 units
    records = [record(fast, "old.json", "vanilla", 1.0, "2026-01-01"),
               record(fast, "old.json", "dynaspec:8", 1.2, "2026-01-01"),
               record(fast, "with_auto.json", "vanilla", 1.0, "2026-01-02"),
               record(fast, "with_auto.json", "dynaspec:8+auto", 1.8, "2026-01-02"),
               record(fast, "with_auto.json", "dynaspec-tree:8+auto", 1.9, "2026-01-02"),
               record(fast, "with_auto.json", "dynaspec:8+draft:3", 1.4, "2026-01-02"),
               record(fast, "with_auto.json", "vanilla-fast", 1.5, "2026-01-02"),
               record(fast, "later_no_auto.json", "vanilla", 1.0, "2026-01-03"),
               record(fast, "later_no_auto.json", "eagle", 0.9, "2026-01-03"),
               record(avx2, "slow.json", "vanilla", 1.0, "2026-01-01"),
               record(avx2, "slow.json", "dynaspec:8+auto", 1.3, "2026-01-01"),
               record(avx2, "slow.json", "llama.cpp:/home/someone/models/t-bf16.gguf", 2.9, "2026-01-01"),
               record(amx, "tiles.json", "vanilla", 1.0, "2026-01-01"),
               record(amx, "tiles.json", "dynaspec:8+auto", 1.2, "2026-01-01"),
               record(wide, "wide.json", "vanilla", 1.0, "2026-01-01"),
               record(wide, "wide.json", "dynaspec:8+auto", 1.1, "2026-01-01")]
    assert [host_kind(r) for r in records[-7:]] == ["AVX2"] * 3 + ["AVX-512 BF16 + AMX"] * 2 + ["AVX-512 without BF16"] * 2
    assert host_kind(records[0]) == "AVX-512 BF16"

    def part(tables, kind):  # the rows of one host kind
        return "\n".join(line for line in tables.splitlines() if line.startswith(f"| {kind} |"))

    tables = summary_tables(records)
    fast_part, slow_part, tiles_part, wide_part = (part(tables, kind) for kind in (
        "AVX-512 BF16", "AVX2", "AVX-512 BF16 + AMX", "AVX-512 without BF16"))
    assert "`tiles.json`" in tiles_part and "tiles" not in fast_part + slow_part + wide_part  # AMX hosts kept apart
    assert "`wide.json`" in wide_part and "wide" not in fast_part + slow_part + tiles_part
    kinds = ("| AVX-512 BF16 + AMX |", "| AVX-512 BF16 |", "| AVX-512 without BF16 |", "| AVX2 |")
    assert [tables.index(kind) for kind in kinds] == sorted(tables.index(kind) for kind in kinds)
    assert "No end-to-end run" not in tables
    assert summary_tables(records[:9]).endswith(
        "No end-to-end run in the results table yet on: AVX-512 BF16 + AMX, AVX-512 without BF16, AVX2.\n")
    assert "`with_auto.json`" in fast_part and "later_no_auto" not in fast_part and "old.json" not in fast_part
    # Speedups over both plain paths (1.8 / 1.5 = 1.2); plain generate() on the fast kernels is a baseline, never
    # the best other method, and a run that did not time it says so.
    assert "`dynaspec:8+auto` 1.80x / 1.20x" in fast_part and "`dynaspec:8+draft:3` 1.40x / 0.93x" in fast_part
    assert "| 10.00 (1.50x) |" in fast_part and "`vanilla-fast`" not in fast_part
    assert "`slow.json`" in slow_part and "1.30x / -" in slow_part and "not timed" in slow_part
    assert "`llama.cpp:t-bf16.gguf` 2.90x" in slow_part and "/home/someone" not in slow_part  # the file, not its path
    sampled = [record(fast, "sampled.json", "vanilla", 1.0, "2026-01-04"),
               record(fast, "sampled.json", "dynaspec:8+auto", 1.6, "2026-01-04")]
    for one in sampled:
        one["metrics"]["mode"] = "sampled"
    subset = [record(fast, "copies.json", "vanilla", 1.0, "2026-01-05"),
              record(fast, "copies.json", "dynaspec:8+auto", 2.5, "2026-01-05")]
    for one in subset:  # a later run of two categories only (--categories) is not the target's headline
        one["metrics"]["categories"] = ["summarization", "rag"]
    both = part(summary_tables(records + sampled + subset), "AVX-512 BF16")
    assert "copies.json" not in both
    assert "| t | bf16 | 7 x 64 | 10.00 | 10.00 (1.50x) | `dynaspec:8+auto` 1.80x" in both  # greedy row kept
    assert "| t | bf16, sampled | 7 x 64 | 10.00 | not timed | `dynaspec:8+auto` 1.60x / -" in both


def test_a_sampled_bench_draws_each_run_from_its_own_seed_and_leaves_exactness_to_the_tests(target):
    from hf_dynaspec.bench.harness import run_seed

    assistant = imitating_assistant(target, noise=0.3, num_assistant_tokens=3)
    methods = build_methods(["vanilla", "eagle"], assistant_factory=lambda **o: assistant)
    sampling = {"temperature": 1.5, "top_k": 20, "repetition_penalty": 1.1}

    def bench(seed):
        outputs, stats = {}, []
        report = run_benchmark(target, methods, _prompts(3), max_new_tokens=10, dtype="fp32", target_name="tiny",
                               progress=False, sampling=sampling, seed=seed,
                               on_run=lambda p, m, run: (outputs.__setitem__((p.prompt_id, m.key), run.new_ids.tolist()),
                                                         stats.append(run.stats)))
        return report, outputs, stats

    report, outputs, stats = bench(0)
    assert bench(0)[1] == outputs  # a sampled bench repeats exactly
    assert bench(7)[1] != outputs  # ... and its seed decides the draws
    assert (report["mode"], report["sampling"], report["seed"]) == ("sampled", sampling, 0)
    for index, prompt in enumerate(_prompts(3)):  # vanilla is plain sampled generate() from its run's own seed
        torch.manual_seed(run_seed(0, index, 0))
        plain = target.generate(prompt.input_ids, attention_mask=torch.ones_like(prompt.input_ids), do_sample=True,
                                max_new_tokens=10, **sampling)
        assert outputs[(prompt.prompt_id, "vanilla")] == plain[0, prompt.input_ids.shape[1]:].tolist()
    greedy = [target.generate(p.input_ids, attention_mask=torch.ones_like(p.input_ids), do_sample=False,
                              max_new_tokens=10)[0, p.input_ids.shape[1]:].tolist() for p in _prompts(3)]
    assert [outputs[(p.prompt_id, "vanilla")] for p in _prompts(3)] != greedy  # it sampled
    eagle = report["methods"]["eagle"]
    assert eagle["exact"] is None and eagle["n_mismatch"] == 0 and "enumeration" in report["exactness"]
    drafted = [s for s in stats if s]
    assert eagle["acceptance"] == pytest.approx(sum(s["accepted"] for s in drafted) / sum(s["drafted"] for s in drafted))
    table = markdown_table(report)
    assert "sampled" in table and "by the tests (sampled)" in table and table.count("exactness:") == 1


def test_sample_takes_the_targets_published_settings_and_overrides_them():
    import argparse

    from transformers import GenerationConfig

    from hf_dynaspec.bench.command import report_records, sampling_settings

    def args(sample=True, **given):
        names = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
        return argparse.Namespace(sample=sample, **{name: given.get(name) for name in names})

    published = GenerationConfig(do_sample=True, temperature=0.7, top_p=0.8, top_k=20, repetition_penalty=1.1)
    assert sampling_settings(args(), published) == {"temperature": 0.7, "top_p": 0.8, "top_k": 20,
                                                    "repetition_penalty": 1.1}
    assert sampling_settings(args(top_k=5, temperature=1.0), published) == {"top_p": 0.8, "top_k": 5,
                                                                            "repetition_penalty": 1.1}
    assert sampling_settings(args(sample=False), published) is None
    with pytest.raises(ValueError, match="--top-p sets a sampling setting: add --sample"):
        sampling_settings(args(sample=False, top_p=0.9), None)
    report = {"target": "t", "n_prompts": 1, "max_new_tokens": 4, "dtype": "bf16", "mode": "sampled",
              "sampling": {"top_k": 5}, "methods": {"vanilla": {"tau": None, "exact": None, "acceptance": None}}}
    record = report_records(report)[0]["metrics"]
    assert (record["mode"], record["sampling"]) == ("sampled", {"top_k": 5})


def test_a_sampled_bench_of_a_zoo_model_takes_the_zoos_published_settings(tmp_path, monkeypatch):
    """`bench --sample` of a zoo model samples with the settings the model's Hub page publishes (the zoo's record):
    its cached copy, converted from a GGUF, has an empty generation config, which would sample at temperature 1
    with no top-k or top-p."""
    import hf_dynaspec.bench.harness as harness
    import hf_dynaspec.bench.prompts as bench_prompts
    import hf_dynaspec.bench.runner as runner
    from hf_dynaspec import zoo
    from hf_dynaspec.bench.command import SAMPLING_OPTIONS, run
    from hf_dynaspec.cli import build_parser

    name = "qwen2.5-coder-0.5b-instruct"
    target = one_layer_target("qwen2")
    assert target.generation_config.temperature in (None, 1.0) and not target.generation_config.top_k  # the case
    monkeypatch.setattr(runner, "load_target", lambda *args, **kwargs: (target, None))
    monkeypatch.setattr(bench_prompts, "encode_prompts", lambda *args, **kwargs: [])
    asked = {}

    class Stop(Exception):
        pass

    def benchmark(*args, sampling=None, **kwargs):
        asked["sampling"] = sampling
        raise Stop
    monkeypatch.setattr(harness, "run_benchmark", benchmark)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"question_id": 1, "category": "coding", "turns": ["Reverse a string."]}\n')
    args = build_parser().parse_args(["bench", "--target", name, "--methods", "vanilla", "--sample",
                                      "--prompts", str(prompts)])
    with pytest.raises(Stop):
        run(args)
    published = {k: v for k, v in zoo.published_sampling(name).items() if k in SAMPLING_OPTIONS}
    assert published and asked["sampling"] == published, (asked, published)
