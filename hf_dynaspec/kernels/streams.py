"""Run the DynaSpec router concurrently with the drafter's decoder layer.

The router reads only the step's inputs (E(x_t), h_{t-1}), so on CUDA it can run on a side stream while the
main stream computes the layer; the head waits on an event before using its result, which makes the draft
step cost T_embed + max(T_layer, T_router) + T_head(S). On CPU (and any other device) the router runs inline.
All stream handling of the project lives here.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch


@dataclass
class Pending:
    """A value computed on a side stream; `result()` makes the current stream wait for it."""

    value: torch.Tensor
    event: torch.cuda.Event | None = None

    def result(self) -> torch.Tensor:
        if self.event is not None:
            torch.cuda.current_stream(self.value.device).wait_event(self.event)
            self.event = None
        return self.value


class SideStream:
    def __init__(self, device: torch.device, enabled: bool | None = None):
        # The switch: `HF_DYNASPEC_SIDE_STREAM=0` runs the router inline on CUDA too (to measure the overlap, or to
        # rule it out while debugging).
        enabled = os.environ.get("HF_DYNASPEC_SIDE_STREAM", "1") != "0" if enabled is None else enabled
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" and enabled else None

    def launch(self, fn: Callable[..., torch.Tensor], *args: torch.Tensor) -> Pending:
        """`fn(*args)` on the side stream (its caller runs `fn` itself where `stream` is None)."""
        main = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(main)  # the inputs were produced on the main stream
        for tensor in args:
            # The main stream may drop its last reference to an input while the side stream still reads it: the
            # caching allocator must not hand that memory out again before the side stream's work is done.
            tensor.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            value = fn(*args)
            event = torch.cuda.Event()
            event.record(self.stream)
        value.record_stream(main)  # freed only after the main stream is done with it
        return Pending(value, event)


def devices_of(*modules: torch.nn.Module) -> tuple[torch.device, ...]:
    """Every device the modules' parameters and buffers live on (a model split across cards has several)."""
    tensors = itertools.chain.from_iterable(itertools.chain(m.parameters(), m.buffers()) for m in modules)
    return tuple(sorted({t.device for t in tensors}, key=str))


def synchronize(devices: Iterable[torch.device]) -> None:
    """Wait for the queued work of every CUDA device in `devices` (a clock read alone would stamp when the work was
    queued, not when it ended). Each device by name: `torch.cuda.synchronize()` waits for the current device only,
    so a model on cuda:1, or split over cuda:0 and cuda:1, would be timed short. Nothing to wait for elsewhere."""
    for device in dict.fromkeys(torch.device(d) for d in devices):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
