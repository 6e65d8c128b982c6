"""`hf-dynaspec bench`: load the target, the assistant and the prompts, run the harness, write the results."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hf_dynaspec.bench.results_table import append_records, make_record
from hf_dynaspec.modeling.integrity import CHECKSUMS_NAME

# The generation settings a sampled bench takes from the target's generation config, each overridable by an option.
SAMPLING_OPTIONS = {"temperature": float, "top_p": float, "top_k": int, "min_p": float, "repetition_penalty": float}


def published_config(name: str, target):
    """The generation config a Hub user of `name` samples with: a zoo model's published settings (its cached copy,
    converted from a GGUF, has none), else the target's own."""
    from transformers import GenerationConfig

    from hf_dynaspec.zoo import published_sampling

    published = published_sampling(name)
    return GenerationConfig(**published) if published is not None else target.generation_config


def sampling_settings(args, generation_config) -> dict | None:
    """`--sample`: the target's published sampling settings, overridden by the options given -> generate() kwargs;
    None when greedy (`generation_config` None: only checks the options). Only settings that change the
    distribution are kept (a published top_k=0 or top_p=1.0 is the same distribution as none)."""
    given = {name: getattr(args, name) for name in SAMPLING_OPTIONS if getattr(args, name, None) is not None}
    if not args.sample:
        if given:
            raise ValueError(f"--{next(iter(given)).replace('_', '-')} sets a sampling setting: add --sample")
        return None
    neutral = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
    settings = {name: getattr(generation_config, name, None) for name in SAMPLING_OPTIONS}
    settings.update(given)
    return {name: value for name, value in settings.items() if value is not None and value != neutral[name]}


def add_parser(commands) -> None:
    from hf_dynaspec.bench.methods import METHOD_HELP

    bench = commands.add_parser(
        "bench", help="tau, speed and exactness of decoding methods side by side on benchmark prompts",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="methods:\n" + "\n".join(f"  {name:20s} {text}" for name, text in METHOD_HELP.items()))
    bench.add_argument("--target", required=True, help="zoo name, local directory or Hub id")
    bench.add_argument("--assistant", action="append", default=None, metavar="[LABEL=]PATH",
                       help="assistant directory or Hub id (default: the one shipped for the target); repeat as "
                            "--assistant v6=PATH --assistant v7=PATH to time several assistants interleaved in "
                            "one run, their methods keyed LABEL/method")
    bench.add_argument("--draft-model", default=None, help="draft model for the hf-assisted method")
    bench.add_argument("--methods", required=True, help="comma-separated, e.g. vanilla,eagle,frspec:32768,dynaspec")
    bench.add_argument("--prompts", required=True, help="Spec-Bench or HumanEval .jsonl files, comma-separated")
    bench.add_argument("--limit-per-category", type=int, default=None)
    bench.add_argument("--categories", default=None, metavar="C[,C...]",
                       help="only these prompt categories, e.g. summarization,rag")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--mt-bench-turns", type=int, choices=[1, 2], default=1,
                       help="2: also measure MT-Bench's second turn, after the target's own greedy first answer")
    bench.add_argument("--num-draft-tokens", type=int, default=None, help="override the assistant's draft length")
    bench.add_argument("--tree", default=None, metavar="TOPK,DEPTH,TOTAL",
                       help="tree shape for the *-tree methods (default: the assistant's config)")
    bench.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    bench.add_argument("--device", default="auto", help="auto (CUDA when there is one, else CPU), cpu, cuda, ...")
    bench.add_argument("--cpu-verify", nargs="?", const="auto", default=None, choices=["auto", "kernel", "shadow"],
                       help="route the target's CPU forwards for every method, vanilla included "
                            "(hf_dynaspec.kernels.verify_rows.patch): auto (each row count on the path measured "
                            "fastest here: the rows kernel, prepacked oneDNN weights or PyTorch's own; the same as "
                            "the vanilla-fast method), kernel or shadow (every multi-token forward of a bf16 target, "
                            "prefill included). Without it, plain methods run on PyTorch's kernels and assisted "
                            "ones route their target by themselves")
    bench.add_argument("--medusa", default=None, metavar="PATH",
                       help="Medusa heads for the medusa methods (ours, FasterDecoding's or vLLM's layout)")
    bench.add_argument("--batch-size", default=None, metavar="N[,N...]",
                       help="batched throughput instead: the prompts in left-padded batches of N rows, plain batched "
                            "generate() ('vanilla', first in --methods) against each method, e.g. 1,4,16")
    bench.add_argument("--sample", action="store_true",
                       help="sample as users of the target do: its published generation config (temperature, top-p, "
                            "top-k, min-p, repetition penalty), each (prompt, method) from its own seed; the options "
                            "below override single settings")
    for name, kind in SAMPLING_OPTIONS.items():
        bench.add_argument("--" + name.replace("_", "-"), type=kind, default=None, help="with --sample")
    bench.add_argument("--seed", type=int, default=0, help="with --sample: the first run's seed")
    bench.add_argument("--json", default=None, metavar="OUT")
    bench.add_argument("--results", default=None, metavar="PATH",
                       help="append one record per method to this results table (JSON lines, "
                            "hf_dynaspec.bench.results_table), e.g. benchmarks/results/results.jsonl")
    bench.add_argument("--plots", default=None, metavar="DIR")


def run(args) -> dict:
    import torch

    from hf_dynaspec.bench.harness import run_benchmark
    from hf_dynaspec.bench.methods import build_methods, expand_assistant_labels
    from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
    from hf_dynaspec.bench.report import markdown_table, write_plots
    from hf_dynaspec.bench.runner import load_target, no_trained_assistant_message, shipped_assistant_dir
    from hf_dynaspec.modeling.assistant import DynaSpecAssistant

    assistants = parse_assistant_options(args.assistant)  # before loading anything: bad options fail fast
    sampling_settings(args, None)
    if args.sample and args.batch_size:
        raise ValueError("--sample runs one prompt at a time: drop --batch-size (batched throughput is greedy)")
    keys = expand_assistant_labels([k.strip() for k in args.methods.split(",") if k.strip()],
                                   [label for label in assistants if label is not None])
    prompts = load_prompts(args.prompts.split(","), args.limit_per_category,
                           args.categories.split(",") if args.categories else None)
    target, tokenizer = load_target(args.target, args.dtype, args.device)
    if not assistants:
        shipped = shipped_assistant_dir(args.target)
        assistants = {None: str(shipped)} if shipped else {}

    tree = parse_tree_shape(args.tree)

    def factory_for(path: str):
        def assistant_factory(**overrides):
            # A method's own +draft:K wins over --num-draft-tokens.
            options = {"num_assistant_tokens": args.num_draft_tokens, **tree, **overrides}
            return DynaSpecAssistant.from_pretrained(path, target=target, **options)
        return assistant_factory

    def no_assistant(**_):
        raise ValueError(no_trained_assistant_message(args.target))

    draft_model = load_target(args.draft_model, args.dtype, args.device)[0] if args.draft_model else None
    cpu_verify_method = None
    if args.cpu_verify:
        from hf_dynaspec.generation.costs.verify_kernel import apply_cpu_verify

        cpu_verify_method = apply_cpu_verify(target, args.cpu_verify)
        if draft_model is not None:  # hf-assisted's draft model re-reads accepted tokens: same help, same terms
            apply_cpu_verify(draft_model, args.cpu_verify)
    labelled = {label: factory_for(path) for label, path in assistants.items() if label is not None}
    medusa_heads = None
    if args.medusa:
        from hf_dynaspec.modeling.medusa import MedusaAssistant

        medusa_heads = MedusaAssistant.from_pretrained(args.medusa, target=target)
    methods = build_methods(keys, assistant_factory=factory_for(assistants[None]) if None in assistants
                            else no_assistant, labelled_factories=labelled or None, draft_model=draft_model,
                            medusa_heads=medusa_heads, target=target)
    answer = None
    if args.mt_bench_turns == 2:
        def answer(input_ids):
            out = target.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                  max_new_tokens=args.max_new_tokens)
            return tokenizer.decode(out[0, input_ids.shape[1]:], skip_special_tokens=True)
    encoded = encode_prompts(tokenizer, prompts, answer_first_turn=answer)
    if args.batch_size:
        return _run_batched(args, target, tokenizer, methods, encoded, assistants, cpu_verify_method)
    report = run_benchmark(target, methods, encoded, max_new_tokens=args.max_new_tokens, dtype=args.dtype,
                           target_name=args.target, sampling=sampling_settings(args, published_config(args.target, target)),
                           seed=args.seed)
    # One assistant: its path; several: {label: path}; none: None. cpu_verify: "kernel" | "shadow" | None;
    # categories: a subset of them only (not a headline run).
    report.update(assistant=assistants[None] if None in assistants else (assistants or None),
                  draft_model=args.draft_model, medusa=args.medusa, cpu_verify=cpu_verify_method,
                  categories=args.categories.split(",") if args.categories else None,
                  command=_command_line())
    print(markdown_table(report))
    _write_json(args.json, report)
    if args.results:
        append_records(args.results, report_records(report, args.json))
    if args.plots:
        write_plots(report, Path(args.plots), vocab_size=target.get_output_embeddings().weight.shape[0])
    return report


def _command_line() -> str | None:
    """The command as the user typed it (None when run other than as `hf-dynaspec`)."""
    return "hf-dynaspec " + " ".join(sys.argv[1:]) if sys.argv[0].endswith("hf-dynaspec") else None


def _write_json(path: str | None, report: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(report, indent=2) + "\n")


def _run_batched(args, target, tokenizer, methods, encoded, assistants, cpu_verify_method) -> dict:
    """`--batch-size`: hf_dynaspec.bench.batched's interleaved throughput per batch size; its table and records."""
    from hf_dynaspec.bench.batched import batched_markdown, run_batched_benchmark
    from hf_dynaspec.bench.methods import eos_ids

    try:
        sizes = [int(value) for value in args.batch_size.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-size takes positive integers separated by commas, e.g. 1,4,16; got "
                         f"{args.batch_size!r}")
    stops = eos_ids(target)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(stops, default=0)
    report = run_batched_benchmark(target, methods, encoded, sizes, max_new_tokens=args.max_new_tokens,
                                   pad_token_id=pad, eos_ids=stops)
    report.update(target=args.target, dtype=args.dtype, cpu_verify=cpu_verify_method,
                  assistant=assistants[None] if None in assistants else (assistants or None), medusa=args.medusa,
                  command=_command_line())
    print(batched_markdown(report))
    _write_json(args.json, report)
    if args.results:
        records = [make_record("generate-batched", method, {**metrics, "batch_size": size, "dtype": args.dtype,
                                                            "max_new_tokens": args.max_new_tokens, "file": args.json},
                               target=args.target, command=report.get("command") or "-")
                   for size, per_method in report["batch_sizes"].items() for method, metrics in per_method.items()]
        append_records(args.results, records)
    return report


def report_records(report: dict, json_path: str | None = None) -> list[dict]:
    """One results-table record per method of a bench `report` (benchmark "generate"): its headline metrics."""
    keys = ("tau", "avg_shortlist", "coverage", "tokens_per_s", "decode_tokens_per_s", "speedup", "decode_speedup",
            "exact", "n_mismatch")
    assistant = report.get("assistant")
    records = []
    for method, metrics in report["methods"].items():
        values = {k: metrics.get(k) for k in keys}
        values.update(n_prompts=report["n_prompts"], max_new_tokens=report["max_new_tokens"], dtype=report["dtype"],
                      cpu_verify=report.get("cpu_verify"), file=json_path, mode=report.get("mode", "greedy"),
                      sampling=report.get("sampling"), acceptance=metrics.get("acceptance"),
                      categories=report.get("categories"))
        records.append(make_record("generate", method, values, target=report["target"],
                                   assistant_version=assistant_version(assistant),
                                   command=report.get("command") or "-"))
    return records


def assistant_version(assistant) -> str | None:
    """The timed assistant's path and, where it has a checksums.json (every saved artifact does), the first 12 hex
    digits of its weights' sha256: a path alone does not say which weights ran (assistants/ is rewritten when one
    ships)."""
    if not assistant or not isinstance(assistant, (str, Path)):  # none, or several labelled ones (a dict)
        return str(assistant) if assistant else None
    checksums = Path(assistant) / CHECKSUMS_NAME
    if not checksums.is_file():
        return str(assistant)
    digests = json.loads(checksums.read_text()).get("sha256", {})
    return f"{assistant} (weights sha256 {' '.join(digests[name][:12] for name in sorted(digests))})"


def parse_assistant_options(values: list[str] | None) -> dict[str | None, str]:
    """`--assistant` values -> {label: path}. One value without a label -> {None: path}; with several values
    every one is labelled, by `LABEL=PATH` or else by its directory's name, and labels must differ."""
    if not values:
        return {}
    parsed = []
    for value in values:
        label, equals, path = value.partition("=")
        label, path = (label.strip(), path.strip()) if equals else (None, value.strip())
        if equals and (not label or not path or "/" in label or "," in label):
            raise ValueError(f"--assistant {value!r}: write LABEL=PATH with a label free of '/' and ',', "
                             "e.g. --assistant v7=outputs/package-15b-v7")
        parsed.append((label, path))
    if len(parsed) == 1 and parsed[0][0] is None:
        return {None: parsed[0][1]}
    labelled = {}
    for label, path in parsed:
        label = label or Path(path.rstrip("/")).name
        if label in labelled:
            raise ValueError(f"two assistants are labelled {label!r}: give each its own as --assistant LABEL=PATH")
        labelled[label] = path
    return labelled


def parse_tree_shape(text: str | None) -> dict:
    """"TOPK,DEPTH,TOTAL" (command lines) -> `tree_top_k`, `tree_depth`, `tree_total_tokens` (empty when None)."""
    if text is None:
        return {}
    try:
        top_k, depth, total = (int(v) for v in text.split(","))
    except ValueError:
        raise ValueError(f"--tree takes three integers TOPK,DEPTH,TOTAL (e.g. 4,4,12), got {text!r}") from None
    if min(top_k, depth, total) < 1:
        raise ValueError(f"--tree values must be positive, got {text!r}")
    return {"tree_top_k": top_k, "tree_depth": depth, "tree_total_tokens": total}
