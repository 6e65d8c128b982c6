"""A few token rows times a bf16 or float32 weight, reading the weight once (bf16_rows.c): the CPU's one-token
steps and verification forwards. bf16 inputs take AVX-512 BF16 (`vdpbf16ps`) where the CPU has it, else AVX2/FMA.

The C source is compiled on first use with the system C compiler (`CC`, else `cc`/`gcc`) into the
hf-dynaspec cache (hf_dynaspec.cache_home, default ~/.cache/hf-dynaspec) under a name derived from the source and
flags, and loaded with ctypes: no build step at install time and no dependency beyond a compiler.
A cached library is loaded only from a directory the current user owns and nobody else can write, and only
when the file is such too: anyone who could plant a file there could otherwise run code in this process. In
any other case the kernel is compiled afresh into a private temporary directory.
`available()` says whether it can be used here (x86-64 with AVX2 and FMA, a compiler that builds it); callers
fall back to something else when it cannot. `isa()` names the form bf16 inputs take here.
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
    pointers = [ctypes.c_void_p] * 3
    for name in ("hf_dynaspec_bf16_rows", "hf_dynaspec_bf16_rows_dp", "hf_dynaspec_f32_rows",
                 "hf_dynaspec_f32_rows_avx512"):
        getattr(library, name).restype = None
        getattr(library, name).argtypes = [*pointers, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    for name in ("hf_dynaspec_bf16_blocks", "hf_dynaspec_bf16_blocks_dp"):
        getattr(library, name).restype = None
        getattr(library, name).argtypes = [*pointers, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                           ctypes.c_void_p, ctypes.c_int64]
    return library


def available() -> bool:
    """True when the kernel is built (or can be) and this CPU has AVX2 and FMA. Decided once per process."""
    return _library() is not None


@functools.cache
def isa() -> str | None:
    """The kernel's forms here: "avx512_bf16" (bf16 inputs by `vdpbf16ps`, float32 by AVX-512F), "avx512" (bf16
    widened to float32 on AVX2, float32 on AVX-512F), "avx2" (both on AVX2/FMA), or None (no kernel)."""
    library = _library()
    if library is None:
        return None
    # ATEN_CPU_CAPABILITY=avx2 is how an AVX2-only host is emulated (PyTorch's own kernels then take AVX2): the rows
    # kernel follows it, so that an emulated run uses no instruction an AVX2 host lacks.
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() in ("avx2", "default"):
        return "avx2"
    if library.hf_dynaspec_has_avx512_bf16():
        return "avx512_bf16"
    return "avx512" if library.hf_dynaspec_has_avx512f() else "avx2"


DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float32: "float32"}


def _checked(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype, name: str) -> ctypes.CDLL:
    library = _library()
    if library is None:
        raise RuntimeError("the CPU rows kernel is not available here: check "
                           "hf_dynaspec.kernels.verify_rows.loader.available()")
    if weight.dtype != dtype or weight.device.type != "cpu" or x.device.type != "cpu":
        raise ValueError(f"{name} takes a CPU {DTYPE_NAMES[dtype]} weight and CPU inputs, got a {weight.dtype} weight on "
                         f"{weight.device} and inputs on {x.device}")
    if x.shape[-1] != weight.shape[-1]:
        raise ValueError(f"x has {x.shape[-1]} features, the weight {weight.shape[-1]}")
    return library


def bf16_rows_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x` `[..., I]` (any float dtype) times `weight.T`, `weight` `[O, I]` bf16 -> float32 `[..., O]`.

    Accumulates in float32; rounding the result to bf16 (as `nn.Linear` would return) is the caller's. bf16 `x`
    takes the AVX-512 BF16 form where the CPU has it (pairs of bf16 products are exact in float32); any other
    dtype is widened to float32 and multiplied on AVX2/FMA, so it is never rounded to bf16.
    """
    library = _checked(x, weight, torch.bfloat16, "bf16_rows_matmul")
    rows = x.reshape(-1, weight.shape[1])
    if x.dtype == torch.bfloat16 and isa() == "avx512_bf16":
        return _rows_call(library.hf_dynaspec_bf16_rows_dp, rows.contiguous(), weight, x.shape[:-1])
    return _rows_call(library.hf_dynaspec_bf16_rows, rows.to(torch.float32).contiguous(), weight, x.shape[:-1])


def f32_rows_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """`x` `[..., I]` float32 times `weight.T`, `weight` `[O, I]` float32 -> float32 `[..., O]`, the weight read
    once for all rows (AVX-512F where the CPU has it, else AVX2/FMA)."""
    library = _checked(x, weight, torch.float32, "f32_rows_matmul")
    if x.dtype != torch.float32:
        raise ValueError(f"f32_rows_matmul takes float32 inputs, got {x.dtype}")
    wide = isa() in ("avx512_bf16", "avx512")
    kernel = library.hf_dynaspec_f32_rows_avx512 if wide else library.hf_dynaspec_f32_rows
    return _rows_call(kernel, x.reshape(-1, weight.shape[1]).contiguous(), weight, x.shape[:-1])


def _rows_call(kernel, rows: torch.Tensor, weight: torch.Tensor, leading: torch.Size) -> torch.Tensor:
    """A rows kernel over `rows` `[R, I]` (contiguous, of the kernel's input dtype) and `weight` `[O, I]` -> float32
    `[*leading, O]`. Every tensor whose address the kernel reads is held by a name until it returns."""
    weight = weight.contiguous()
    out = torch.empty(rows.shape[0], weight.shape[0], dtype=torch.float32)
    kernel(rows.data_ptr(), weight.data_ptr(), out.data_ptr(), rows.shape[0], weight.shape[0], weight.shape[1])
    return out.reshape(*leading, weight.shape[0])


def bf16_blocks_matmul(x: torch.Tensor, weight: torch.Tensor, block_starts: list[int], block_ends: list[int]) -> torch.Tensor:
    """`x` `[R, I]` (R <= 8 is the fast case) times the rows of the blocks `[start, end)` of `weight` `[O, I]` bf16,
    concatenated in order -> float32 `[R, S]`, S the blocks' total size: the CPU shortlisted head in one call."""
    library = _checked(x, weight, torch.bfloat16, "bf16_blocks_matmul")
    if not weight.is_contiguous():
        raise ValueError("bf16_blocks_matmul takes a contiguous weight")
    rows, in_features = x.shape
    if not block_starts or any(not 0 <= a < b <= weight.shape[0] for a, b in zip(block_starts, block_ends)):
        raise ValueError("bf16_blocks_matmul needs non-empty blocks [start, end) inside the weight")
    starts = torch.tensor(block_starts, dtype=torch.int64)
    offsets = torch.tensor([0, *itertools.accumulate(b - a for a, b in zip(block_starts, block_ends))],
                           dtype=torch.int64)
    out = torch.empty(rows, int(offsets[-1]), dtype=torch.float32)
    if x.dtype == torch.bfloat16 and isa() == "avx512_bf16":
        xs, kernel = x.contiguous(), library.hf_dynaspec_bf16_blocks_dp
    else:
        xs, kernel = x.to(torch.float32).contiguous(), library.hf_dynaspec_bf16_blocks
    kernel(xs.data_ptr(), weight.data_ptr(), out.data_ptr(), rows, in_features, starts.data_ptr(), offsets.data_ptr(),
           len(starts))
    return out
