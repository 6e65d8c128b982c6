"""#76 with the request calibration: the table of lookup_76f/README.md from the bench JSONs run.sh wrote (tau and speedup per
category, transformers' prompt lookup beside the drafter-free assistant and the default, and each method's passes
by source).

    python benchmarks/results/lookup_76f/summary.py"""
import json
from pathlib import Path

here = Path(__file__).parent
TARGETS = ["smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"]


def cell(method: dict, category: str) -> str:
    row = method["per_category"][category]
    return f"{row['tau']:.2f} / {row['speedup']:.2f}x"


print("| target | method | RAG tau / speedup | summarization tau / speedup | passes by source |")
print("| --- | --- | ---: | ---: | --- |")
for target in TARGETS:
    path = here / f"{target}.json"
    if not path.exists():
        continue
    for name, method in json.loads(path.read_text())["methods"].items():
        if name != "vanilla":
            print(f"| {target} | {name} | {cell(method, 'rag')} | {cell(method, 'summarization')} | "
                  f"{method.get('passes_by_source')} |")
