"""The Triton shortlisted-head kernel under the Triton interpreter (CPU) against the pure-torch reference.

TRITON_INTERPRET=1 must be set before anything imports Triton (transformers does): tests/conftest.py sets
it. `.ci/run` installs Triton (the `triton` extra), so these tests run there. Both launch forms run: the
batch-1 GEMV path and the `tl.dot` path (batch > 1); and both ways to the rows: given row ids, and the row
budget's rows worked out in the kernel from the router's ranking (`ranked_head_triton`). The interpreter runs
the programs one after another, so the last-program combine is checked for its values and its counter's reset,
not for its memory ordering nor for running in one program only (the compile test checks that the barrier and
the acquire-release atomic are there).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="install the 'triton' extra to test the kernel")

from hf_dynaspec.kernels.shortlist_head import triton_kernel  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.torch_paths import indexed_head_reference, ranked_row_ids  # noqa: E402
from hf_dynaspec.kernels.shortlist_head.triton_kernel import (  # noqa: E402
    indexed_head_triton,
    launch_constants,
    ranked_head_triton,
)

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
    assert torch.equal(out.argmax_token_ids, row_ids[out.argmax])  # the token of the argmax, fused
    torch.testing.assert_close(out.top_probability, expected.scores.softmax(-1).max(-1).values, **TOLERANCE)


def _cluster_tables(num_clusters: int, num_always: int, generator) -> tuple[torch.Tensor, ...]:
    """Random clusters of the VOCAB ids (some empty, one large) as the runtime table holds them: sizes `[C]`,
    first places `[C]` in token_order `[V - A]`, the always-included ids `[A]`."""
    ids = torch.randperm(VOCAB, generator=generator)
    always_ids, token_order = ids[:num_always], ids[num_always:]
    cuts = torch.randint(0, len(token_order) + 1, (num_clusters - 1,), generator=generator)
    cuts[: num_clusters // 4] = cuts[0]  # empty clusters
    bounds = torch.cat([torch.tensor([0]), cuts.sort().values, torch.tensor([len(token_order)])])
    sizes = bounds.diff()
    return sizes, bounds[:-1].clone(), token_order, always_ids


def _rule_ids(ranking, sizes, starts, token_order, always_ids, rows: int) -> list[int]:
    """The row budget written out: ranked clusters end to end, cut after `rows`, then the always-included ids."""
    ids = [t for c in ranking.tolist() for t in token_order[starts[c]: starts[c] + sizes[c]].tolist()]
    return ids[:rows] + always_ids.tolist()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("num_clusters,num_always", [(6, 5), (300, 0)], ids=["few-clusters", "chunked-scan"])
def test_ranked_kernel_scores_the_row_budgets_rows(dtype, batch, num_clusters, num_always):
    """The kernel's own row ids are the rule's, at budgets of one row, a cut inside a cluster, a cluster's exact
    end, and every row; 300 clusters take three chunks of the in-kernel scan (BLOCK_C = 128) and carry the
    columns across them. Scores and every fused reduction against the reference on the rule's ids."""
    generator = torch.Generator().manual_seed(num_clusters + batch)
    sizes, starts, token_order, always_ids = _cluster_tables(num_clusters, num_always, generator)
    weight = torch.randn(VOCAB, HIDDEN, generator=generator).to(dtype)
    hidden = torch.randn(batch, HIDDEN, generator=generator).to(dtype)
    for _ in range(3):
        ranking = torch.randperm(num_clusters, generator=generator)
        first_full = int(sizes[ranking].cumsum(0)[num_clusters // 2])
        for rows in (1, 77, first_full, len(token_order)):
            expected_ids = _rule_ids(ranking, sizes, starts, token_order, always_ids, rows)
            out = ranked_head_triton(hidden, weight, ranking, sizes, starts, token_order, always_ids, rows)
            assert out.token_ids.tolist() == expected_ids, rows
            assert ranked_row_ids(ranking, sizes, starts, token_order, always_ids, torch.arange(rows)).tolist() \
                == expected_ids, rows
            expected = indexed_head_reference(hidden.float(), weight.float(), torch.tensor(expected_ids))
            torch.testing.assert_close(out.scores, expected.scores, **TOLERANCE)
            torch.testing.assert_close(out.logsumexp, expected.logsumexp, **TOLERANCE)
            torch.testing.assert_close(out.top_probability, expected.scores.softmax(-1).max(-1).values, **TOLERANCE)
            top2 = expected.scores.topk(min(2, len(expected_ids)), -1).values
            clear = (top2[:, 0] - top2[:, -1] > 1e-3) if len(expected_ids) > 1 else torch.ones(batch, dtype=torch.bool)
            assert torch.equal(out.argmax[clear], expected.argmax[clear])
            assert torch.equal(out.argmax_token_ids, out.token_ids[out.argmax])


def test_the_arrival_counter_is_back_at_zero_after_every_launch():
    """The last program combines and resets the count: launches of 5, 1 and 16 tiles one after another each
    combine their own partials (a count left at 5 would skip the next launch's combine, leaving its outputs
    unwritten, or combine too early). The best row sits in the last column, so a combine run before the last
    tile's partials are in misses it."""
    generator = torch.Generator().manual_seed(7)
    counter = triton_kernel._counter(torch.device("cpu"))
    for columns in (301, 64, 1000, 301):
        weight = torch.randn(VOCAB, 48, generator=generator)
        hidden = torch.randn(2, 48, generator=generator)
        row_ids = torch.randperm(VOCAB, generator=generator)[:columns]
        weight[row_ids[-1]] = 3 * hidden.sum(0)  # the best score of both rows
        out = indexed_head_triton(hidden, weight, row_ids)
        assert out.argmax.tolist() == [columns - 1] * 2
        expected = indexed_head_reference(hidden, weight, row_ids)
        assert int(counter) == 0
        assert torch.equal(out.argmax, expected.scores.argmax(-1)) and torch.equal(out.argmax_token_ids, row_ids[out.argmax])
        torch.testing.assert_close(out.logsumexp, expected.scores.logsumexp(-1), **TOLERANCE)


def test_each_stream_has_its_own_arrival_counter(monkeypatch):
    """Launches on two streams may overlap on a GPU: each stream counts its own programs' arrivals. Launches told
    they run on streams 1, 2, 1 use two counters (the first one again on stream 1), each back at zero after."""
    used = []
    counter = triton_kernel._counter
    monkeypatch.setattr(triton_kernel, "_counter", lambda device, stream=None: used.append(
        (stream, counter(device, stream))) or used[-1][1])
    streams = iter([1, 2, 1])
    monkeypatch.setattr(triton_kernel, "_stream", lambda device: next(streams))
    generator = torch.Generator().manual_seed(3)
    weight, hidden = torch.randn(VOCAB, 16, generator=generator), torch.randn(1, 16, generator=generator)
    for _ in range(3):
        indexed_head_triton(hidden, weight, torch.arange(200))
    assert [stream for stream, _ in used] == [1, 2, 1]
    assert used[0][1] is used[2][1] and used[0][1] is not used[1][1]
    assert all(int(tensor) == 0 for _, tensor in used)


def test_ranked_kernel_rejects_a_budget_outside_the_clustered_rows():
    generator = torch.Generator().manual_seed(1)
    sizes, starts, token_order, always_ids = _cluster_tables(6, 3, generator)
    weight, hidden, ranking = torch.randn(VOCAB, 16), torch.randn(1, 16), torch.arange(6)
    for rows in (0, len(token_order) + 1):
        with pytest.raises(ValueError, match="row budget"):
            ranked_head_triton(hidden, weight, ranking, sizes, starts, token_order, always_ids, rows)
    with pytest.raises(ValueError, match="one entry per cluster"):
        ranked_head_triton(hidden, weight, ranking[:5], sizes, starts, token_order, always_ids, 4)


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
    scores, argmax, best, logsumexp, token, top = indexed_head_op(hidden, weight, rows)
    torch.testing.assert_close(scores, expected.scores)
    assert torch.equal(argmax, expected.argmax) and torch.equal(triton_path(hidden, weight, rows)(), expected.argmax)
    assert torch.equal(token, rows[expected.argmax])
    torch.testing.assert_close(logsumexp, expected.logsumexp)
    torch.testing.assert_close(top, expected.top_probability)
    torch.library.opcheck(indexed_head_op, (hidden, weight, rows), test_utils=("test_schema", "test_faketensor"))


def test_the_ranked_operator_matches_the_reference_and_its_fake():
    """`torch.ops.hf_dynaspec.ranked_head` (what a DynaSpec step calls on CUDA): the reference's ids, scores and
    reductions; its fake implementation's shapes agree (how torch.compile and the fake-CUDA tests see it)."""
    from hf_dynaspec.kernels.shortlist_head.op import ranked_head_op
    from hf_dynaspec.kernels.shortlist_head.torch_paths import ranked_head_reference

    generator = torch.Generator().manual_seed(3)
    sizes, starts, token_order, always_ids = _cluster_tables(9, 4, generator)
    weight, hidden = torch.randn(VOCAB, 40, generator=generator), torch.randn(1, 40, generator=generator)
    ranking = torch.randperm(9, generator=generator)
    args = (hidden, weight, ranking, sizes, starts, token_order, always_ids)
    scores, ids, argmax, best, logsumexp, token, top = ranked_head_op(*args, 200)
    expected = ranked_head_reference(*args, torch.arange(200))
    assert torch.equal(ids, expected.token_ids) and torch.equal(argmax, expected.argmax)
    assert torch.equal(token, expected.argmax_token_ids)
    torch.testing.assert_close(scores, expected.scores)
    torch.testing.assert_close(top, expected.top_probability)
    torch.library.opcheck(ranked_head_op, (*args, 200), test_utils=("test_schema", "test_faketensor"))
