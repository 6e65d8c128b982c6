"""Package a trained assistant for shipping: bf16 weights, how it was made and what it measured (model card).

    python -m recipes.package_assistant --assistant outputs/assistant-05b --out assistants/qwen2.5-coder-0.5b-instruct \
        --train-dir outputs/drafter-05b --features outputs/features/qwen05 --bench benchmarks/results/bench_05b.json

`card.json` gets `training` (data, tokens, steps, wall time, command lines: read from the recipes' own logs)
and `results` (an `hf-dynaspec bench` report); README.md is rendered from it by `save_pretrained`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from safetensors import safe_open

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.report import single_assistant_view
from recipes.training_data import feature_shards


def feature_summaries(sources: list[Path]) -> list[dict]:
    """One summary per features directory, in training order, counting each shard once: `sources` are the
    train_drafter `--features` (directories or single shard files; a shard named first and then with its
    directory counts in that directory)."""
    by_directory: dict[Path, list[Path]] = {}
    for shard in feature_shards(sources):
        by_directory.setdefault(shard.parent, []).append(shard)
    summaries = []
    for directory, shards in by_directory.items():
        tokens = sequences = 0
        for shard in shards:
            with safe_open(str(shard), "pt") as f:
                tokens += f.get_slice("input_ids").get_shape()[0]
                sequences += f.get_slice("offsets").get_shape()[0] - 1
        meta = json.loads((directory / "meta.json").read_text()) if (directory / "meta.json").is_file() else {}
        summaries.append({"shards": len(shards), "sequences": sequences, "tokens": tokens, **meta})
    return summaries


def training_summary(train_dir: Path) -> dict:
    lines = [json.loads(line) for line in (train_dir / "train_log.jsonl").read_text().splitlines() if line.strip()]
    last = lines[-1]
    validated = [line for line in lines if "val_top1_1" in line]
    summary = {"steps": last["step"], "trained_tokens": last["tokens"], "train_seconds": round(last["seconds"])}
    if validated:
        last_val = validated[-1]
        summary.update(val_top1_pos1=last_val["val_top1_1"], val_top1_pos2=last_val["val_top1_2"])
        if "val_response_top1_1" in last_val:
            summary.update(val_response_top1_pos1=last_val["val_response_top1_1"],
                           val_response_top1_pos2=last_val["val_response_top1_2"])
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assistant", required=True, type=Path, help="assistant with drafter and shortlists")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--train-dir", type=Path, default=None, help="recipes.train_drafter --out directory")
    parser.add_argument("--features", type=Path, default=None, nargs="+",
                        help="the drafter's train_drafter --features (directories or shard files)")
    parser.add_argument("--bench", type=Path, default=None, help="an `hf-dynaspec bench --json` report")
    parser.add_argument("--bench-label", default=None,
                        help="the label of this assistant in a --bench report that timed several (--assistant "
                             "LABEL=PATH): the card shows its rows and the unlabelled ones")
    parser.add_argument("--commands", type=Path, default=None, help="text file with the command lines used")
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--shortlist", default=None, help="default shortlist strategy of the shipped artifact")
    parser.add_argument("--max-clusters", type=int, default=None,
                        help="default k_max of the dynaspec strategy (a row budget of k(t) clusters' worth of rows)")
    parser.add_argument("--shortlist-rows", default=None, metavar="R0,R1,...",
                        help="default row budget of the dynaspec strategy per draft position (the last repeats)")
    parser.add_argument("--prompt-lookup", type=int, default=None, metavar="N",
                        help="default prompt_lookup_tokens of the shipped artifact (0 = off)")
    parser.add_argument("--num-draft-tokens", type=int, default=None, metavar="K",
                        help="default draft length (num_assistant_tokens) of the shipped artifact")
    parser.add_argument("--lookup-veto", type=float, default=None, metavar="P",
                        help="default prompt_lookup_veto of the shipped artifact (1.0 = lookup drafts unchecked)")
    parser.add_argument("--license", default=None,
                        help="the card's Hub license id, e.g. `gemma` for a drafter trained on Gemma's outputs (a "
                             "Model Derivative under the Gemma Terms of Use), `apache-2.0`")
    parser.add_argument("--data", default=None,
                        help="what the drafter trained on, for the model card (default: a generic description)")
    args = parser.parse_args(argv)

    assistant = DynaSpecAssistant.from_pretrained(args.assistant, shortlist=args.shortlist,
                                                  max_clusters=args.max_clusters,
                                                  shortlist_rows=[int(r) for r in args.shortlist_rows.split(",")]
                                                  if args.shortlist_rows else None,
                                                  prompt_lookup_num_tokens=args.prompt_lookup,
                                                  prompt_lookup_veto=args.lookup_veto,
                                                  num_assistant_tokens=args.num_draft_tokens)
    training = dict(assistant.card_data.get("training", {}))
    training["data"] = args.data or (
        "../shared/data/train: teacher forcing on the provided conversations (GPTeacher codegen + roleplay, GSM8K) "
        "and/or the target's own greedy answers to the training prompts (recipes.self_distill); chat template; "
        "target features cached by recipes.build_features")
    if args.features:
        training["features"] = feature_summaries(args.features)
    if args.train_dir:
        training.update(training_summary(args.train_dir))
    if args.commands:
        training["commands"] = args.commands.read_text().strip()
    metrics = args.assistant / "shortlist_metrics.json"
    if metrics.is_file():
        training["shortlists"] = {k: v for k, v in json.loads(metrics.read_text()).items() if k != "command"}
    assistant.card_data = {**assistant.card_data, "training": training}
    if args.license:
        assistant.card_data["license"] = args.license
    if args.bench:
        results = json.loads(args.bench.read_text())
        if args.bench_label is not None:
            results = single_assistant_view(results, args.bench_label)
        elif isinstance(results.get("assistant"), dict):
            parser.error(f"{args.bench} timed several assistants ({', '.join(results['assistant'])}): pass "
                         "--bench-label LABEL to pick this one's rows")
        assistant.card_data["results"] = results
    if args.dtype == "bf16":
        assistant.to(torch.bfloat16)  # integer buffers (cluster order, ids) keep their dtype
    assistant.save_pretrained(args.out)
    size = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{args.out}: {size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
