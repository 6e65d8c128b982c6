"""Host work per round, eager against the static compiled round (issue #73's bar: compiled <= 1/3 of eager's host
time, ATen calls <= 10%), on a tiny 2-layer target where compute is ~0 and host work is everything.

    python benchmarks/static_round_host.py [--json OUT]      # from the repository root; name the host kind

chain_generate, `draft_plan="fixed"`, K = 3 (the compiled round: `verify_round="static"` and
`draft_capture="compile"`), 64 new tokens after a 16-token prompt, fp32, one thread; each round
mode warmed up (compiled) by one call, then 5 calls interleaved; per round = call time / verify rounds (the
prefill's share included). ATen calls: `torch.profiler` events named `aten::*` (nested calls included, the same
rule for both modes), per round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import imitating_assistant, one_layer_target, tiny_target  # noqa: E402
from static_round_real import report  # noqa: E402

import hf_dynaspec.generation.batched_loop as loop  # noqa: E402
from hf_dynaspec import speculative_generate  # noqa: E402


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    target = tiny_target("qwen2", seed=2, num_hidden_layers=2)
    assistant = imitating_assistant(one_layer_target("qwen2", seed=2), noise=0.2, seed=4, num_assistant_tokens=3,
                                    draft_plan="fixed", prompt_lookup_num_tokens=0, suffix_cache_num_tokens=0)
    assistant.attach(target, allow_different_target=True)  # what it drafts does not matter here: the host work does
    ids = torch.randint(3, 90, (1, 16), generator=torch.Generator().manual_seed(0))
    rounds = []
    original = loop._verify
    loop._verify = lambda *a, **k: (rounds.append(1), original(*a, **k))[1]

    def call(mode: str) -> tuple[float, int, torch.Tensor]:
        assistant.generation_config.verify_round = mode
        # The compiled round: the verify forward and the drafter's chain (`draft_capture`), both compiled.
        assistant.generation_config.draft_capture = "compile" if mode == "static" else "off"
        rounds.clear()
        start = time.perf_counter()
        out = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False,
                              custom_generate=speculative_generate, drafter=assistant)
        return (time.perf_counter() - start) * 1000, len(rounds), out

    modes = ("eager", "static")
    outputs = {mode: call(mode)[2] for mode in modes}  # warm-up: compiles every width bucket
    per_round = {mode: [] for mode in modes}
    for repeat in range(5):
        for mode in modes[repeat % 2:] + modes[: repeat % 2]:
            ms, count, _ = call(mode)
            per_round[mode].append(ms / count)
    aten = {}
    for mode in modes:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
            _, count, _ = call(mode)
        aten[mode] = sum(event.name.startswith("aten::") for event in profile.events()) / count
    result = {"host_ms_per_round": {m: statistics.median(v) for m, v in per_round.items()},
              "aten_calls_per_round": aten, "rounds": count,
              "identical_outputs": bool(torch.equal(outputs["eager"], outputs["static"]))}
    result["host_ratio"] = result["host_ms_per_round"]["static"] / result["host_ms_per_round"]["eager"]
    result["aten_ratio"] = aten["static"] / aten["eager"]
    return report(result, args.json)


if __name__ == "__main__":
    main()
