"""Human-readable views of a benchmark report: a markdown table and the papers' two figures."""

from __future__ import annotations

from pathlib import Path

from hf_dynaspec.bench.methods import split_label


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def single_assistant_view(report: dict, label: str) -> dict:
    """The report of a run with several labelled assistants, as if only assistant `label` had run: its
    `LABEL/method` rows renamed `method`, the other assistants' rows dropped, methods without a label kept
    (vanilla, transformers' methods). For an artifact's model card."""
    assistants = report.get("assistant")
    if not isinstance(assistants, dict) or label not in assistants:
        known = ", ".join(assistants) if isinstance(assistants, dict) else "none: the run had one unlabelled assistant"
        raise ValueError(f"the bench report has no assistant labelled {label!r} (labels: {known})")
    methods = {}
    for key, value in report["methods"].items():
        own, method = split_label(key)
        if own in (None, label):
            methods[method] = value
    return {**report, "methods": methods, "assistant": assistants[label],
            "other_assistants": {k: v for k, v in assistants.items() if k != label}}


def markdown_table(report: dict) -> str:
    """One row per method, then tau / speedup per category."""
    methods = report["methods"]
    lines = [
        f"{report['target']} ({report['dtype']}, {report['device']}), {report['n_prompts']} prompts, "
        f"{report['max_new_tokens']} new tokens, "
        + (f"sampled {report['sampling']} from seed {report['seed']}" if report.get("mode") == "sampled" else "greedy"),
        "",
        "| method | tau (acceptance) | avg shortlist | coverage | lookup share / acceptance | tok/s | speedup | decode speedup "
        "| exact (mismatches) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, m in methods.items():
        lookup = "-" if m.get("lookup_share") is None else (
            f"{_fmt(m['lookup_share'])} / {_fmt(m['lookup_acceptance'])}"
            + ("" if m.get("lookup_vetoed") is None else f" ({_fmt(m['lookup_vetoed'])} vetoed)"))
        lines.append(
            f"| {key} | {_fmt(m['tau'])}{_acceptance(m)} | "
            f"{_fmt(m['avg_shortlist'], 0)} | {_fmt(m['coverage'], 3)} | {lookup} | "
            f"{_fmt(m['tokens_per_s'])}{_weights(m)} | {_fmt(m['speedup'])} | {_fmt(m['decode_speedup'])} | "
            f"{_exact_cell(m)} |"
        )
    if any(m.get("weight_format") for m in methods.values()):
        lines += ["", "[format]: another engine's decoding of a GGUF file in that weight format; bf16 is the target's "
                  "own weights (its kernels round differently), a quantized format is not the same model"]
    if report.get("exactness"):
        lines += ["", f"exactness: {report['exactness']}"]
    categories = list(next(iter(methods.values()))["per_category"])
    lines += ["", "tau / speedup per category:", "",
              "| method | " + " | ".join(categories) + " |", "| --- |" + " ---: |" * len(categories)]
    for key, m in methods.items():
        cells = [f"{_fmt(m['per_category'][c]['tau'])} / {_fmt(m['per_category'][c]['speedup'])}" for c in categories]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _weights(metrics: dict) -> str:
    return f" [{metrics['weight_format']}]" if metrics.get("weight_format") else ""


def _acceptance(metrics: dict) -> str:
    return "" if metrics.get("acceptance") is None else f" ({_fmt(metrics['acceptance'])})"


def _exact_cell(metrics: dict) -> str:
    if metrics["exact"] is None:
        return "by the tests (sampled)"
    return f"{'yes' if metrics['exact'] else 'NO'} ({metrics['n_mismatch']})"


def write_plots(report: dict, directory: Path, vocab_size: int | None = None) -> list[Path]:
    """`tau_vs_shortlist.png` (tau against average shortlist size per strategy; full-vocabulary methods at
    `vocab_size`) and `speedup_per_category.png`. Returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    methods = report["methods"]
    written = []

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, m in methods.items():
        if m["tau"] is None:
            continue
        size = m["avg_shortlist"] if m["avg_shortlist"] is not None else (vocab_size if key == "eagle" else None)
        if size is None:
            continue
        ax.scatter(size, m["tau"], label=key)
        ax.annotate(key, (size, m["tau"]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xlabel("average shortlist size (rows scored per draft token)")
    ax.set_ylabel("tau (tokens per target pass)")
    ax.set_title(f"{report['target']}: tau vs shortlist size")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    written.append(directory / "tau_vs_shortlist.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)

    categories = list(next(iter(methods.values()))["per_category"])
    shown = [k for k in methods if k != "vanilla"]
    fig, ax = plt.subplots(figsize=(max(6, len(categories) * 1.2), 4))
    width = 0.8 / max(len(shown), 1)
    for i, key in enumerate(shown):
        values = [methods[key]["per_category"][c]["speedup"] or 0.0 for c in categories]
        ax.bar([c + i * width for c in range(len(categories))], values, width=width, label=key)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([c + width * (len(shown) - 1) / 2 for c in range(len(categories))], categories, rotation=30)
    ax.set_ylabel("speedup over vanilla (geometric mean)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(directory / "speedup_per_category.png")
    fig.savefig(written[-1], dpi=120)
    plt.close(fig)
    return written
