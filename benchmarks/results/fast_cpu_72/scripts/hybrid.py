import sys
import time

import torch
from transformers import DynamicCache

from hf_dynaspec.bench.runner import load_target
from hf_dynaspec.kernels.verify_rows import loader

name = sys.argv[1]
model = load_target(name, "bf16")[0]
prefix = torch.randint(0, 10000, (1, 200))
cache = DynamicCache(config=model.config)
lin = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
packs = {m: torch.ops.mkldnn._reorder_linear_weight(m.weight.detach(), 8) for m in lin}


def make(m):
    orig = type(m).forward.__get__(m)

    def fwd(x):
        rows = x.numel() // x.shape[-1]
        if rows == 1:
            out = loader.bf16_rows_matmul(x.reshape(1, -1), m.weight)
            if m.bias is not None:
                out = out + m.bias.float()
            return out.to(x.dtype).reshape(*x.shape[:-1], -1)
        if rows <= 32:
            out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, -1), packs[m], m.bias, "none", [], "")
            return out.reshape(*x.shape[:-1], -1)
        return orig(x)

    return fwd


with torch.no_grad():
    model(input_ids=prefix, past_key_values=cache)
    for variant in ("native", "hybrid"):
        for m in lin:
            m.__dict__.pop("forward", None)
            if variant == "hybrid":
                m.__dict__["forward"] = make(m)
        for k in (1, 2, 5, 9, 17):
            new = torch.randint(0, 10000, (1, k))
            best = 1e9
            for _ in range(6):
                t = time.perf_counter()
                model(input_ids=new, past_key_values=cache, logits_to_keep=k)
                best = min(best, time.perf_counter() - t)
                cache.crop(-k)
            print(variant, k, f"{best * 1e3:.1f} ms")
