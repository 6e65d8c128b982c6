"""Count, on the CPU, the calls that would block the host on a GPU (../shared/GPU.md lists them).

`HostSyncCounter` is a torch function mode and a dispatch mode at once: the function mode sees `tolist` and
tensors built from Python data (a pageable upload on CUDA), the dispatch mode sees what those and `item`,
`bool`/`int`/`float` of a tensor, boolean-mask indexing, `nonzero`, `masked_select`, `unique` and
`repeat_interleave` without `output_size` turn into. Each sync is recorded with the line of hf_dynaspec that
caused it (or the other library's), so a failing budget names the culprit.
"""

from __future__ import annotations

import traceback

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_BLOCKING_OPS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::masked_select", "aten::unique_dim",
                 "aten::_unique2", "aten::unique_consecutive", "aten::_unique"}


def _culprit() -> str:
    """The innermost calling line outside torch and this file: ours ("hf_dynaspec/...") or another library's."""
    for frame in reversed(traceback.extract_stack()[:-3]):
        name = frame.filename
        if "/torch/" in name or name.endswith("sync_counter.py"):
            continue
        if "/hf_dynaspec/" in name:
            return f"hf_dynaspec/{name.split('/hf_dynaspec/')[-1]}:{frame.lineno} {frame.line}"
        return f"outside hf_dynaspec: {name}:{frame.lineno}"
    return "outside hf_dynaspec"


class _Recording:
    """What both modes share: the counter's `record(kind)`."""

    def __init__(self, record):
        super().__init__()
        self.record = record


class _Dispatch(_Recording, TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _BLOCKING_OPS:
            self.record(name)
        elif name == "aten::index" and any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] if len(args) > 1 else [])):
            self.record("boolean-mask indexing")
        elif name == "aten::repeat_interleave" and isinstance(args[0] if args else None, torch.Tensor) \
                and kwargs.get("output_size") is None and (len(args) < 3 or args[2] is None):
            self.record("repeat_interleave without output_size")
        return func(*args, **kwargs)


class _Function(_Recording, TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name == "tolist":
            self.record("tolist")
        elif name in ("tensor", "as_tensor", "new_tensor"):
            data = args[1] if name == "new_tensor" else (args[0] if args else kwargs.get("data"))
            if not isinstance(data, torch.Tensor):
                self.record(f"torch.{name} from Python data (an upload)")
        return func(*args, **kwargs)


class HostSyncCounter:
    """`with HostSyncCounter() as syncs: ...`; then `syncs.count` and `syncs.events` [(kind, culprit)]."""

    def __init__(self):
        self.events: list[tuple[str, str]] = []
        self._paused = 0

    def _record(self, kind: str) -> None:
        if not self._paused:
            self._paused += 1  # what a recorded call does internally is the same sync
            try:
                self.events.append((kind, _culprit()))
            finally:
                self._paused -= 1

    @property
    def count(self) -> int:
        return len(self.events)

    def __enter__(self):
        self._modes = [_Function(self._record), _Dispatch(self._record)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc):
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
