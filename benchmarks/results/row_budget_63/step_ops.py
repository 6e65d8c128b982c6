"""Device ops of one eager DynaSpec step at batch 1 (route, score, the draft token and its probability) on a fake
CUDA device (tests/fake_cuda.py): every ATen call that is not a view, as tests/test_fake_cuda.py counts them.

Run from a tree's root with Triton installed (its kernel path is the one a CUDA step takes):
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/results/row_budget_63/step_ops.py
Kept beside it: step_ops_54ed5dc.txt (before the one-launch kernel) and step_ops_219a3f3.txt (after); the count,
then the ops.
"""

import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, "tests")
from fake_cuda import FakeCuda  # noqa: E402
from test_fake_cuda import _pair, _to_fake_cuda  # noqa: E402

from hf_dynaspec.drafting.runtime import runtime_head  # noqa: E402


class DeviceOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view and not str(func).startswith("prim.") and str(func) != "aten.detach.default":
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


target, assistant = _pair("dynaspec")
with FakeCuda() as cuda:
    _to_fake_cuda(cuda, target, assistant)
    head = runtime_head(assistant, assistant.generation_config)
    token_embed, hidden_in, hidden = (torch.randn(1, 32, device="cuda") for _ in range(3))
    with DeviceOps() as step:
        out = head.scores(hidden, head.choose_clusters(token_embed, hidden_in, 0, inline=True))
        token = out.argmax_token_ids
        # Before the one-launch kernel the output had no top_probability: the chain computed it like this.
        top = out.top_probability if hasattr(out, "top_probability") else (out.max - out.logsumexp)[0].exp()
    print(len(step.ops))
    print(step.ops)
