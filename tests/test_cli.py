"""The command line: export of a static shortlist for serving engines, and argument errors."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import VOCAB, imitating_assistant, tiny_target
from safetensors.torch import load_file

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.cli import main
from hf_dynaspec.generation.costs import verify_kernel
from hf_dynaspec.modeling.shortlist import cluster_vocabulary, load_token_list


def test_export_shortlist_writes_sglang_map_and_d2t(tmp_path):
    target = tiny_target("llama")
    assistant = DynaSpecAssistant.from_target(target)
    ranking = torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))
    assistant.shortlists.set_frequency_list(ranking, kind="frspec")
    assistant.shortlists.set_clusters(cluster_vocabulary(target.lm_head.weight.detach(), 4, always_ids=[int(ranking[-1])]))
    assistant.save_pretrained(tmp_path / "a")
    assert main(["export-shortlist", "--assistant", str(tmp_path / "a"), "--size", "10", "--out", str(tmp_path / "x")]) == 0
    ids = load_token_list(tmp_path / "x" / "token_map_11.pt", VOCAB)
    assert ids[:10].tolist() == ranking[:10].tolist() and int(ids[10]) == int(ranking[-1])  # EOS-like id added
    maps = load_file(str(tmp_path / "x" / "d2t_t2d.safetensors"))
    assert torch.equal(torch.arange(11) + maps["d2t"], ids.sort().values)
    assert maps["t2d"].sum() == 11 and maps["t2d"][ids].all()


def test_export_shortlist_without_ranking_fails_clearly(tmp_path, capsys):
    DynaSpecAssistant.from_target(tiny_target("llama")).save_pretrained(tmp_path / "a")
    assert main(["export-shortlist", "--assistant", str(tmp_path / "a"), "--size", "10", "--out", str(tmp_path / "x")]) == 2
    assert "has no frspec ranking" in capsys.readouterr().err


def test_unknown_zoo_model_fails_clearly(capsys):
    assert main(["models", "fetch", "no-such-model"]) == 2
    assert "Unknown zoo model" in capsys.readouterr().err


def test_generate_requires_a_prompt(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", "--target", "x"])
    assert exit_info.value.code == 2  # argparse's usage error, not a crash further in
    assert "--prompt" in capsys.readouterr().err


def test_dtype_and_device_reach_the_target(monkeypatch):
    """`--dtype fp16 --device ...` (a T4 user's flags) are parsed and handed to load_target; "auto" picks CUDA only
    when there is one."""
    import torch

    from hf_dynaspec.bench import runner
    from hf_dynaspec.cli import build_parser

    args = build_parser().parse_args(["generate", "--prompt", "x", "--target", "t", "--dtype", "fp16",
                                      "--device", "cpu"])
    assert (args.dtype, args.device) == ("fp16", "cpu")
    bench = build_parser().parse_args(["bench", "--target", "t", "--dtype", "fp16", "--methods", "vanilla",
                                       "--prompts", "p.jsonl"])
    assert (bench.dtype, bench.device) == ("fp16", "auto")
    assert runner.DTYPES["fp16"] == torch.float16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runner.resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runner.resolve_device("auto") == torch.device("cuda")
    assert runner.resolve_device("cuda:1") == torch.device("cuda", 1)


def test_no_trained_assistant_stops_with_where_they_are_never_a_silent_untrained_one(monkeypatch, capsys):
    """A target without a shipped assistant (or a wheel, which carries none): generate/demo stop, naming the fix."""
    from hf_dynaspec.bench import runner

    target = tiny_target("llama")
    monkeypatch.setattr(runner, "load_target", lambda *a, **k: (target, None))
    with pytest.raises(ValueError, match=r"--assistant DIR_OR_HUB_ID.*assistants/<target>.*from_target"):
        runner.load_assistant(None, target, "my-model")
    assert main(["generate", "--target", "my-model", "--prompt", "x", "--dtype", "fp32"]) == 2
    assert "No trained assistant found for 'my-model'" in capsys.readouterr().err


def test_the_list_of_shipped_assistants_matches_the_checkout():
    from hf_dynaspec.bench.runner import SHIPPED_ASSISTANTS, SHIPPED_FOR

    shipped = sorted(p.name for p in SHIPPED_ASSISTANTS.iterdir() if (p / "config.json").is_file())
    # Medusa heads ship beside the assistants, named after their target (tests/test_shipped_assistants.py)
    assert [name for name in shipped if not name.endswith("-medusa")] == sorted(SHIPPED_FOR)
    assert {name.removesuffix("-medusa") for name in shipped if name.endswith("-medusa")} <= set(SHIPPED_FOR)


def test_the_demo_states_both_plain_baselines_and_the_speedup_over_each(monkeypatch, capsys):
    """On a CPU target (`--cpu-verify auto`, the default) the demo times plain generate() on PyTorch's kernels and
    on the fast path (fast_cpu) and states the assisted speedup over each."""
    import hf_dynaspec.bench.runner as runner

    asked = {}

    def compare(model, tokenizer, assistant, input_ids, max_new_tokens, assisted_kwargs=None, fast_plain=False):
        asked["fast_plain"] = fast_plain
        return {"plain": "x", "assisted": "x", "identical": True, "divergence": None, "plain_tokens_per_s": 2.0,
                "fast_plain_tokens_per_s": 2.5, "assisted_tokens_per_s": 3.0, "speedup": 1.5,
                "speedup_over_fast_plain": 1.2, "tau": 1.8}

    monkeypatch.setattr(runner, "compare_plain_and_assisted", compare)
    monkeypatch.setattr(runner, "load_target", lambda *a: (tiny_target("qwen2"), None))
    monkeypatch.setattr(runner, "load_assistant", lambda *a: (imitating_assistant(tiny_target("qwen2")), "a"))
    monkeypatch.setattr("hf_dynaspec.bench.prompts.encode_prompt", lambda *a: torch.tensor([[1, 2, 3]]))
    assert main(["demo", "--dtype", "fp32"]) == 0
    printed = capsys.readouterr().out
    assert asked["fast_plain"] == verify_kernel.kernel_applies(tiny_target("qwen2"))
    if asked["fast_plain"]:
        assert "2.00 tokens/s  (PyTorch's kernels)" in printed and "2.50 tokens/s  (the fast path" in printed
        assert "(1.50x), 1.20x the fast path" in printed
        assert re.search(r"\([0-9]+\.[0-9]+x\)", printed)  # what CI's user-commands job greps for
    assert main(["demo", "--dtype", "fp32", "--cpu-verify", "off"]) == 0
    assert asked["fast_plain"] is False


@pytest.mark.parametrize("case", ["identical", "near-tie", "mismatch"])
def test_the_demo_runs_in_bf16_and_fails_only_on_a_real_mismatch(monkeypatch, capsys, case):
    """The demo runs the target as it loads (bf16) and prints a verdict: identical, or a near-tie at a named token
    with its fp32 margin (exit 0), or a real mismatch (exit 1): CI reads the same verdict."""
    import hf_dynaspec.cli as cli

    seen = {}
    divergence = None if case == "identical" else {"position": 7, "margin": 0.4 if case == "near-tie" else 3.2,
                                                   "near_tie": case == "near-tie"}

    def fake_generate(args, chat):
        seen["dtype"] = args.dtype
        return {"target": "t", "dtype": args.dtype, "assistant": "a", "plain": "x", "assisted": "y",
                "identical": case == "identical", "divergence": divergence, "plain_tokens_per_s": 2.0,
                "assisted_tokens_per_s": 3.0, "speedup": 1.5, "tau": 1.8}

    monkeypatch.setattr(cli, "_generate", fake_generate)
    assert main(["demo"]) == (1 if case == "mismatch" else 0)
    printed = capsys.readouterr().out
    assert seen["dtype"] == "bf16" and "(1.50x)" in printed
    verdict = {"identical": "outputs: token-identical",
               "near-tie": "outputs: identical up to a numerical near-tie at generated token 7 (fp32 logit margin 0.400",
               "mismatch": "outputs: DIFFER at generated token 7, not a near-tie"}[case]
    assert verdict in printed
