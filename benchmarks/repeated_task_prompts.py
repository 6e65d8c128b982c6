"""A repeated-task workload for the suffix cache: one prompt template, 20 different inputs (a code edit).

    python benchmarks/repeated_task_prompts.py ../shared/data/eval/humaneval_dev.jsonl \
        benchmarks/results/repeated_task_prompts.jsonl

Each prompt asks for the same edit (type hints and a docstring) of a different HumanEval dev function (the stub
and its canonical solution): the answers repeat their input (prompt lookup's strength) and share the edit's
shape across calls (what the suffix cache's shared index learns). Spec-Bench rows, category `repeated_task`,
read by `hf-dynaspec bench --prompts`.
"""

from __future__ import annotations

import argparse
import json

TEMPLATE = ("Rewrite this Python function with type hints on every argument and the return value, and a "
            "Google-style docstring with Args and Returns sections. Keep the body unchanged. Reply with the "
            "complete function in one Python code block and nothing else.\n\n```python\n{code}```")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("humaneval", help="HumanEval .jsonl (task_id, prompt, canonical_solution)")
    parser.add_argument("out")
    parser.add_argument("--count", type=int, default=20)
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.humaneval) if line.strip()][: args.count]
    with open(args.out, "w") as out:
        for index, row in enumerate(rows):
            code = row["prompt"] + row["canonical_solution"]
            out.write(json.dumps({"question_id": index, "category": "repeated_task", "source": row["task_id"],
                                  "turns": [TEMPLATE.format(code=code)]}) + "\n")


if __name__ == "__main__":
    main()
