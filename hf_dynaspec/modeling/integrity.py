"""Is this artifact whole, sound, and for this target? Checks that run at save, load and attach.

- `checksums.json`: the sha256 of every weights file, written by `save_pretrained` and verified on load, so a
  corrupted download or a flipped bit is refused instead of drafting garbage (safetensors itself checks
  only the header).
- `non_finite_tensors`: NaN/inf weights would make every draft meaningless, and in greedy mode silently so.
- `target_fingerprint`: a few values of the target's embedding and LM-head rows, stored at `from_target` and
  compared at `attach`. A same-shaped but different target (another fine-tune of the same base) passes every
  shape check; its fingerprint does not match. Values are compared with a tolerance that admits the same
  weights in another dtype (bf16 vs fp32) and nothing else.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from hf_dynaspec.errors import IntegrityError

CHECKSUMS_NAME = "checksums.json"
_FINGERPRINT_ROWS = 6
_FINGERPRINT_COLUMNS = 8
# Relative to the largest stored magnitude: bf16 rounding moves a value by < 2^-8 of itself.
_FINGERPRINT_TOLERANCE = 2e-2


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_checksums(directory: str | Path) -> None:
    """Record the sha256 of every `*.safetensors` file of a saved artifact in `checksums.json`."""
    directory = Path(directory)
    sums = {path.name: _sha256(path) for path in sorted(directory.glob("*.safetensors"))}
    (directory / CHECKSUMS_NAME).write_text(json.dumps({"sha256": sums}, indent=2) + "\n")


def verify_checksums(directory: str | Path) -> bool:
    """Check the weights files against `checksums.json`; False when the artifact has none (older artifacts,
    published EAGLE checkpoints). Raises IntegrityError naming the file that differs."""
    directory = Path(directory)
    path = directory / CHECKSUMS_NAME
    if not path.is_file():
        return False
    try:
        sums = json.loads(path.read_text())["sha256"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise IntegrityError(f"{path} is corrupt ({err}); re-download or re-save the assistant.") from err
    for name, expected in sums.items():
        file = directory / name
        if not file.is_file():
            raise IntegrityError(f"{file} is listed in {CHECKSUMS_NAME} but missing: the artifact is incomplete.")
        if _sha256(file) != expected:
            raise IntegrityError(
                f"{file} does not match the sha256 recorded when it was saved: the file was corrupted (an "
                "interrupted download, a disk error) or edited. Re-download or re-save the assistant; after a "
                f"deliberate edit, rewrite {CHECKSUMS_NAME} with hf_dynaspec.modeling.integrity.write_checksums(directory)."
            )
    return True


def non_finite_tensors(state: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding NaN or inf."""
    return sorted(name for name, t in state.items()
                  if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()))


def _spread(count: int, size: int) -> list[int]:
    """`count` indices spread evenly over `range(size)`, both ends included."""
    if size <= count:
        return list(range(size))
    return [round(i * (size - 1) / (count - 1)) for i in range(count)]


def _sample(weight: torch.Tensor, rows: list[int], columns: list[int]) -> torch.Tensor:
    return weight.detach()[rows][:, columns].float().cpu()


def target_fingerprint(target) -> dict | None:
    """A few values `[rows, columns]` of `target`'s input embedding and LM head (None when they are not
    materialised, e.g. offloaded to the meta device)."""
    embedding = target.get_input_embeddings().weight
    head = target.get_output_embeddings().weight
    if embedding.is_meta or head.is_meta:
        return None
    rows = _spread(_FINGERPRINT_ROWS, min(embedding.shape[0], head.shape[0]))
    columns = _spread(_FINGERPRINT_COLUMNS, embedding.shape[1])
    return {"rows": rows, "columns": columns, "embedding": _sample(embedding, rows, columns).tolist(),
            "lm_head": _sample(head, rows, columns).tolist()}


def fingerprint_mismatch(stored: dict, target) -> str | None:
    """Why `target` is not the model `stored` was taken from, or None when it matches (or cannot be read)."""
    embedding = target.get_input_embeddings().weight
    head = target.get_output_embeddings().weight
    if embedding.is_meta or head.is_meta:
        return None
    rows, columns = stored["rows"], stored["columns"]
    if max(rows) >= min(embedding.shape[0], head.shape[0]) or max(columns) >= embedding.shape[1]:
        return "its embedding is smaller than the fingerprinted one"
    for name, weight in (("embedding", embedding), ("lm_head", head)):
        expected = torch.tensor(stored[name], dtype=torch.float32)
        found = _sample(weight, rows, columns)
        scale = float(expected.abs().max()) or 1.0
        if float((found - expected).abs().max()) > _FINGERPRINT_TOLERANCE * scale:
            return f"its {name.replace('_', ' ')} rows {rows} differ from those the assistant was trained with"
    return None
