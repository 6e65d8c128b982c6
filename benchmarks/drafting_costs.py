"""What drafting costs: one script for the drafter's step, its one-row products and its pass over a prompt.

    python benchmarks/drafting_costs.py --what step --assistant assistants/qwen2.5-coder-0.5b-instruct \
        --strategies eagle,frspec:16384,dynaspec-fixed:16,dynaspec:32
    python benchmarks/drafting_costs.py --what one-row --assistant assistants/qwen2.5-coder-0.5b-instruct
    python benchmarks/drafting_costs.py --what prompt-pass --rows 16,147,741

- `step`: `ChainDraftSession.draft` of --draft-tokens tokens after a 200-token context, per drafted token, for
  each shortlist strategy; the strategy's head and router alone; the decoder step alone.
- `one-row`: the same propose with the drafter's one-token steps on PyTorch's bf16 product (`min_rows=2`) or the
  CPU rows kernel (`min_rows=1`).
- `prompt-pass`: the drafter's step over T (embedding, feature) pairs with an empty cache (its first step of a
  generate() call), its Linears on PyTorch's product, the CPU rows kernel or fp32 shadow weights.

Every case is timed by hf_dynaspec.bench.timer (single calls, interleaved, set-up untimed, medians in ms); each
(what, case) becomes a record of the results table (--results, default benchmarks/results/results.jsonl).
Replaces draft_step.py, drafter_one_row.py and drafter_prompt_pass.py (their JSON results stay in
benchmarks/results/).
"""

from __future__ import annotations

import argparse

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.methods import parse_method, shortlist_overrides
from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.bench.timer import interleaved_medians
from hf_dynaspec.drafting.chain import ChainDraftSession, DraftKVCache
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.kernels.verify_rows import patch as cpu_verify
from hf_dynaspec.modeling.drafter import causal_mask

CONTEXT = 200


def drafting_case(assistant, head, draft_tokens: int):
    """A factory: a fresh session whose prefill over the context is done (untimed); times one propose."""
    context = torch.randint(0, 1000, (1, CONTEXT), generator=torch.Generator().manual_seed(0))
    features = torch.randn(1, CONTEXT - 1, assistant.config.target_hidden_size).to(assistant.dtype)
    extended = torch.cat([context, context[:, -1:]], dim=1)

    def factory():
        session = ChainDraftSession(assistant.drafter, assistant.config.vocab_size, do_sample=False, head=head)
        session.draft(context, features, 1)
        return lambda: session.draft(extended, features[:, :1], draft_tokens)
    return factory


@torch.no_grad()
def step_costs(assistant, strategies: list[str], draft_tokens: int, repeats: int) -> dict[str, float]:
    drafter = assistant.drafter
    hidden = torch.randn(1, assistant.config.hidden_size).to(assistant.dtype)
    embed = drafter.embed(torch.tensor([[5]]))
    cases = {}
    for spec in strategies:
        head = runtime_head(assistant, assistant.generation_config.with_options(**shortlist_overrides(*parse_method(spec), spec)))
        cases[f"{spec} propose"] = drafting_case(assistant, head, draft_tokens)
        clusters = head.choose_clusters(embed[:, -1], hidden, 0)
        cases[f"{spec} head"] = lambda head=head, clusters=clusters: lambda: head.scores(hidden, clusters).argmax
        if clusters is not None:
            cases[f"{spec} router"] = lambda: lambda: assistant.shortlists.router(embed[:, -1], hidden)

    def decoder_step():
        cache = DraftKVCache()
        features = torch.randn(1, CONTEXT - 1, assistant.config.target_hidden_size).to(assistant.dtype)
        drafter.step(drafter.embed(torch.arange(1, CONTEXT)[None]), features, torch.arange(CONTEXT - 1)[None],
                     cache, causal_mask(CONTEXT - 1, 0, "cpu"))
        return lambda: drafter.step(embed, hidden[:, None], torch.tensor([[CONTEXT - 1]]), cache, None)
    cases["decoder step"] = decoder_step
    medians = interleaved_medians(cases, repeats)
    for spec in strategies:  # per drafted token, as the old draft_step.py reported
        medians[f"{spec} propose"] /= draft_tokens
    return medians


@torch.no_grad()
def one_row_costs(assistant, draft_tokens: int, repeats: int) -> dict[str, float]:
    head = runtime_head(assistant, assistant.generation_config)
    propose = drafting_case(assistant, head, draft_tokens)

    def with_min_rows(min_rows: int):
        def factory():
            cpu_verify.enable(assistant.drafter, method="kernel", min_rows=min_rows)
            return propose()
        return factory
    return interleaved_medians({"min_rows=2 (PyTorch one-row)": with_min_rows(2),
                                "min_rows=1 (kernel one-row)": with_min_rows(1)}, repeats)


@torch.no_grad()
def prompt_pass_costs(assistant, rows: list[int], repeats: int) -> dict[str, float]:
    drafter, hidden = assistant.drafter, assistant.config.hidden_size
    routes = {"native": None, "kernel": dict(method="kernel", min_rows=1, max_rows=cpu_verify.ANY_ROWS),
              "shadow": dict(method="shadow", min_rows=1, max_rows=cpu_verify.ANY_ROWS)}

    def case(route, n: int):
        def factory():
            cpu_verify.disable(drafter)
            if route is not None:
                cpu_verify.enable(drafter, **route)
            embeds, features = (torch.randn(1, n, hidden).to(torch.bfloat16) for _ in range(2))
            return lambda: drafter.step(embeds, features, torch.arange(n)[None], DraftKVCache(),
                                        causal_mask(n, 0, "cpu"))
        return factory
    return interleaved_medians({f"{name} {n} rows": case(route, n) for n in rows for name, route in routes.items()},
                               repeats)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--what", choices=["step", "one-row", "prompt-pass"], required=True)
    parser.add_argument("--target", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--assistant", default=None, help="default: the one shipped for --target")
    parser.add_argument("--strategies", default="eagle,frspec:16384,dynaspec-fixed:16,dynaspec:32",
                        help="bench method keys of the chain heads (eagle: the full head)")
    parser.add_argument("--draft-tokens", type=int, default=2)
    parser.add_argument("--rows", default="16,147,741", help="prompt lengths for --what prompt-pass")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--results", default="benchmarks/results/results.jsonl")
    args = parser.parse_args(argv)
    model, _ = load_target(args.target, "bf16")
    if args.assistant:
        assistant, where = DynaSpecAssistant.from_pretrained(args.assistant, target=model), args.assistant
    else:
        assistant, where = load_assistant(None, model, args.target)
    if args.what == "step":
        medians = step_costs(assistant, args.strategies.split(","), args.draft_tokens, args.repeats)
    elif args.what == "one-row":
        medians = one_row_costs(assistant, args.draft_tokens, args.repeats)
    else:
        medians = prompt_pass_costs(assistant, [int(r) for r in args.rows.split(",")], args.repeats)
    for case, ms in medians.items():
        print(f"{case}: {ms:.2f} ms")
    records = [make_record(f"drafting_costs/{args.what}", case, {"median_ms": ms, "repeats": args.repeats,
                                                                  "draft_tokens": args.draft_tokens},
                           target=args.target, assistant_version=str(where)) for case, ms in medians.items()]
    append_records(args.results, records)


if __name__ == "__main__":
    main()
