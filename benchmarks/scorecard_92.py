"""The structural scorecard of issue 92, measured on the working tree (or on a checkout given as an argument):

    python benchmarks/scorecard_92.py [ROOT]

- string dispatch on a source kind in drafting/ and generation/ (the issue's grep);
- core code lines: Python tokens' lines with no docstrings, comments or blank lines, over the package but bench/,
  cli.py, zoo.py and loading.py; total lines of the same files beside them;
- the public surface: `__all__`'s size and the `custom_generate` callables the package exports.
The call set is tests/call_set.py's table (run it separately: it imports the tree under test).
"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import tokenize
from pathlib import Path

EXCLUDED = ("bench/", "cli.py", "zoo.py", "loading.py")
DISPATCH = r"source (==|!=|in|not in) ?[(\"']|\.source (==|!=|in|not in)"


def docstring_lines(tree: ast.AST) -> set[int]:
    """Line numbers of every module, class or function docstring."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(source: str) -> int:
    """Lines holding a token other than a comment, a newline or a docstring."""
    skipped = docstring_lines(ast.parse(source))
    kept: set[int] = set()
    ignorable = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in ignorable:
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in skipped:
                kept.add(line)
    return len(kept)


def main(root: Path) -> None:
    package = root / "hf_dynaspec"
    files = [p for p in sorted(package.rglob("*.py"))
             if not str(p.relative_to(package)).startswith(EXCLUDED)]
    core = sum(code_lines(p.read_text()) for p in files)
    total = sum(len(p.read_text().splitlines()) for p in files)
    grep = subprocess.run(["grep", "-rnE", DISPATCH, str(package / "drafting"), str(package / "generation")],
                          capture_output=True, text=True).stdout.splitlines()
    init = ast.parse((package / "__init__.py").read_text())
    names = next(ast.literal_eval(n.value) for n in init.body
                 if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__")
    entries = [n for n in names if n.endswith("_generate")]
    print(f"string dispatch on a source kind: {len(grep)}")
    print(f"core code lines: {core} (total lines of the same {len(files)} files: {total})")
    print(f"__all__: {len(names)} names; custom_generate names exported: {len(entries)} {entries}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
