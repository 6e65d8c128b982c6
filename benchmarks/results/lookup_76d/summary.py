"""#76 bar 3: the tables of lookup_76d/README.md from the bench JSONs run.sh wrote (tau and speedup per category,
after and before the earliest-occurrence source, transformers' prompt lookup beside them), with each method's
passes by source.

    python benchmarks/results/lookup_76d/summary.py"""
import json
from pathlib import Path

here = Path(__file__).parent
TARGETS = ["smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]
DEFAULT = "dynaspec+lookup:5+suffix+auto"


def cell(method: dict, category: str) -> str:
    row = method["per_category"][category]
    return f"{row['tau']:.2f} / {row['speedup']:.2f}x"


print("| target | method | RAG tau / speedup | summarization tau / speedup | passes by source |")
print("| --- | --- | ---: | ---: | --- |")
for target in TARGETS:
    for tag in ("", "_before"):
        path = here / f"{target}{tag}.json"
        if not path.exists():
            continue
        methods = json.loads(path.read_text())["methods"]
        for name, method in methods.items():
            if name == "vanilla" or (tag and name == "prompt-lookup"):
                continue
            label = f"{name}{' (before, c0a203c)' if tag else ''}"
            print(f"| {target} | {label} | {cell(method, 'rag')} | {cell(method, 'summarization')} | "
                  f"{method['passes_by_source']} |")
