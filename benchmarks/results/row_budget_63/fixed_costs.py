"""Run `hf-dynaspec ...` with every measured cost replaced by one fixed table (the same in both trees of an A/B):
the planner's choices then differ only through what the drafts do."""
import json
import sys

import hf_dynaspec.generation.costs.round_costs as round_costs
import hf_dynaspec.generation.costs.store as store

FIXED = json.load(open(sys.argv[1]))
used = set()


def fixed_cached(key, parse, measure, to_json, what):
    kind = "verify_rows" if key.startswith("verify_rows:") else "round:" + key.rsplit(":", 1)[-1]
    if kind not in FIXED:
        raise SystemExit(f"no fixed costs for {kind} ({what})")
    if kind not in used:
        print(f"FIXEDCOSTS {kind} for key {key}", file=sys.stderr, flush=True)
        used.add(kind)
    costs, problem = parse(FIXED[kind])
    assert costs is not None, problem
    return costs


store.cached = fixed_cached
round_costs.cached = fixed_cached
import hf_dynaspec.generation.costs.verify_kernel as verify_kernel  # noqa: E402


def fixed_verify_rows(target):
    if "verify_rows" not in used:
        print(f"FIXEDCOSTS verify_rows = {FIXED['verify_rows']}", file=sys.stderr, flush=True)
        used.add("verify_rows")
    return FIXED["verify_rows"]


verify_kernel.measured_verify_rows = fixed_verify_rows
from hf_dynaspec.cli import main  # noqa: E402

sys.argv = ["hf-dynaspec"] + sys.argv[2:]
main()
