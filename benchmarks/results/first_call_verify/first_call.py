"""A user's first calls: the README's python blocks, in order, in one process, on a fresh hf-dynaspec cache (the
models linked in), timed block by block, with the calibration's verify passes counted.

    python first_call.py REPO_ROOT  # the package imported from REPO_ROOT (a worktree of the revision to time)

Prints one JSON line: the revision, host kind, threads, seconds per block, total, verify passes and their seconds.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

root = Path(sys.argv[1]).resolve()
home = Path(tempfile.mkdtemp(prefix="first-call-"))
(home / "models").symlink_to(Path.home() / ".cache" / "hf-dynaspec" / "models")
os.environ["HF_DYNASPEC_HOME"] = str(home)
sys.path.insert(0, str(root))
os.chdir(root)

import torch  # noqa: E402

from hf_dynaspec.generation.costs import timing  # noqa: E402

passes = []
measure = timing.verify_seconds


def counted(*args, **kwargs):
    start = time.perf_counter()
    out = measure(*args, **kwargs)
    passes.append(time.perf_counter() - start)
    return out


timing.verify_seconds = counted  # before a3114c8 the verify table called it here
for name in ("verify_kernel", "verify_costs"):  # the modules that import it by name
    try:
        module = importlib.import_module(f"hf_dynaspec.generation.costs.{name}")
    except ImportError:  # verify_costs is new in a3114c8
        continue
    module.verify_seconds = counted

blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), flags=re.S)
namespace: dict = {}
seconds = []
for block in blocks:
    start = time.perf_counter()
    exec(compile(block, "README.md", "exec"), namespace)
    seconds.append(round(time.perf_counter() - start, 2))
lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
host = sorted(set(re.findall(r"avx512_bf16|amx_bf16", lscpu))) or ["avx2"]
revision = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(json.dumps({"revision": revision, "host": host, "threads": torch.get_num_threads(), "block_seconds": seconds,
                  "total_seconds": round(sum(seconds), 2), "verify_passes": len(passes),
                  "verify_pass_seconds": round(sum(passes), 2)}))
