"""Where a tree-decoding pass spends its time: drafting vs the target's forward, per shortlist and tree shape.

    python benchmarks/tree_profile.py > benchmarks/results/tree_profile_05b.txt

Qwen2.5-Coder-0.5B-Instruct, bf16 with fp32 verification shadows (`cpu_verify`), the shipped assistant, one
prompt, 40 new tokens after a warm-up call. Drafting time is `propose_tree`; target time is every forward of
the target (the prefill included, averaged over passes + 1).
"""

from __future__ import annotations

import time

from hf_dynaspec import DynaSpecAssistant, cpu_verify
from hf_dynaspec.runner import encode_prompt, load_target, shipped_assistant_dir
from hf_dynaspec.tree import drafting

NAME = "qwen2.5-coder-0.5b-instruct"


def main():
    model, tokenizer = load_target(NAME, "bf16")
    cpu_verify.enable(model, max_rows=cpu_verify.ANY_ROWS)
    times = {"draft": 0.0, "target": 0.0, "start": 0.0}
    propose = drafting.TreeDraftSession.propose_tree

    def timed_propose(self, *args, **kwargs):
        start = time.perf_counter()
        tree = propose(self, *args, **kwargs)
        times["draft"] += time.perf_counter() - start
        return tree

    drafting.TreeDraftSession.propose_tree = timed_propose
    model.register_forward_pre_hook(lambda *_: times.__setitem__("start", time.perf_counter()))
    model.register_forward_hook(lambda *_: times.__setitem__("target", times["target"] + time.perf_counter()
                                                              - times["start"]))
    ids = encode_prompt(tokenizer, "Write a Python function that merges two sorted lists.", None)
    for shortlist in ["dynaspec", "full"]:
        assistant = DynaSpecAssistant.from_pretrained(shipped_assistant_dir(NAME), target=model, shortlist=shortlist)
        for top_k, depth, total in [(4, 4, 8), (8, 6, 24)]:
            shape = dict(tree_top_k=top_k, tree_depth=depth, tree_total_tokens=total)
            assistant.generate(model, input_ids=ids, max_new_tokens=8, **shape)  # warm-up
            times.update(draft=0.0, target=0.0)
            start = time.perf_counter()
            assistant.generate(model, input_ids=ids, max_new_tokens=40, **shape)
            total_s = time.perf_counter() - start
            passes = assistant.stats.verify_passes
            print(f"{shortlist} {(top_k, depth, total)} total {total_s:.2f}s passes {passes} "
                  f"tau {assistant.stats.tau:.2f} draft/pass {times['draft'] / passes * 1000:.0f} ms "
                  f"target/pass {times['target'] / (passes + 1) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
