"""What one default round calls: the package's files and functions a steady-state round runs through, measured by
profiling real generate() calls on tiny models (every round after the first; the set-up and the prefill are not
a round). docs/architecture.md's table is this module's output (tests/test_architecture.py compares them):

    python tests/call_set.py            # print the table
    python tests/call_set.py --write    # rewrite docs/architecture.md's block
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_dynaspec"
START, END = "<!-- call-set:start -->", "<!-- call-set:end -->"
KINDS = ("chain (assistant_model=)", "chain (speculative_generate)", "tree (trees=True)", "lattice (Medusa heads)",
         "batched (speculative_generate, 2 rows)")


@contextmanager
def profiled_rounds(found: set):
    """Record (file, function) of every package function called from the second `propose` of any round on."""
    from hf_dynaspec.drafting.round import SpeculationRound

    package = str(PACKAGE)
    state = {"proposals": 0}

    def collect(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            found.add((str(Path(frame.f_code.co_filename).relative_to(ROOT)), frame.f_code.co_qualname))

    originals = {cls: cls.propose for cls in (SpeculationRound,)}

    def counting(original):
        def propose(self, *args, **kwargs):
            state["proposals"] += 1
            if state["proposals"] == 2:
                sys.setprofile(collect)
            return original(self, *args, **kwargs)
        return propose

    for cls, original in originals.items():
        cls.propose = counting(original)
    try:
        yield
    finally:
        sys.setprofile(None)
        for cls, original in originals.items():
            cls.propose = original


def shipped_configuration(imitating_assistant, target):
    """An assistant for `target` drafting as every shipped assistant's generation_config.json says (assistants/*/):
    planned rounds, prompt lookup (5) and the suffix cache (16), and DynaSpec's shortlist: clustered rows, the
    router's clusters, a row budget per draft position (scaled to the tiny vocabulary), the kernel dispatch."""
    from hf_dynaspec.modeling.shortlist import cluster_vocabulary

    assistant = imitating_assistant(target, noise=0.3, draft_plan="auto", prompt_lookup_num_tokens=5,
                                    suffix_cache_num_tokens=16, shortlist="dynaspec", max_clusters=4, fixed_clusters=4,
                                    shortlist_rows=[40, 32, 16])
    head = target.get_output_embeddings().weight.detach()
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 8, always_ids=[0, 1], seed=0))
    return assistant


def call_sets() -> dict[str, set]:
    """{round kind: {(file, function)}} for each default round kind (flat costs and no CPU routing: neither the plan
    nor the kernels a forward takes depend on this machine's timings)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import imitating_assistant, one_layer_target
    from test_planned_trees import flat_tree_costs

    from hf_dynaspec import MedusaAssistant, speculative_generate
    from hf_dynaspec.generation import rounds
    from hf_dynaspec.generation.costs import verify_kernel

    target = one_layer_target("llama", seed=4)
    assistant = shipped_configuration(imitating_assistant, target)
    heads = MedusaAssistant.from_target(target, num_heads=3)
    prompt = torch.randint(0, target.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(2))
    batch = torch.cat([prompt, prompt.flip(1)])
    calls = {
        KINDS[0]: lambda: target.generate(prompt, attention_mask=torch.ones_like(prompt), assistant_model=assistant,
                                          max_new_tokens=24, do_sample=False),
        KINDS[1]: lambda: target.generate(prompt, custom_generate=speculative_generate, drafter=assistant, max_new_tokens=24),
        KINDS[2]: lambda: target.generate(prompt, custom_generate=speculative_generate, trees=True, drafter=assistant, max_new_tokens=24),
        KINDS[3]: lambda: target.generate(prompt, custom_generate=speculative_generate, drafter=heads, max_new_tokens=24),
        KINDS[4]: lambda: target.generate(batch, attention_mask=torch.ones_like(batch), custom_generate=speculative_generate,
                                          drafter=assistant, max_new_tokens=24, pad_token_id=0),
    }
    measured, kernels = rounds.round_costs, verify_kernel.measured_kernels
    rounds.round_costs = lambda *a, **k: flat_tree_costs()
    verify_kernel.measured_kernels = lambda target: verify_kernel.NO_KERNELS
    try:
        sets = {}
        for kind, call in calls.items():
            found: set = set()
            with torch.no_grad(), profiled_rounds(found):
                call()
            sets[kind] = found
        return sets
    finally:
        rounds.round_costs, verify_kernel.measured_kernels = measured, kernels


def table(sets: dict[str, set]) -> str:
    lines = ["| one default round | package files | functions | files |", "| --- | ---: | ---: | --- |"]
    for kind, found in sets.items():
        files = sorted({file.removeprefix("hf_dynaspec/") for file, _ in found})
        lines.append(f"| {kind} | {len(files)} | {len(found)} | {', '.join(files)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = table(call_sets())
    if "--write" in sys.argv:
        path = ROOT / "docs" / "architecture.md"
        head, rest = path.read_text().split(START, 1)
        path.write_text(f"{head}{START}\n{text}{END}{rest.split(END, 1)[1]}")
    print(text, end="")
