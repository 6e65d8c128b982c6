"""Data-curve training: the warmup-stable-decay schedule, snapshots and branches, and mixed precision on CPU.

A curve's point is a branch that starts from a snapshot of the constant-rate run and decays over its budget's last
tokens; it must be exactly the drafter a straight run to that budget would train, or the curve measures the
snapshot machinery instead of the data.
"""

from __future__ import annotations

import json

import pytest
import torch
from conftest import VOCAB, one_layer_target
from safetensors.torch import load_file

from recipes.training_schedule import parse_token_counts, training_precision, wsd_factor


def test_wsd_warms_up_by_steps_holds_then_decays_linearly_to_zero_by_tokens():
    assert [wsd_factor(step, 0, 4, 1000, 200) for step in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert wsd_factor(10, 800, 4, 1000, 200) == 1.0  # the decay starts after max - decay tokens
    assert wsd_factor(10, 850, 4, 1000, 200) == pytest.approx(0.75)
    assert wsd_factor(10, 1000, 4, 1000, 200) == 0.0
    assert wsd_factor(10, 1200, 4, 1000, 200) == 0.0  # never negative past the budget
    assert wsd_factor(10, 999, 4, 1000, 0) == 1.0  # no decay: the constant-rate run a curve branches from


def test_token_counts_parse_sorted_and_bad_input_names_the_option():
    assert parse_token_counts("300,100, 200") == [100, 200, 300]
    assert parse_token_counts("") == []
    with pytest.raises(SystemExit, match="--snapshot-at-tokens"):
        parse_token_counts("1e5")


def test_auto_precision_is_bf16_only_where_the_cpu_multiplies_bf16_natively(monkeypatch):
    import recipes.training_schedule as schedule

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(schedule, "native_cpu_bf16", lambda: False)
    assert training_precision("auto") == "no"
    monkeypatch.setattr(schedule, "native_cpu_bf16", lambda: True)
    assert training_precision("auto") == "bf16"
    assert training_precision("no") == "no"


def test_auto_precision_on_a_gpu_is_bf16_only_with_bf16_tensor_cores(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what a T4 reports (emulated)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (7, 5))
    assert training_precision("auto") == "fp16"
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (8, 0))
    assert training_precision("auto") == "bf16"


def _features(tmp_path, num_sequences=24):
    """A features directory of the tiny target, made as build_features makes one."""
    from safetensors.torch import save_file

    from recipes.build_features import shard_tensors

    target = one_layer_target("qwen2", seed=6).requires_grad_(False)
    generator = torch.Generator().manual_seed(0)
    tokenized = [(torch.randint(0, VOCAB, (30 + i % 7,), generator=generator).tolist(), 5) for i in range(num_sequences)]
    directory = tmp_path / "features"
    directory.mkdir()
    save_file(shard_tensors(target, tokenized, 8, tokens_per_batch=128), str(directory / "shard_00000.safetensors"))
    return target, directory


def _train(monkeypatch, target, features, out, *extra):
    import recipes.train_drafter as train_drafter

    monkeypatch.setattr(train_drafter, "load_target", lambda name, dtype: (target, None))
    train_drafter.main(["--target", "tiny", "--features", str(features), "--out", str(out), "--tokens-per-batch", "96",
                        "--val-tokens", "60", "--warmup-steps", "2", "--negatives", "8", "--unroll", "2",
                        "--validate-every", "1000", "--checkpoint-every", "1000", "--mixed-precision", "no", *extra])
    return load_file(str(out / "assistant" / "model.safetensors")), [json.loads(line) for line in
                                                                      (out / "train_log.jsonl").read_text().splitlines()]


def test_a_branch_from_a_snapshot_trains_exactly_the_straight_runs_drafter(tmp_path, monkeypatch):
    target, features = _features(tmp_path)
    budget, decay = 400, 150
    straight, straight_log = _train(monkeypatch, target, features, tmp_path / "straight", "--schedule", "wsd",
                                    "--max-tokens", str(budget), "--decay-tokens", str(decay))
    # The constant-rate run goes on past the budget and keeps a snapshot where the budget's decay begins.
    _, main_log = _train(monkeypatch, target, features, tmp_path / "main", "--schedule", "wsd", "--max-tokens", "700",
                         "--snapshot-at-tokens", str(budget - decay))
    snapshot = tmp_path / "main" / "snapshots" / f"tokens_{budget - decay}"
    assert (snapshot / "checkpoint" / "progress.json").is_file()
    assert main_log[-1]["tokens"] >= 700 and all(r["lr"] == pytest.approx(3e-4) for r in main_log[3:])
    branch, branch_log = _train(monkeypatch, target, features, tmp_path / "branch", "--schedule", "wsd",
                                "--max-tokens", str(budget), "--decay-tokens", str(decay), "--resume-from", str(snapshot))
    assert branch_log[-1]["tokens"] == straight_log[-1]["tokens"] >= budget
    assert branch_log[-1]["lr"] == straight_log[-1]["lr"] < 3e-4 * 0.5  # decayed
    assert branch.keys() == straight.keys()
    for name in straight:  # same data order, optimizer state and rates: the same weights, bit for bit
        assert torch.equal(branch[name], straight[name]), name


def test_resume_from_refuses_a_directory_without_training_state(tmp_path, monkeypatch):
    target, features = _features(tmp_path)
    with pytest.raises(SystemExit, match="no training state"):
        _train(monkeypatch, target, features, tmp_path / "out", "--resume-from", str(tmp_path))


@pytest.fixture
def fresh_accelerator_state():
    """accelerate keeps one process-wide state: a run in another precision needs it reset (and reset after)."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_training_on_cpu_really_runs_the_drafter_in_bf16(tmp_path, monkeypatch, fresh_accelerator_state):
    # The loss calls the drafter's step, not its forward: without the explicit autocast, accelerate's bf16 setting
    # changed nothing (identical weights to fp32), which is the bug this catches.
    target, features = _features(tmp_path)
    seen = []
    linear = torch.nn.functional.linear

    def recording_linear(x, weight, bias=None):
        out = linear(x, weight, bias)
        seen.append(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", recording_linear)
    import recipes.train_drafter as train_drafter

    monkeypatch.setattr(train_drafter, "load_target", lambda name, dtype: (target, None))
    args = ["--target", "tiny", "--features", str(features), "--tokens-per-batch", "96", "--val-tokens", "60",
            "--negatives", "8", "--max-steps", "2", "--validate-every", "1000", "--checkpoint-every", "1000"]
    train_drafter.main(args + ["--out", str(tmp_path / "bf16"), "--mixed-precision", "bf16"])
    assert torch.bfloat16 in seen
    seen.clear()
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    train_drafter.main(args + ["--out", str(tmp_path / "fp32"), "--mixed-precision", "no"])
    assert torch.bfloat16 not in seen and seen


def test_data_curve_report_fits_inverts_and_caps_the_log_linear_trend(tmp_path):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("data_curve", Path(__file__).parents[1] / "benchmarks" / "data_curve.py")
    data_curve = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(data_curve)
    methods, results = {}, {}
    for tokens in (10_000, 100_000, 1_000_000):
        run = tmp_path / "runs" / f"b{tokens}"
        (run / "assistant").mkdir(parents=True)
        (run / "assistant" / "config.json").write_text("{}")
        (run / "train_log.jsonl").write_text(json.dumps({"step": 0, "tokens": 0, "seconds": 0}) + "\n"
                                             + json.dumps({"step": 9, "tokens": tokens, "seconds": 60.0}) + "\n")
        decades = len(str(tokens)) - 1  # log10
        methods[f"own-{tokens}/eagle+draft:2"] = {"tau": 1.0 + 0.25 * decades}
        methods[f"own-{tokens}/eagle+draft:4"] = {"tau": 1.0 + 0.5 * decades}
        results[f"own-{tokens} on dev"] = {"val_response_top1_1": 0.1 * decades, "val_response_top1_2": 0.05,
                                            "val_response_top1_3": 0.01, "sim_tau_k2": 1.2, "sim_tau_k4": 1.3}
    results["shipped on dev"] = {"val_response_top1_1": 0.7}
    methods["shipped/eagle+draft:2"] = {"tau": 1.9}
    (tmp_path / "bench.json").write_text(json.dumps({"methods": methods}))
    (tmp_path / "agreement.json").write_text(json.dumps({"results": results}))
    data_curve.main(["--target", "tiny", "--runs", f"own={tmp_path / 'runs'}", "--bench", str(tmp_path / "bench.json"),
                     "--agreement", str(tmp_path / "agreement.json"), "--reference", "big=1e12",
                     "--json", str(tmp_path / "curve.json"), "--plot", str(tmp_path / "curve.png")])
    assert (tmp_path / "curve.png").stat().st_size > 10_000
    report = json.loads((tmp_path / "curve.json").read_text())
    k2, k4 = report["fits"]["own tau K=2"], report["fits"]["own tau K=4"]
    assert k2["a"] == pytest.approx(1.0) and k2["b_per_decade"] == pytest.approx(0.25)
    assert k2["tokens_for_tau_2.5"] == pytest.approx(1e6)  # 1 + 0.25 * 6 = 2.5
    assert k2["predicted"]["big"] == 3.0  # 1 + 0.25 * 12 = 4 is past what a chain of 2 can reach: capped at K + 1
    assert k4["predicted"]["big"] == 5.0 and k4["tokens_for_tau_2.5"] == pytest.approx(1e3)
    assert [p["dev_agreement"][0] for p in report["points"]] == pytest.approx([0.4, 0.5, 0.6])
    assert "| own | 1,000,000 | 9 | 2.50 | 1.20 / 1.30 | 0.600 / 0.050 / 0.010 |" in report["table"]
    assert report["others"] == {"shipped": {"val_response_top1_1": 0.7, "tau eagle+draft:2": 1.9}}
    assert report["fits"]["own sim_tau K=2"]["b_per_decade"] == pytest.approx(0.0, abs=1e-9)


def test_simulated_chain_tau_counts_rounds_of_accepted_drafts_plus_the_targets_token(tmp_path):
    from hf_dynaspec import DynaSpecAssistant
    from recipes.training_data import collate, load_sequences
    from recipes.training_objective import draft_pass

    feature_agreement = _feature_agreement_module()
    target, features = _features(tmp_path, num_sequences=1)
    batch = collate(load_sequences(features / "shard_00000.safetensors"), "cpu")
    drafter = DynaSpecAssistant.from_target(target).drafter
    length, start = int(batch.valid[0].sum()), int(batch.response[0].nonzero()[0])
    with torch.no_grad():
        first = draft_pass(drafter, drafter.embed(batch.input_ids[:, 1:]), batch.hidden[:, :-1])
        guesses = (first @ target.lm_head.weight.T).argmax(-1)[0]  # index t guesses the token after x_{t+1}
    batch.topk_ids[0, 1:, 0] = (guesses + 1) % VOCAB  # the target never agrees: one token per round
    assert feature_agreement.simulated_chain_tau(drafter, [batch], [1, 3]) == {"sim_tau_k1": 1.0, "sim_tau_k3": 1.0}
    batch.topk_ids[0, 1:, 0] = guesses  # every first draft is the target's token: K = 1 gives 2 per round
    generated = length - 1 - start
    tau = feature_agreement.simulated_chain_tau(drafter, [batch], [1])["sim_tau_k1"]
    assert tau == pytest.approx(generated / -(-generated // 2))


def test_sampled_acceptance_sums_the_smaller_of_the_two_processed_distributions(tmp_path):
    """Where the target's stored distribution is the drafter's own, a drawn draft is always accepted (1 at both
    positions); moved by one position, the score equals sum_x min(p, q) computed with transformers' own warpers over
    the whole vocabulary, position by position (an off-by-one in the pairing, or warpers that differ, fail here)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from hf_dynaspec import DynaSpecAssistant
    from recipes.train_drafter import teacher_forced_passes
    from recipes.training_data import collate, load_sequences

    feature_agreement = _feature_agreement_module()
    target, features = _features(tmp_path, num_sequences=3)
    batch = collate(load_sequences(features / "shard_00000.safetensors"), "cpu")
    drafter = DynaSpecAssistant.from_target(target).drafter.eval()
    settings = (0.7, 6, 0.9)
    with torch.no_grad():
        logits = [(hidden @ target.lm_head.weight.T).float() for hidden in teacher_forced_passes(drafter, batch, 2)]
    for depth in (1, 2):  # the target's distribution after x_{t+depth} is the drafter's depth-d guess there
        top = logits[depth - 1].log_softmax(-1).topk(8, dim=-1)
        batch.topk_logp[:, depth:], batch.topk_ids[:, depth:] = top.values, top.indices
        scored = feature_agreement.sampled_acceptance(drafter, [batch], 2, settings)
        assert scored[f"sampled_accept_{depth}"] == pytest.approx(1.0)
    top = logits[0].log_softmax(-1).topk(8, dim=-1)
    batch.topk_logp[:, 1:-1], batch.topk_ids[:, 1:-1] = top.values[:, 1:], top.indices[:, 1:]  # one position late

    def warped(rows):
        for warper in (TemperatureLogitsWarper(0.7), TopKLogitsWarper(6), TopPLogitsWarper(0.9)):
            rows = warper(None, rows)
        return rows.softmax(-1)

    scored_rows = (batch.valid[:, 1:] & batch.valid[:, :-1] & batch.response[:, 1:])
    stored = torch.full(logits[0].shape, float("-inf")).scatter_(-1, batch.topk_ids[:, 1:], batch.topk_logp[:, 1:])
    p, q = warped(stored[scored_rows]), warped(logits[0][scored_rows])
    expected = float(torch.minimum(p, q).sum(-1).mean())
    measured = feature_agreement.sampled_acceptance(drafter, [batch], 1, settings)["sampled_accept_1"]
    assert measured == pytest.approx(expected, abs=1e-5) and measured < 0.9


def _feature_agreement_module():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("feature_agreement",
                                                  Path(__file__).parents[1] / "benchmarks" / "feature_agreement.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_agreement_of_a_fused_drafter_reads_the_fused_states_its_features_hold(tmp_path, monkeypatch):
    """Features built with fused hidden states score a fused drafter on them (and a plain one beside it); a source
    without the layers a drafter fuses is refused by name, not scored on missing inputs."""
    from safetensors.torch import save_file

    from hf_dynaspec import DynaSpecAssistant
    from recipes.build_features import shard_tensors
    from recipes.training_data import load_sequences

    feature_agreement = _feature_agreement_module()
    target, plain_features = _features(tmp_path, num_sequences=4)
    generator = torch.Generator().manual_seed(1)
    tokenized = [(torch.randint(0, VOCAB, (30 + i,), generator=generator).tolist(), 5) for i in range(4)]
    features = tmp_path / "fused-features"
    features.mkdir()
    save_file(shard_tensors(target, tokenized, 8, tokens_per_batch=128, fused_ids=[0, 1]),
              str(features / "shard_00000.safetensors"))
    (features / "meta.json").write_text(json.dumps({"fused_hidden_state_ids": [0, 1]}))
    DynaSpecAssistant.from_target(target, fused_hidden_state_ids=[0, 1]).save_pretrained(tmp_path / "fused")
    DynaSpecAssistant.from_target(target).save_pretrained(tmp_path / "plain")
    monkeypatch.setattr(feature_agreement, "load_target", lambda name, dtype: (target, None))
    common = ["--target", "tiny", "--depths", "2", "--json", str(tmp_path / "out.json")]
    feature_agreement.main([*common, "--assistant", f"fused={tmp_path / 'fused'}", f"plain={tmp_path / 'plain'}",
                            "--features", f"f={features}"])
    results = json.loads((tmp_path / "out.json").read_text())["results"]
    args = feature_agreement.argparse.Namespace(tokens_per_batch=2048, depths=2, answers_only=False, chain_tau="",
                                                copy_split=False, sampled="")
    sequences = load_sequences(features / "shard_00000.safetensors", fused=True)
    for name in ("fused", "plain"):
        drafter = DynaSpecAssistant.from_pretrained(tmp_path / name, target=target).drafter.eval()
        assert results[f"{name} on f"] == pytest.approx(feature_agreement.score(drafter, sequences, args))
    with pytest.raises(SystemExit, match="fuses"):
        feature_agreement.main([*common, "--assistant", f"fused={tmp_path / 'fused'}", "--features",
                                f"g={plain_features}"])


def test_per_category_agreement_scores_exactly_each_categorys_sequences(tmp_path, monkeypatch):
    from hf_dynaspec import DynaSpecAssistant
    from recipes.training_data import load_sequences

    feature_agreement = _feature_agreement_module()
    target, features = _features(tmp_path, num_sequences=5)
    DynaSpecAssistant.from_target(target).save_pretrained(tmp_path / "drafter")
    monkeypatch.setattr(feature_agreement, "load_target", lambda name, dtype: (target, None))
    labels = ["code", "chat", "code", "chat", "math"]  # interleaved: a grouping by position would mix them
    (tmp_path / "responses.jsonl").write_text("".join(json.dumps({"category": c}) + "\n" for c in labels))
    common = ["--target", "tiny", "--assistant", f"d={tmp_path / 'drafter'}", "--depths", "2", "--chain-tau", "2",
              "--copy-split"]
    feature_agreement.main([*common, "--features", f"f={features}", "--categories", str(tmp_path / "responses.jsonl"),
                            "--json", str(tmp_path / "all.json")])
    results = json.loads((tmp_path / "all.json").read_text())["results"]
    assert set(results) == {"d on f", "d on f [code]", "d on f [chat]", "d on f [math]"}

    sequences = load_sequences(features / "shard_00000.safetensors")
    drafter = DynaSpecAssistant.from_pretrained(tmp_path / "drafter", target=target).drafter.eval()
    args = feature_agreement.argparse.Namespace(tokens_per_batch=2048, depths=2, answers_only=False, chain_tau="2",
                                                copy_split=True, sampled="")
    for category in ("code", "chat", "math"):
        alone = feature_agreement.score(drafter, [s for s, c in zip(sequences, labels) if c == category], args)
        assert results[f"d on f [{category}]"] == pytest.approx(alone)
    confidences = torch.cat([s.topk_logp[s.response][:, 0].exp() for s in sequences])
    assert results["d on f"]["target_top1_prob"] == pytest.approx(float(confidences.mean()))
    assert results["d on f"]["answer_tokens"] == sum(int(s.response.sum()) for s in sequences)

    (tmp_path / "short.jsonl").write_text("".join(json.dumps({"category": c}) + "\n" for c in labels[:4]))
    with pytest.raises(SystemExit, match="4 rows but --features f has 5 sequences"):
        feature_agreement.main([*common, "--features", f"f={features}", "--categories", str(tmp_path / "short.jsonl")])


def test_copyable_means_the_bigram_already_occurred_before_the_draft():
    feature_agreement = _feature_agreement_module()
    #            x0 x1 x2 x3 x4 x5
    input_ids = [7, 8, 9, 7, 8, 3]
    # labels[t] is the target's token after x_{t+1}; copyable if (x_{t+1}, labels[t]) occurs in x_0..x_t
    labels = [9, 7, 8, 9, 5]
    # t=0: (8, 9) not in [] -> no; t=1: (9, 7) not in {(7,8)} -> no; t=2: (7, 8) in {(7,8),(8,9)} -> yes;
    # t=3: (8, 9) in ... -> yes; t=4: (3, 5) -> no
    assert feature_agreement.copyable(input_ids, labels) == [False, False, True, True, False]
    # the bigram must lie wholly before the draft: (8, 9) at x_4, x_5 would not count for t = 3
    assert feature_agreement.copyable([1, 2, 3, 8, 9, 4], [0, 0, 0, 9, 0]) == [False] * 5


def test_copy_split_counts_every_answer_draft_once_as_validation_does(tmp_path):
    from hf_dynaspec import DynaSpecAssistant
    from recipes.train_drafter import validate
    from recipes.training_data import collate, load_sequences

    feature_agreement = _feature_agreement_module()
    target, features = _features(tmp_path, num_sequences=4)
    sequences = load_sequences(features / "shard_00000.safetensors")
    for s in sequences:  # the answer ends by repeating the prompt's start, and the target predicts the text itself
        s.input_ids[-8:] = s.input_ids[:8].clone()
        s.topk_ids[:-1, 0] = s.input_ids[1:]
    batches = [collate(sequences, "cpu")]
    drafter = DynaSpecAssistant.from_target(target).drafter.eval()
    split = feature_agreement.copy_split(drafter, batches)
    answers = sum(int(s.response[1:].sum()) for s in sequences)
    assert 0 < split["copyable_share"] < 1
    hits = (split["copyable_share"] * split["top1_1_copyable"] + (1 - split["copyable_share"]) * split["top1_1_fresh"])
    assert hits * answers == pytest.approx(validate(drafter, batches, 1, True)["val_top1_1"] * answers)


_TWO_RANKS = """
import sys
sys.path.insert(0, {tests!r})
import torch
from accelerate import PartialState
from safetensors.torch import save_file

from conftest import one_layer_target
import recipes.train_drafter as train_drafter

target = one_layer_target("qwen2", seed=6).requires_grad_(False)
train_drafter.load_target = lambda name, dtype: (target, None)
assistant = train_drafter.main(["--target", "tiny", "--features", {features!r}, "--out", {out!r},
                                "--tokens-per-batch", "96", "--val-tokens", "60", "--warmup-steps", "1",
                                "--negatives", "8", "--max-steps", "4", "--lr", "3e-3", "--validate-every", "1000",
                                "--checkpoint-every", "1000", "--mixed-precision", "no"])
rank = PartialState().process_index
save_file({{k: v.contiguous() for k, v in assistant.drafter.state_dict().items()}}, {out!r} + f"/rank{{rank}}.safetensors")
"""


@pytest.mark.slow
def test_two_processes_train_one_drafter(tmp_path):
    """Data-parallel training on two CPU processes (gloo), each on its own batches: the gradients are averaged,
    so both ranks end with the same weights, and the files are written once."""
    import subprocess
    import sys
    from pathlib import Path

    _, features = _features(tmp_path)
    out = tmp_path / "out"
    script = tmp_path / "two_ranks.py"
    script.write_text(_TWO_RANKS.format(tests=str(Path(__file__).parent), features=str(features), out=str(out)))
    root = Path(__file__).parent.parent
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             str(script)], cwd=root, capture_output=True, text=True, timeout=600,
                            env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)})
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = load_file(str(out / "rank0.safetensors")), load_file(str(out / "rank1.safetensors"))
    saved = load_file(str(out / "assistant" / "model.safetensors"))  # written once, from the main process
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), f"{name} differs between the ranks"
        assert torch.equal(saved["drafter." + name], first[name].to(saved["drafter." + name].dtype))
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == [0, 1, 2, 3, 4]  # logged once, by the main process
    assert log[1]["loss"] != log[4]["loss"]  # the weights moved: two copies of the initial drafter are not the test
