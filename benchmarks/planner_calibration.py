"""Is the planner right about each source? Its predicted acceptance at each round it drafts, against what the round
accepted, per source (drafter, prompt lookup, suffix cache; probes apart): not a timing.

    python benchmarks/planner_calibration.py --target gemma-3-270m [--greedy] [--drafter-free] [--json ROWS.json]

The dev prompts (2 per category, as `hf-dynaspec bench --limit-per-category 2`), 64 new tokens, the target's
published sampling settings unless --greedy, seed 0, the shipped assistant (or `DynaSpecAssistant.for_target`).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import torch

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.bench.prompts import encode_prompts, load_prompts
from hf_dynaspec.bench.runner import load_assistant, load_target
from hf_dynaspec.drafting.planning.core import expected_tokens
from hf_dynaspec.drafting.planning.planner import SpeculationPlanner
from hf_dynaspec.zoo import published_sampling

PROMPT_FILES = ["../shared/data/eval/spec_bench_dev.jsonl", "../shared/data/eval/humaneval_dev.jsonl"]


def logged_rounds() -> list[dict]:
    """Wrap the planner's choose/record: each drafted round's source, predicted accepted tokens and outcome."""
    pending, rows = {}, []
    choose, record = SpeculationPlanner.choose, SpeculationPlanner.record

    def choose_logged(self, offers, context, rows_in_batch=1):
        plan = choose(self, offers, context, rows_in_batch)
        if plan.offer is not None:
            proposer = plan.offer.proposer
            table = proposer.table(self, plan.offer)
            priors = [table.estimate(proposer.key(plan.offer, j)) for j in range(1, plan.num_tokens + 1)]
            pending[id(self)] = (plan.offer.source, priors, plan.probe, [offer.source for offer in offers])
        return plan

    def record_logged(self, plan, num_drafted, num_accepted, draft=None, accepted_nodes=None):
        chosen = pending.pop(id(self), None)
        if chosen is not None and plan.offer is not None:
            source, priors, probe, offered = chosen
            rows.append({"source": source, "probe": probe, "drafted": num_drafted, "accepted": num_accepted,
                         "predicted": expected_tokens(priors[:num_drafted])[num_drafted] - 1 if num_drafted else 0.0,
                         "p1": priors[0], "copy_offered": any(s != "drafter" for s in offered)})
        return record(self, plan, num_drafted, num_accepted, draft, accepted_nodes)

    SpeculationPlanner.choose, SpeculationPlanner.record = choose_logged, record_logged
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="gemma-3-270m")
    parser.add_argument("--greedy", action="store_true")
    parser.add_argument("--drafter-free", action="store_true")
    parser.add_argument("--json", default=None, help="write every logged round here")
    args = parser.parse_args(argv)
    model, tokenizer = load_target(args.target, "bf16")
    assistant = DynaSpecAssistant.for_target(model) if args.drafter_free else load_assistant(None, model, args.target)[0]
    prompts = encode_prompts(tokenizer, load_prompts(PROMPT_FILES, limit_per_category=2))
    settings = {} if args.greedy else {k: v for k, v in published_sampling(args.target).items() if k != "do_sample"}
    rows = logged_rounds()
    torch.manual_seed(0)
    for prompt in prompts:
        ids = prompt.input_ids
        model.generate(ids, attention_mask=torch.ones_like(ids), assistant_model=assistant, max_new_tokens=64,
                       do_sample=not args.greedy, **settings)
    totals = defaultdict(lambda: defaultdict(float))
    for row in rows:
        entry = totals[row["source"] + (" probe" if row["probe"] else "")]
        for name, value in (("rounds", 1), ("drafted", row["drafted"]), ("accepted", row["accepted"]),
                            ("predicted", row["predicted"]), ("p1", row["p1"]), ("first", row["accepted"] >= 1),
                            ("copy_offered", row["copy_offered"])):
            entry[name] += value
    print(f"{args.target}, {'greedy' if args.greedy else 'sampled'}, "
          f"{'drafter-free' if args.drafter_free else 'shipped assistant'}; per drafted round:")
    for source, entry in totals.items():
        n = entry["rounds"]
        print(f"{source:22s} rounds {n:4.0f}  drafted {entry['drafted'] / n:5.2f}  accepted {entry['accepted'] / n:.3f} "
              f"(predicted {entry['predicted'] / n:.3f})  position 1 {entry['first'] / n:.3f} (predicted "
              f"{entry['p1'] / n:.3f})  a copy offered {entry['copy_offered'] / n:.2f}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out)


if __name__ == "__main__":
    main()
