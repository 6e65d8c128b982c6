"""A few token rows times a bf16 weight, reading the weight once (bf16_rows.c), for verification on AVX2 CPUs.

The C source is compiled on first use with the system C compiler (`CC`, else `cc`/`gcc`) into the
hf-dynaspec cache (hf_dynaspec.cache_home, default ~/.cache/hf-dynaspec) under a name derived from the source and
flags, and loaded with ctypes: no build step at install time and no dependency beyond a compiler.
A cached library is loaded only from a directory the current user owns and nobody else can write, and only
when the file is such too: anyone who could plant a file there could otherwise run code in this process. In
any other case the kernel is compiled afresh into a private temporary directory.
`available()` says whether it can be used here (x86-64 with AVX2 and FMA, a compiler that builds it); callers
fall back to something else when it cannot.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import itertools
import os
import platform
import shutil
import stat
import subprocess
import tempfile
import warnings
from pathlib import Path

import torch
from transformers.utils import logging

from hf_dynaspec.cache_home import home_dir

logger = logging.get_logger(__name__)
SOURCE = Path(__file__).with_name("bf16_rows.c")
FLAGS = ["-O3", "-mavx2", "-mfma", "-fopenmp", "-shared", "-fPIC"]


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _is_private(path: Path) -> bool:
    """Owned by the current user, writable by nobody else, and not a symbolic link."""
    info = path.lstat()
    return (not stat.S_ISLNK(info.st_mode) and info.st_uid == os.getuid()
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _compile(compiler: str, output: Path) -> None:
    subprocess.run([compiler, *FLAGS, str(SOURCE), "-o", str(output)], check=True, capture_output=True, text=True,
                   timeout=120)


def cached_library_path(compiler: str) -> Path:
    """Where a build of this exact source with `compiler` and the flags is cached."""
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join([compiler, *FLAGS]).encode()).hexdigest()[:16]
    return home_dir() / "kernels" / f"bf16_rows-{digest}.so"


def _build(compiler: str, private_dir: Path) -> Path:
    """Compile the kernel unless a build of this exact source and flags is cached in a private directory; return
    the library path (in the cache, or in `private_dir` when the cache cannot be trusted)."""
    library = cached_library_path(compiler)
    try:
        library.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        trusted = _is_private(library.parent)
    except OSError:
        trusted = False
    if not trusted or (library.exists() and not _is_private(library)):
        warnings.warn(f"{library.parent} (or the library in it) can be written by another user or is not yours: "
                      "not loading anything from it; compiling the CPU kernel into a private temporary directory. "
                      "Fix the permissions (chmod go-w, owned by you) to cache it again.", stacklevel=4)
        private = private_dir / library.name
        _compile(compiler, private)
        return private
    if library.exists():
        return library
    # Build beside the target and rename: concurrent first uses (test workers) never see half a file.
    logger.info(f"hf-dynaspec: compiling the CPU bf16 rows kernel with {compiler} (once; cached in {library.parent})")
    with tempfile.TemporaryDirectory(dir=library.parent) as tmp:
        partial = Path(tmp) / library.name
        _compile(compiler, partial)
        os.replace(partial, library)
    return library


@functools.cache
def _library() -> ctypes.CDLL | None:
    if platform.machine().lower() not in ("x86_64", "amd64") or os.name != "posix":
        return None
    compiler = _compiler()
    if compiler is None:
        logger.info("hf-dynaspec: no C compiler (CC, cc, gcc): the CPU bf16 rows kernel is not available here")
        return None
    try:
        # A private temporary directory (mode 0700) for the untrusted-cache case; the loaded library stays mapped
        # after the file is removed.
        with tempfile.TemporaryDirectory(prefix="hf-dynaspec-kernel-") as private_dir:
            library = ctypes.CDLL(str(_build(compiler, Path(private_dir))))
    except (OSError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", "") or str(err)
        warnings.warn(f"hf-dynaspec could not build its CPU verification kernel ({detail.strip()[:300]}); "
                      "falling back to float32 shadow weights", stacklevel=3)
        return None
    if not library.hf_dynaspec_has_avx2_fma():
        return None
    library.hf_dynaspec_bf16_rows.restype = None
    library.hf_dynaspec_bf16_rows.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                              ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    library.hf_dynaspec_bf16_blocks.restype = None
    library.hf_dynaspec_bf16_blocks.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return library


def available() -> bool:
    """True when the kernel is built (or can be) and this CPU has AVX2 and FMA. Decided once per process."""
    return _library() is not None


def bf16_rows_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x` `[..., I]` (any float dtype) times `weight.T`, `weight` `[O, I]` bf16 -> float32 `[..., O]`.

    Accumulates in float32; rounding the result to bf16 (as `nn.Linear` would return) is the caller's.
    """
    library = _library()
    if library is None:
        raise RuntimeError("the CPU bf16 kernel is not available here: check hf_dynaspec.kernels.verify_rows.loader.available()")
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or x.device.type != "cpu":
        raise ValueError(f"bf16_rows_matmul takes a CPU bf16 weight, got {weight.dtype} on {weight.device}")
    out_features, in_features = weight.shape
    if x.shape[-1] != in_features:
        raise ValueError(f"x has {x.shape[-1]} features, the weight {in_features}")
    rows = x.numel() // in_features
    x32 = x.reshape(rows, in_features).to(torch.float32).contiguous()
    weight = weight.contiguous()
    out = torch.empty(rows, out_features, dtype=torch.float32)
    library.hf_dynaspec_bf16_rows(x32.data_ptr(), weight.data_ptr(), out.data_ptr(), rows, out_features, in_features)
    return out.reshape(*x.shape[:-1], out_features)


def bf16_blocks_matmul(x: torch.Tensor, weight: torch.Tensor, block_starts: list[int], block_ends: list[int]) -> torch.Tensor:
    """`x` `[R, I]` (R <= 8 is the fast case) times the rows of the blocks `[start, end)` of `weight` `[O, I]` bf16,
    concatenated in order -> float32 `[R, S]`, S the blocks' total size: the CPU shortlisted head in one call."""
    library = _library()
    if library is None:
        raise RuntimeError("the CPU bf16 kernel is not available here: check hf_dynaspec.kernels.verify_rows.loader.available()")
    if weight.dtype != torch.bfloat16 or weight.device.type != "cpu" or not weight.is_contiguous():
        raise ValueError(f"bf16_blocks_matmul takes a contiguous CPU bf16 weight, got {weight.dtype} on {weight.device}")
    rows, in_features = x.shape
    if not block_starts or any(not 0 <= a < b <= weight.shape[0] for a, b in zip(block_starts, block_ends)):
        raise ValueError("bf16_blocks_matmul needs non-empty blocks [start, end) inside the weight")
    starts = torch.tensor(block_starts, dtype=torch.int64)
    offsets = torch.tensor([0, *itertools.accumulate(b - a for a, b in zip(block_starts, block_ends))],
                           dtype=torch.int64)
    x32 = x.to(torch.float32).contiguous()
    out = torch.empty(rows, int(offsets[-1]), dtype=torch.float32)
    library.hf_dynaspec_bf16_blocks(x32.data_ptr(), weight.data_ptr(), out.data_ptr(), rows, in_features,
                                    starts.data_ptr(), offsets.data_ptr(), len(starts))
    return out
