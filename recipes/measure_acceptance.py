"""Measure an assistant's acceptance with its target and store it in the artifact (`expected_acceptance`), so the
`draft_plan="auto"` planner's first rounds plan with the drafter's real quality (hf_dynaspec.modeling.acceptance_prior).

    python -m recipes.measure_acceptance --assistant assistants/qwen2.5-coder-0.5b-instruct \
        --target qwen2.5-coder-0.5b-instruct --write

The prompts are held aside from every evaluation set: by default the package's starter prompts
(recipes/data/starter_prompts.jsonl, the training notebook's), or `--prompts FILE` (Spec-Bench / HumanEval / {"prompt"}
rows). Every round drafts the whole chain or tree (hf_dynaspec.bench.acceptance), so the result does
not depend on this machine's costs. Greedy by default; `--sample` measures the sampled prior instead, with the
target's published sampling settings (`hf-dynaspec bench --sample`'s), stored beside the greedy one.
`--traces FILE` also writes each call's rounds (the planner simulation's input: tests/plan_simulation.py).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.acceptance import measure_acceptance
from hf_dynaspec.bench.command import published_config, sampling_settings
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.loading import encode_prompt, load_target

STARTER_PROMPTS = Path(__file__).resolve().parent / "data" / "starter_prompts.jsonl"


def encoded_prompts(tokenizer, prompts_file: Path | None, count: int, per_category: int | None) -> list:
    """`[(prompt id, category, ids [1, T])]`: the starter prompts (`{"prompt"}` rows) or a bench prompt file."""
    if prompts_file is None:
        rows = [json.loads(line) for line in STARTER_PROMPTS.read_text().splitlines() if line.strip()][:count]
        return [(f"starter-{i}", "starter", encode_prompt(tokenizer, row["prompt"], None)) for i, row in enumerate(rows)]
    loaded = load_prompts([prompts_file], limit_per_category=per_category)[:count]
    return [(p.prompt_id, p.category, p.input_ids) for p in encode_prompts(tokenizer, loaded)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--assistant", required=True, type=Path, help="the assistant artifact's directory")
    parser.add_argument("--target", required=True, help="the target: a zoo name, a Hub id or a local path")
    parser.add_argument("--prompts", type=Path, default=None, help="prompt file (default: the starter prompts)")
    # All 48 starter prompts: on 16 a sampled prior's first position came out 0.065 high for one drafter
    # (benchmarks/results/round_93/priors48.txt), and the planner then drafted longer than paid.
    parser.add_argument("--num-prompts", type=int, default=48)
    parser.add_argument("--per-category", type=int, default=None, help="with --prompts: at most N per category")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    parser.add_argument("--sample", action="store_true", help="the sampled prior, with the target's published "
                                                                  "sampling settings")
    parser.add_argument("--write", action="store_true", help="store the result in the artifact's generation config")
    parser.add_argument("--traces", type=Path, default=None, help="write every call's rounds here (JSON)")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    target, tokenizer = load_target(args.target, args.dtype)
    assistant = DynaSpecAssistant.from_pretrained(args.assistant, target=target)
    prompts = encoded_prompts(tokenizer, args.prompts, args.num_prompts, args.per_category)
    start = time.perf_counter()
    sampling = sampling_settings(argparse.Namespace(sample=args.sample), published_config(args.target, target))
    if sampling:
        print(f"sampling with {sampling}")
    prior, calls = measure_acceptance(target, assistant, [ids for _, _, ids in prompts], args.max_new_tokens,
                                      do_sample=args.sample, **(sampling or {}))
    mode = "sampled" if args.sample else "greedy"
    print(f"measured {prior.rounds} rounds on {len(prompts)} prompts in {time.perf_counter() - start:.0f} s")
    print(json.dumps(prior.to_dict()))
    if args.traces is not None:
        record = {"target": args.target, "assistant": str(args.assistant), "dtype": args.dtype,
                  "max_new_tokens": args.max_new_tokens,
                  "tree_shape": [assistant.generation_config.tree_top_k, assistant.generation_config.tree_total_tokens],
                  "calls": [{"prompt_id": pid, "category": category, **call}
                            for (pid, category, _), call in zip(prompts, calls)]}
        args.traces.parent.mkdir(parents=True, exist_ok=True)
        args.traces.write_text(json.dumps(record))
    if args.write:
        path = args.assistant / "generation_config.json"
        stored = json.loads(path.read_text())
        stored["expected_acceptance"] = {**(stored.get("expected_acceptance") or {}), mode: prior.to_dict()}
        path.write_text(json.dumps(stored, indent=2, sort_keys=True) + "\n")
        print(f"wrote expected_acceptance[{mode!r}] to {path}")


if __name__ == "__main__":
    main()
