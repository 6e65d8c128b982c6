"""The Triton shortlisted-head kernel under the Triton interpreter (CPU) against the pure-torch reference.

TRITON_INTERPRET=1 must be set before anything imports Triton (transformers does): tests/conftest.py sets
it. `.ci/run` installs Triton (the `triton` extra), so these tests run there. Both launch forms run: the
batch-1 GEMV path and the `tl.dot` path (batch > 1).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="install the 'triton' extra to test the kernel")

from hf_dynaspec.kernels.shortlist_head.reference import indexed_head_reference  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.triton_kernel import indexed_head_triton, launch_constants  # noqa: E402

VOCAB, HIDDEN = 1237, 200  # neither a multiple of the kernel's 64-column tiles nor of its 64/128-wide D chunks
TOLERANCE = dict(rtol=1e-4, atol=1e-4)


def _row_ids(kind: str, generator) -> torch.Tensor:
    """Row ids as the cluster table makes them: whole clusters padded with -1 to a common width."""
    if kind == "dense":
        return torch.randperm(VOCAB, generator=generator)[:301]
    if kind == "single-row":
        return torch.tensor([17])
    width = 97
    clusters = [torch.randperm(VOCAB, generator=generator)[: int(n)] for n in (97, 40, 1, 0, 63)]
    padded = [torch.cat([c, torch.full((width - len(c),), -1)]) for c in clusters]
    return torch.cat(padded)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("batch", [1, 3, 17])
@pytest.mark.parametrize("kind", ["dense", "padded", "single-row"])
def test_kernel_matches_reference(dtype, batch, kind):
    generator = torch.Generator().manual_seed(batch)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator).to(dtype)
    hidden = torch.randn(batch, HIDDEN, generator=generator).to(dtype)
    row_ids = _row_ids(kind, generator)
    out = indexed_head_triton(hidden, weight, row_ids)
    # The reference multiplies in fp32 what the kernel upcasts under the interpreter: only summation order differs.
    expected = indexed_head_reference(hidden.float(), weight.float(), row_ids)
    assert out.token_ids is row_ids and out.scores.shape == (batch, len(row_ids))
    padding = row_ids < 0
    assert torch.isneginf(out.scores[:, padding]).all()
    torch.testing.assert_close(out.scores[:, ~padding], expected.scores[:, ~padding], **TOLERANCE)
    torch.testing.assert_close(out.max, expected.scores.max(-1).values, **TOLERANCE)
    torch.testing.assert_close(out.logsumexp, expected.scores.logsumexp(-1), **TOLERANCE)
    top2 = expected.scores.topk(min(2, int((~padding).sum())), -1).values
    clear = top2[:, 0] - top2[:, -1] > 1e-3 if top2.shape[1] > 1 else torch.ones(batch, dtype=torch.bool)
    assert torch.equal(out.argmax[clear], expected.scores.argmax(-1)[clear])
    assert (out.argmax_token_ids >= 0).all()


def test_ties_resolve_to_the_first_column_like_torch():
    weight = torch.zeros(200, 16)
    weight[[5, 70, 150]] = 1.0  # the same best score in three tiles
    hidden = torch.ones(2, 16)
    row_ids = torch.cat([torch.arange(100), torch.full((28,), -1), torch.arange(128, 200)])
    out = indexed_head_triton(hidden, weight, row_ids)
    assert out.argmax.tolist() == [5, 5]
    # log-sum-exp over the 172 real rows: 3 score 16, the other 169 score 0; padding adds nothing
    expected = 16.0 + torch.log(3 + 169 * torch.exp(torch.tensor(-16.0)))
    torch.testing.assert_close(out.logsumexp, expected.expand(2))


def test_launch_constants_pick_the_gemv_path_at_batch_1_and_tensor_cores_where_they_exist():
    gemv = launch_constants(torch.bfloat16, 1, (9, 0))
    assert gemv["BLOCK_B"] == 1 and not gemv["USE_DOT"]  # no padding of one row to 16
    dot = launch_constants(torch.bfloat16, 5, (8, 0))
    assert dot["USE_DOT"] and dot["BLOCK_B"] == 16 and not dot["UPCAST"] and not dot["IEEE_DOT"]
    t4 = launch_constants(torch.bfloat16, 5, (7, 5))  # no bf16 tensor cores on sm_75: upcast, fp32 dot
    assert t4["UPCAST"] and t4["IEEE_DOT"]
    assert not launch_constants(torch.float16, 5, (7, 5))["UPCAST"]  # fp16 tensor cores exist on a T4
    assert launch_constants(torch.float32, 5, (9, 0))["IEEE_DOT"]  # no TF32: the reference's scores
    assert launch_constants(torch.float16, 5, None, interpreter=True)["UPCAST"]


def test_launcher_rejects_bad_inputs_without_reading_values():
    weight, hidden, row_ids = torch.randn(VOCAB, 72), torch.randn(3, 72), torch.arange(10)
    with pytest.raises(ValueError, match="hidden size 71"):
        indexed_head_triton(hidden[:, :71], weight, row_ids)
    with pytest.raises(ValueError, match="dtype"):
        indexed_head_triton(hidden.double(), weight, row_ids)
    with pytest.raises(ValueError, match="contiguous"):
        indexed_head_triton(hidden, weight.T.contiguous().T, row_ids)
    with pytest.raises(ValueError, match="int64"):
        indexed_head_triton(hidden, weight, row_ids.int())
    with pytest.raises(ValueError, match="non-empty"):
        indexed_head_triton(hidden, weight, row_ids[:0])


def test_the_operator_and_the_bench_heads_triton_path_run_the_kernel():
    """`torch.ops.hf_dynaspec.indexed_head` (what the runtime head calls on CUDA, with a fake implementation for
    fake tensors and torch.compile) and `hf-dynaspec bench-head`'s Triton path (which imported a renamed
    function) give the reference's scores and argmax."""
    from hf_dynaspec.bench.shortlist_head import triton_path
    from hf_dynaspec.kernels.shortlist_head.op import indexed_head_op

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(300, 40, generator=generator)
    hidden = torch.randn(2, 40, generator=generator)
    rows = torch.tensor([5, 17, -1, 250, 3, 99, -1, 0], dtype=torch.long)
    expected = indexed_head_reference(hidden, weight, rows)
    scores, argmax, best, logsumexp = indexed_head_op(hidden, weight, rows)
    torch.testing.assert_close(scores, expected.scores)
    assert torch.equal(argmax, expected.argmax) and torch.equal(triton_path(hidden, weight, rows)(), expected.argmax)
    torch.testing.assert_close(logsumexp, expected.logsumexp)
    torch.library.opcheck(indexed_head_op, (hidden, weight, rows), test_utils=("test_schema", "test_faketensor"))
