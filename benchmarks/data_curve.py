"""Drafter quality against training tokens: gathers a data curve's measurements into one table, a fit and a plot.

    python benchmarks/data_curve.py --target qwen2.5-coder-0.5b-instruct \
        --runs corpus=outputs/curve39/runs/corpus05 own=outputs/curve39/runs/sd05 \
        --agreement benchmarks/results/data_curve_05b_agreement.json --bench benchmarks/results/data_curve_05b_tau.json \
        --json benchmarks/results/data_curve_05b.json --plot docs/images/data_curve_05b.png

A run directory holds one drafter per budget, `b<TOKENS>/assistant` (outputs/curve39/train_curve.sh: one constant-rate
run, branches decaying over each budget's last 20%). Each point is labelled `<kind>-<TOKENS>` in the measurements:
`benchmarks/feature_agreement.py --depths 3` (teacher-forced top-1 agreement on the target's own answers to the dev
prompts, answer tokens) and `hf-dynaspec bench` with methods `<label>/eagle+draft:2` and `+draft:4` (chains, full
head, no lookup). The fit is tau = a + b log10(tokens) per kind and chain length, least squares over the points; its
inversion gives the tokens a tau would need. A log-linear fit cannot hold far out: a chain of K caps tau at K + 1, and
acceptance saturates; the report says so beside every extrapolated number.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np


def curve_points(runs: dict[str, Path]) -> list[dict]:
    """One row per trained budget: kind, tokens seen (from the run's own log) and label."""
    points = []
    for kind, directory in runs.items():
        for budget_dir in sorted(directory.glob("b*"), key=lambda p: int(p.name[1:])):
            log = budget_dir / "train_log.jsonl"
            if not (budget_dir / "assistant" / "config.json").is_file() or not log.is_file():
                continue
            last = json.loads(log.read_text().splitlines()[-1])
            points.append({"kind": kind, "label": f"{kind}-{budget_dir.name[1:]}", "budget": int(budget_dir.name[1:]),
                           "tokens": last["tokens"], "steps": last["step"], "train_seconds": last["seconds"],
                           "held_out_top1": [last.get("val_response_top1_1"), last.get("val_response_top1_2")]})
    return points


def attach_measurements(points: list[dict], agreement: dict | None, bench: dict | None) -> None:
    for point in points:
        label = point["label"]
        if agreement:
            found = next((v for k, v in agreement["results"].items() if k.split(" on ")[0] == label), None)
            if found:
                point["dev_agreement"] = [found.get(f"val_response_top1_{d}") for d in (1, 2, 3)]
                for k in (2, 4):
                    point[f"sim_tau_k{k}"] = found.get(f"sim_tau_k{k}")
        if bench:
            for k in (2, 4):
                method = bench["methods"].get(f"{label}/eagle+draft:{k}")
                point[f"tau_k{k}"] = method["tau"] if method else None


def other_drafters(points: list[dict], agreement: dict | None, bench: dict | None) -> dict:
    """Measurements of drafters outside the curve (the shipped one, as a reference), by label."""
    labels = {p["label"] for p in points}
    others: dict[str, dict] = {}
    for key, value in ((agreement or {}).get("results") or {}).items():
        label = key.split(" on ")[0]
        if label not in labels:
            others.setdefault(label, {}).update(value)
    for key, value in ((bench or {}).get("methods") or {}).items():
        label, _, method = key.partition("/")
        if method and label not in labels:
            others.setdefault(label, {})[f"tau {method}"] = value["tau"]
    return others


def fit_log_linear(tokens: list[float], values: list[float]) -> tuple[float, float] | None:
    """(a, b) of value = a + b log10(tokens), or None with fewer than 3 points."""
    if len(tokens) < 3:
        return None
    b, a = np.polyfit(np.log10(tokens), values, 1)
    return float(a), float(b)


def fits(points: list[dict], references: dict[str, float], goal: float) -> dict:
    """Per kind, chain length and source (bench-measured `tau`, teacher-forced `sim_tau`): the fit, its predictions
    at the reference token counts (capped at K + 1), and the tokens it needs for `goal`."""
    out = {}
    for kind in sorted({p["kind"] for p in points}):
        for source in ("tau", "sim_tau"):
            for k in (2, 4):
                key = f"{source}_k{k}"
                rows = [p for p in points if p["kind"] == kind and p.get(key) is not None]
                fit = fit_log_linear([p["tokens"] for p in rows], [p[key] for p in rows])
                if fit is None:
                    continue
                a, b = fit
                entry = {"a": a, "b_per_decade": b, "points": len(rows),
                         "predicted": {name: min(a + b * math.log10(n), k + 1) for name, n in references.items()}}
                if b > 0 and goal < k + 1:
                    entry[f"tokens_for_tau_{goal}"] = 10 ** ((goal - a) / b)
                out[f"{kind} {source} K={k}"] = entry
    return out


def plot(points: list[dict], fitted: dict, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {}
    for kind in sorted({p["kind"] for p in points}):
        rows = sorted((p for p in points if p["kind"] == kind), key=lambda p: p["tokens"])
        for key, marker, style, name in (("sim_tau_k2", "o", "-", "K=2, simulated"), ("sim_tau_k4", "s", "--", "K=4, simulated"),
                                         ("tau_k2", "D", "none", "K=2, measured")):
            rows_with = [p for p in rows if p.get(key) is not None]
            if rows_with:
                x = [p["tokens"] for p in rows_with]
                line, = left.plot(x, [p[key] for p in rows_with], marker=marker, linestyle=style,
                                  label=f"{kind}, {name}", color=colours.get(kind))
                colours.setdefault(kind, line.get_color())
                fit = fitted.get(f"{kind} {key[:-3]} K={key[-1]}")
                if fit:
                    grid = np.logspace(math.log10(min(x)), math.log10(max(x)), 20)
                    left.plot(grid, fit["a"] + fit["b_per_decade"] * np.log10(grid), ":", color=line.get_color())
        for depth, style in ((0, "-"), (1, "--"), (2, "-.")):
            y = [(p.get("dev_agreement") or [None] * 3)[depth] for p in rows]
            if any(v is not None for v in y):
                right.plot([p["tokens"] for p in rows], y, style, marker="o", color=colours.get(kind),
                           label=f"{kind}, position {depth + 1}")
    for axis, ylabel in ((left, "tau (tokens per target pass)"), (right, "teacher-forced top-1 agreement (answers)")):
        axis.set_xscale("log")
        axis.set_xlabel("training tokens (one epoch, each seen once)")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def markdown_table(points: list[dict]) -> str:
    lines = ["| kind | tokens | steps | tau K=2, measured | tau K=2 / K=4, simulated | agreement pos. 1 / 2 / 3 |",
             "| --- | ---: | ---: | ---: | --- | --- |"]
    for p in sorted(points, key=lambda p: (p["kind"], p["tokens"])):
        agree = " / ".join("-" if v is None else f"{v:.3f}" for v in p.get("dev_agreement") or [None] * 3)
        show = lambda key, p=p: "-" if p.get(key) is None else f"{p[key]:.2f}"  # noqa: E731
        lines.append(f"| {p['kind']} | {p['tokens']:,} | {p['steps']} | {show('tau_k2')} | "
                     f"{show('sim_tau_k2')} / {show('sim_tau_k4')} | {agree} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", required=True)
    parser.add_argument("--runs", nargs="+", required=True, metavar="KIND=DIR")
    parser.add_argument("--agreement", type=Path, default=None, help="benchmarks/feature_agreement.py --json output")
    parser.add_argument("--bench", type=Path, default=None, help="hf-dynaspec bench --json output")
    parser.add_argument("--goal", type=float, default=2.5, help="the tau whose token count the fit is asked for")
    parser.add_argument("--reference", nargs="*", default=[], metavar="NAME=TOKENS",
                        help="token counts to extrapolate to (e.g. a published recipe's data size)")
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)

    runs = {kind: Path(path) for kind, path in (item.split("=", 1) for item in args.runs)}
    points = curve_points(runs)
    if not points:
        raise SystemExit(f"no finished budgets (b<TOKENS>/assistant) under {', '.join(map(str, runs.values()))}")
    load = lambda path: json.loads(path.read_text()) if path else None  # noqa: E731
    attach_measurements(points, load(args.agreement), load(args.bench))
    references = {name: float(n) for name, n in (item.split("=", 1) for item in args.reference)}
    fitted = fits(points, references, args.goal)
    table = markdown_table(points)
    print(table)
    others = other_drafters(points, load(args.agreement), load(args.bench))
    for label, values in others.items():
        print(f"{label}: " + ", ".join(f"{k} {v:.3f}" for k, v in values.items() if isinstance(v, float)))
    for name, fit in fitted.items():
        print(f"{name}: tau = {fit['a']:.3f} + {fit['b_per_decade']:.3f} log10(tokens); "
              + ", ".join(f"{k} {v:.2f}" for k, v in fit["predicted"].items())
              + (f"; tau {args.goal} at {fit[f'tokens_for_tau_{args.goal}']:.3g} tokens"
                 if f"tokens_for_tau_{args.goal}" in fit else ""))
    args.json.write_text(json.dumps({"target": args.target, "points": points, "fits": fitted, "table": table, "others": others,
                                     "agreement": str(args.agreement), "bench": str(args.bench)}, indent=2) + "\n")
    if args.plot:
        plot(points, fitted, args.plot, f"{args.target}: drafter quality against training tokens")


if __name__ == "__main__":
    main()
