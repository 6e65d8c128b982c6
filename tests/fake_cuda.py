"""A CUDA device on a CPU-only torch: device paths checked as a device, not through a stand-in.

`FakeCuda()` is a context in which tensors on `device="cuda"` are fake tensors (PyTorch's `FakeTensorMode`:
shapes, dtypes and devices, no values) while CPU tensors stay real:

- an op that mixes a CUDA tensor with a CPU tensor (other than a 0-d CPU scalar, which CUDA accepts) raises
  `FakeTensorDeviceMismatchError`, exactly where a GPU would raise;
- an op whose output shape depends on device values (`nonzero`, boolean-mask indexing, `repeat_interleave` by
  a tensor, `unique`) raises `DynamicOutputShapeException`: on a GPU each is a host sync;
- an op over tensors of two CUDA devices (cuda:0 and cuda:1) raises, as on a GPU (the fake mode leaves some
  unchecked, e.g. an index on another card than the tensor it indexes);
- ATen ops that read device values inside the op on CUDA (`multinomial`, `nonzero`, `masked_select`, `unique`,
  `repeat_interleave` without `output_size`) are counted in `reads`;
- a read of a device value on the host (`.item()`, `.tolist()`, `bool(t)`, `int(t)`, `.cpu()` / `.to("cpu")`)
  is counted in `reads` (with the line of the package that did it) and answers a placeholder (1 / True /
  1.0, a fake CPU tensor for a copy), so that the code can go on to its next device op. A test asserts the
  count: zero inside a draft step, the documented few per round;
- a host-to-device copy (`.to("cuda")`, `torch.tensor(list, device="cuda")`) is counted in `uploads` and gives
  a fake CUDA tensor (CPU-only builds cannot copy to CUDA even fakes);
- ops whose inputs are all real CPU tensors run for real (load-time work that reads values, such as building a
  row table from the clusters' host copies, works as on a GPU machine);
- `torch.cuda` streams and events are stand-ins that record what was asked of them (`record_stream` calls).

Why fake tensors and not a mode that carries values beside a virtual device: the device rules (which mixes
CUDA accepts, which ops have data-dependent shapes) are PyTorch's own here, not a re-implementation that could
be wrong in either direction; values are checked by the CPU suite, which runs the same functions.

Limit: autograd of fake CUDA tensors aborts a CPU-only build (its device guard is C++), so the context runs
under `torch.no_grad()`; training steps are checked up to their loss (tests/test_fake_cuda.py says which).
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from dataclasses import dataclass, field
from unittest import mock

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorDeviceMismatchError,
    FakeTensorMode,
    is_fake,
)
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten

CUDA = torch.device("cuda", 0)
PLACEHOLDER = 1


def _record_read(events: Events) -> None:
    """One read per Python call site execution (`.tolist()` reads element by element underneath)."""
    frame = sys._getframe(2)
    while frame is not None and ("fake_cuda.py" in frame.f_code.co_filename or "/torch/" in frame.f_code.co_filename):
        frame = frame.f_back
    # The frame itself (held, so that a later call cannot reuse its id) and the instruction in it.
    key = (frame, frame.f_lasti if frame is not None else -1)
    last = events.last_read_key
    if last is None or last[0] is not key[0] or last[1] != key[1]:
        events.reads.append(_package_line())
    events.last_read_key = key


def _package_line() -> str:
    """The innermost frame of the package (or of a test, if none): where a read happened."""
    frames = traceback.extract_stack()[:-3]
    for wanted in ("hf_dynaspec", "recipes", "tests"):
        for frame in reversed(frames):
            if f"/{wanted}/" in frame.filename and "fake_cuda.py" not in frame.filename:
                return f"{frame.filename.split('/' + wanted + '/')[-1]}:{frame.lineno} ({frame.name})"
    return "?"


@dataclass
class Events:
    reads: list[str] = field(default_factory=list)  # where a device value was read on the host
    uploads: list[str] = field(default_factory=list)  # where a host tensor was copied to the device
    recorded_streams: int = 0  # Tensor.record_stream calls (the side stream's inputs and outputs)
    last_read_key: tuple | None = None

    def clear(self) -> None:
        self.reads.clear()
        self.uploads.clear()
        self.last_read_key = None


def _device_of(args, kwargs) -> torch.device | None:
    """The device a `Tensor.to` / `Tensor.cuda` call names (None: no device change)."""
    for value in list(args[1:]) + list(kwargs.values()):
        if isinstance(value, (str, torch.device)):
            return torch.device(value)
        if isinstance(value, torch.Tensor):
            return value.device
    return None


def _dtype_of(args, kwargs) -> torch.dtype | None:
    for value in list(args[1:]) + list(kwargs.values()):
        if isinstance(value, torch.dtype):
            return value
        if isinstance(value, torch.Tensor):
            return value.dtype
    return None


def _placeholder_list(shape):
    if len(shape) == 0:
        return PLACEHOLDER
    return [_placeholder_list(shape[1:]) for _ in range(shape[0])]


def _cuda(device: torch.device) -> torch.device:
    """`cuda` -> cuda:0 (the current device); `cuda:1` stays itself (a target split over two cards)."""
    return CUDA if device.index is None else device


def _fake_cuda(value) -> bool:
    return isinstance(value, torch.Tensor) and is_fake(value) and value.device.type == "cuda"


def _decompose_index(x: torch.Tensor, index) -> tuple[torch.Tensor, list]:
    """`x[index]` -> (the view after the basic part: ints, slices, None, Ellipsis; the advanced indices per
    dimension of that view, None where a dimension is not indexed). Python's `Tensor.__getitem__` takes a C++
    device guard that a CPU-only build cannot make for CUDA, so fake CUDA tensors are indexed through the
    dispatcher's ops. Advanced indices separated by slices keep PyTorch's placement only when adjacent (the
    package's indexing is all of that kind)."""
    index = index if isinstance(index, tuple) else (index,)
    index = tuple(torch.tensor(i, dtype=torch.bool if i and all(isinstance(v, bool) for v in i) else torch.long)
                  if isinstance(i, list) else i for i in index)
    consumed = sum(i.dim() if isinstance(i, torch.Tensor) and i.dtype == torch.bool else 1
                   for i in index if i is not None and i is not Ellipsis)
    expanded = []
    for i in index:
        expanded.extend([slice(None)] * (x.dim() - consumed) if i is Ellipsis else [i])
    advanced, dim = [], 0
    for i in expanded:
        if i is None:
            x = x.unsqueeze(dim)
            advanced.append(None)
            dim += 1
        elif isinstance(i, bool) or isinstance(i, torch.Tensor) and i.dim() == 0 and i.dtype == torch.bool:
            raise NotImplementedError("boolean scalar index")
        elif isinstance(i, int) or isinstance(i, torch.SymInt):
            x = x.select(dim, i)
        elif isinstance(i, slice):
            x = torch.ops.aten.slice.Tensor(x, dim, i.start, i.stop, 1 if i.step is None else i.step)
            advanced.append(None)
            dim += 1
        elif isinstance(i, torch.Tensor):
            advanced.append(i)
            dim += i.dim() if i.dtype == torch.bool else 1
            advanced.extend([None] * ((i.dim() - 1) if i.dtype == torch.bool else 0))
        else:
            raise TypeError(f"index {i!r} is not supported on a fake CUDA tensor")
    while advanced and advanced[-1] is None:
        advanced.pop()
    return x, advanced


def _getitem(x: torch.Tensor, index) -> torch.Tensor:
    view, advanced = _decompose_index(x, index)
    if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool and _fake_cuda(i) for i in advanced):
        raise DynamicOutputShapeException(torch.ops.aten.index.Tensor)  # a boolean mask: its length is read on the host
    return torch.ops.aten.index.Tensor(view, advanced) if advanced else view


def _setitem(x: torch.Tensor, index, value, events) -> None:
    view, advanced = _decompose_index(x, index)
    if not isinstance(value, torch.Tensor):
        value = torch.full((), value, dtype=x.dtype, device=x.device)
    elif value.device.type != x.device.type and value.dim() > 0 and not advanced:
        events.uploads.append(_package_line())  # a slice assignment from the host: a copy, allowed on CUDA
        return
    if advanced:
        torch.ops.aten.index_put_.default(view, advanced, value)
    else:
        torch.ops.aten.copy_.default(view, value.expand_as(view) if value.dim() == 0 else value)


_ATEN_NAMES = {"__invert__": "bitwise_not", "__and__": "bitwise_and", "__or__": "bitwise_or",
               "__iand__": "bitwise_and_", "__ior__": "bitwise_or_"}


class _Transfers(TorchFunctionMode):
    """Host<->device copies and host reads, seen before they reach C++ (which cannot target CUDA here)."""

    def __init__(self, events: Events):
        super().__init__()
        self.events = events

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if source is not None and func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            device = CUDA if func is torch.Tensor.cuda else torch.device("cpu") if func is torch.Tensor.cpu \
                else _device_of(args, kwargs)
            if device is not None and device.type == "cuda" and source.device.type != "cuda":
                self.events.uploads.append(_package_line())
                dtype = _dtype_of(args, kwargs) if func is torch.Tensor.to else None
                out = torch.empty(source.shape, dtype=dtype or source.dtype, device=_cuda(device))
                return out.requires_grad_(source.requires_grad) if out.is_floating_point() else out
            if device is not None and device.type == "cpu" and source.device.type == "cuda":
                _record_read(self.events)
        if func is torch.Tensor.__getitem__ and (_fake_cuda(source) or any(
                _fake_cuda(t) for t in tree_flatten(args[1])[0])):
            return _getitem(source, args[1])
        # Python bindings that take a C++ device guard: the dispatcher's own ops instead.
        if func is torch.Tensor.contiguous and _fake_cuda(source):
            memory_format = kwargs.get("memory_format", torch.contiguous_format)
            return source if source.is_contiguous(memory_format=memory_format) else \
                torch.ops.aten.clone.default(source, memory_format=memory_format)
        if func is torch.Tensor.copy_ and _fake_cuda(source):
            if not _fake_cuda(args[1]) and args[1].dim() > 0:
                self.events.uploads.append(_package_line())
                return source
            return torch.ops.aten.copy_.default(source, args[1])
        if func is torch.Tensor.new_tensor and _fake_cuda(source):
            self.events.uploads.append(_package_line())
            host = torch.tensor(args[1], dtype=kwargs.get("dtype", source.dtype))
            return torch.empty(host.shape, dtype=host.dtype, device=CUDA)
        if func is torch.Tensor.__setitem__ and _fake_cuda(source):
            return _setitem(source, args[1], args[2], self.events)
        if source is not None and is_fake(source) and source.device.type == "cuda" and func in (
                torch.Tensor.tolist, torch.Tensor.numpy):
            _record_read(self.events)
            return _placeholder_list(tuple(source.shape))
        if source is not None and is_fake(source) and source.device.type == "cuda" and func in (
                torch.Tensor.__int__, torch.Tensor.__index__, torch.Tensor.__float__, torch.Tensor.__bool__,
                torch.Tensor.item):
            if source.numel() != 1:
                raise RuntimeError("a Tensor with more than one value is ambiguous on the host")
            _record_read(self.events)
            if func is torch.Tensor.__bool__ or source.dtype == torch.bool and func is torch.Tensor.item:
                return True
            return float(PLACEHOLDER) if func is torch.Tensor.__float__ or source.is_floating_point() and \
                func is torch.Tensor.item else PLACEHOLDER
        if name in ("tensor", "as_tensor") and func in (torch.tensor, torch.as_tensor):
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == "cuda":
                self.events.uploads.append(_package_line())
                host = func(*args, **{**kwargs, "device": "cpu"})
                return torch.empty(host.shape, dtype=host.dtype, device=_cuda(torch.device(device)))
        try:
            return func(*args, **kwargs)
        except RuntimeError as error:
            # A Python binding that takes a C++ device guard (e.g. Tensor.masked_fill_): the same aten op through
            # the dispatcher, which the fake mode serves.
            op = getattr(torch.ops.aten, _ATEN_NAMES.get(name, name), None)
            if "not linked with support for cuda" not in str(error) or op is None:
                raise
            return op(*args, **kwargs)


# ATen ops that read device values on the host inside the op on CUDA: multinomial checks its input (two syncs);
# the others size their output from device values. The fake mode runs multinomial without complaint and raises
# for the others, so each is counted as a read here first (a test's read count then shows it).
_SYNCING_OPS = {
    torch.ops.aten.multinomial.default, torch.ops.aten.nonzero.default, torch.ops.aten.masked_select.default,
    torch.ops.aten._unique2.default, torch.ops.aten.unique_dim.default, torch.ops.aten.unique_consecutive.default,
    torch.ops.aten.repeat_interleave.Tensor,
}
# Ops that legitimately take tensors on two devices: the copies that move data between cards.
_CROSS_DEVICE_OPS = {torch.ops.aten.copy_.default, torch.ops.aten._to_copy.default}


def _check_one_cuda_device(func, tensors) -> None:
    """An op over fake tensors of two CUDA devices (cuda:0 and cuda:1: a target split over two cards) raises on a
    GPU; the fake mode does not check every op's indices (an index on cuda:0 into a cache on cuda:1 passes)."""
    devices = {t.device for t in tensors if _fake_cuda(t) and t.dim() > 0}
    if len(devices) > 1 and func not in _CROSS_DEVICE_OPS:
        raise RuntimeError(f"{func}: expected all tensors to be on the same device, got {sorted(map(str, devices))}")


class _RealOnHost(TorchDispatchMode):
    """Above the fake mode: ops on real CPU tensors only run for real; reads of fake values are counted."""

    def __init__(self, events: Events):
        super().__init__()
        self.events = events

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if func is torch.ops.aten._local_scalar_dense.default and is_fake(args[0]):
            _record_read(self.events)
            t = args[0]
            return True if t.dtype == torch.bool else PLACEHOLDER if not t.is_floating_point() else float(PLACEHOLDER)
        if any(_fake_cuda(t) for t in tensors):
            _check_one_cuda_device(func, tensors)
            if func in _SYNCING_OPS and not (func is torch.ops.aten.repeat_interleave.Tensor
                                             and kwargs.get("output_size") is not None):
                _record_read(self.events)
        wants_device = any(isinstance(v, torch.device) and v.type != "cpu" for v in tree_flatten(kwargs)[0])
        if not wants_device and not any(is_fake(t) for t in tensors):
            with _disable_current_modes():
                return func(*args, **kwargs)
        return func(*args, **kwargs)


class _Stream:
    def __init__(self, device=None, *args, **kwargs):
        self.device = torch.device(device) if device is not None else CUDA

    def wait_stream(self, other) -> None:
        pass

    def wait_event(self, event) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _Event:
    def __init__(self, *args, **kwargs):
        pass

    def record(self, stream=None) -> None:
        pass

    def synchronize(self) -> None:
        pass


class FakeCuda(contextlib.ExitStack):
    """`with FakeCuda() as cuda:` ... `cuda.events.reads` (see the module docstring)."""

    def __init__(self):
        super().__init__()
        self.events = Events()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)

    def __enter__(self):
        super().__enter__()
        events = self.events

        def record_stream(tensor, stream):
            events.recorded_streams += 1

        self.enter_context(torch.no_grad())
        for name, value in (("Stream", _Stream), ("Event", _Event), ("stream", lambda s=None: contextlib.nullcontext()),
                            ("current_stream", lambda device=None: _Stream(device)),
                            ("synchronize", lambda device=None: None)):
            self.enter_context(mock.patch.object(torch.cuda, name, value))
        self.enter_context(mock.patch.object(torch.Tensor, "record_stream", record_stream))
        self.enter_context(self.fake_mode)
        self.enter_context(_RealOnHost(events))
        self.enter_context(_Transfers(events))
        return self

    def __exit__(self, kind, error, trace):
        suppressed = super().__exit__(kind, error, trace)
        # What a GPU would do with these is fail (a device mix) or wait (a data-dependent shape, a host read of a
        # device value inside an op): a test failure, reported as one, with PyTorch's own message.
        if isinstance(error, FakeTensorDeviceMismatchError):
            raise AssertionError(f"a CUDA tensor met a CPU tensor (this raises on a GPU): {error}") from error
        if isinstance(error, RuntimeError) and ("Mismatching" in str(error) or "same device" in str(error)) \
                and "device" in str(error):  # the device checks some fake kernels make themselves
            raise AssertionError(f"a CUDA tensor met a CPU tensor (this raises on a GPU): {error}") from error
        if isinstance(error, (DynamicOutputShapeException, DataDependentOutputException)):
            raise AssertionError(f"an op whose result depends on device values (a host sync on a GPU): {error!r}") \
                from error
        return suppressed

    @contextlib.contextmanager
    def counting(self):
        """Events of the block only: `with cuda.counting() as events: ...`."""
        before_reads, before_uploads = len(self.events.reads), len(self.events.uploads)
        block = Events()
        yield block
        block.reads.extend(self.events.reads[before_reads:])
        block.uploads.extend(self.events.uploads[before_uploads:])


def on_fake_cuda(tensor: torch.Tensor) -> bool:
    return is_fake(tensor) and tensor.device.type == "cuda"
