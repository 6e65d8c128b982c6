"""Package trained Medusa heads for shipping: bf16 weights, the target's zoo name, a card with the measurements.

    python -m recipes.package_medusa --heads outputs/medusa-05b-v2/heads --target qwen2.5-coder-0.5b-instruct \
        --out assistants/qwen2.5-coder-0.5b-instruct-medusa --bench benchmarks/results/bench_medusa_05b.json

The card (card.json, README.md) keeps the training record train_medusa wrote and adds the `hf-dynaspec bench`
report given (every method of that interleaved run, so the heads' rows stand beside the EAGLE assistant's).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from hf_dynaspec.modeling.medusa import MedusaAssistant


def main(argv=None) -> MedusaAssistant:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--heads", type=Path, required=True)
    parser.add_argument("--target", required=True, help="the target's zoo name, recorded in the config")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--bench", type=Path, default=None, help="an hf-dynaspec bench --json report")
    parser.add_argument("--license", default="apache-2.0")
    args = parser.parse_args(argv)
    heads = MedusaAssistant.from_pretrained(args.heads).to(torch.bfloat16)
    heads.config.target_name_or_path = args.target
    card = dict(heads.card_data)
    card["license"] = args.license
    if args.bench is not None:
        card["results"] = json.loads(args.bench.read_text())
    heads.card_data = card
    heads.save_pretrained(args.out)
    return heads


if __name__ == "__main__":
    main()
