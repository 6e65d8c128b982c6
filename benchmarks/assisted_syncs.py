"""Host syncs per target pass of the `assistant_model=` route, by the line that causes them, on the CPU: what a GPU
would wait for (tests/sync_counter.py counts the calls that block a CUDA host), transformers' own reads included.
Run once per transformers version to see what its assisted loop adds per layer (issue #73, item 4):

    PYTHONPATH=tests python benchmarks/assisted_syncs.py --layers 4 24
    PYTHONPATH=/tmp/t517:tests python benchmarks/assisted_syncs.py --layers 4 24   # transformers 5.17 unpacked there

A target of `--layers` layers (the tiny test family qwen2, random weights, fp32), an imitating assistant with the
shipped configuration's sources (chain drafts of 4, prompt lookup, the suffix cache; `draft_plan="fixed"` so that
every run drafts the same rounds), 32 new tokens after a 32-token prompt, the accelerator paths forced
(`accelerator_paths_on_cpu`: the code a GPU runs). Prints JSON: syncs per pass and the ten commonest culprits.
"""

from __future__ import annotations

import argparse
import collections
import json

import torch
import transformers
from conftest import imitating_assistant, one_layer_target, tiny_target
from sync_counter import HostSyncCounter

from hf_dynaspec.drafting.device_paths import accelerator_paths_on_cpu


def count(layers: int) -> dict:
    reference = one_layer_target("qwen2", seed=2)
    target = tiny_target("qwen2", seed=2, num_hidden_layers=layers)
    assistant = imitating_assistant(reference, noise=0.2, seed=4, num_assistant_tokens=4, draft_plan="fixed",
                                    prompt_lookup_num_tokens=5, suffix_cache_num_tokens=16)
    assistant.attach(target, allow_different_target=True)  # acceptance is not the point: the reads are
    ids = torch.randint(3, 90, (1, 32), generator=torch.Generator().manual_seed(0))
    options = dict(attention_mask=torch.ones_like(ids), max_new_tokens=32, do_sample=False, assistant_model=assistant)
    target.generate(ids, **options)  # warm-up
    passes = []
    handle = target.register_forward_hook(lambda *_: passes.append(1))
    try:
        with accelerator_paths_on_cpu(), HostSyncCounter() as counter:
            target.generate(ids, **options)
    finally:
        handle.remove()
    culprits = collections.Counter(culprit.split(" ")[0] if culprit.startswith("hf_dynaspec") else
                                   culprit.split("site-packages/")[-1] for _, culprit in counter.events)
    return {"transformers": transformers.__version__, "layers": layers, "target_passes": len(passes),
            "syncs": counter.count, "syncs_per_pass": round(counter.count / len(passes), 2),
            "culprits": dict(culprits.most_common(10))}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 24])
    args = parser.parse_args(argv)
    print(json.dumps([count(layers) for layers in args.layers], indent=1))


if __name__ == "__main__":
    main()
