"""llama.cpp beside our methods: plain greedy decoding of the same prompt ids by llama.cpp (the `llama-cpp-python`
binding) on a GGUF file, the engine many CPU users pick instead.

Optional: the bench's `llama.cpp:PATH` method needs the binding and a GGUF file at PATH; without either the method is refused
with what is missing. Its outputs are compared with plain `generate()`'s as every method's are, for information: a
bf16 GGUF holds the same weights (its kernels round differently, so near-ties may flip), a quantized one (Q8_0,
Q4_K_M, ...) is another model. The report names the file's weight format beside its speed.

Making a bf16 GGUF of a cached model: docs/cli.md, "llama.cpp beside it".
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

# general.file_type of a GGUF (llama.cpp's `enum llama_ftype`), the formats users meet on CPUs
FILE_TYPES = {0: "f32", 1: "f16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 12: "Q3_K_M",
              14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K", 32: "bf16"}


def missing(gguf: str | None) -> str | None:
    """What the llama.cpp method lacks here, or None when it can run."""
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "the llama-cpp-python binding is not installed (pip install llama-cpp-python; it builds llama.cpp)"
    if gguf is None:
        return "no GGUF file: name one, llama.cpp:PATH, a GGUF of the target's weights (docs/cli.md)"
    if not Path(gguf).is_file():
        return f"{gguf} is not a file (llama.cpp:PATH names a GGUF file)"
    return None


class LlamaCpp:
    """One loaded GGUF; `__call__(input_ids [1, T], max_new_tokens)` -> (new ids [N], seconds to the first token)."""

    def __init__(self, gguf: str, stop_ids: set[int], threads: int | None = None, context: int = 4096):
        from llama_cpp import Llama

        threads = threads or torch.get_num_threads()
        self.model = Llama(model_path=str(gguf), n_ctx=context, n_threads=threads, n_threads_batch=threads,
                           verbose=False)
        self.stop_ids = set(stop_ids)
        file_type = self.model.metadata.get("general.file_type")
        self.weight_format = FILE_TYPES.get(int(file_type), f"file type {file_type}") if file_type else "unknown"

    def __call__(self, input_ids: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, float]:
        if input_ids.shape[0] != 1:
            raise ValueError("the llama.cpp method decodes one prompt at a time")
        start, first, new = time.perf_counter(), None, []
        # top_k=1: llama.cpp's greedy choice; the repeat penalty off, as in plain generate()'s greedy decoding
        for token in self.model.generate(input_ids[0].tolist(), top_k=1, top_p=1.0, temp=0.0, repeat_penalty=1.0,
                                         reset=True):
            first = first if first is not None else time.perf_counter() - start
            new.append(int(token))
            if token in self.stop_ids or len(new) == max_new_tokens:
                break
        return torch.tensor(new, dtype=torch.long), first or 0.0
