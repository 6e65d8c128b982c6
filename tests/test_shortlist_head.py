"""Shortlisted-head paths against the pure-torch reference, over deliberately odd shapes."""

from __future__ import annotations

import pathlib

import pytest
import torch

from hf_dynaspec.kernels.shortlist_head.torch_paths import shortlist_head, shortlist_head_reference

TOLERANCE = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("blocks", ["one", "all", "scattered"])
def test_block_path_matches_reference(dtype, batch, blocks):
    vocab, hidden_size = 4231, 72  # V not a multiple of any block size
    generator = torch.Generator().manual_seed(batch)
    weight = torch.randn(vocab, hidden_size, generator=generator).to(dtype)
    token_order = torch.randperm(vocab, generator=generator)
    bounds = sorted(set([0, vocab] + torch.randint(1, vocab, (40,), generator=generator).tolist()))
    pairs = list(zip(bounds[:-1], bounds[1:]))
    chosen = {"one": pairs[3:4], "all": pairs, "scattered": pairs[::3]}[blocks]
    starts, ends = [a for a, _ in chosen], [b for _, b in chosen]
    hidden = torch.randn(batch, hidden_size, generator=generator).to(dtype)
    expected_scores, expected_ids = shortlist_head_reference(hidden, weight, starts, ends, token_order)
    scores, ids = shortlist_head(hidden, weight, starts, ends, token_order)
    assert torch.equal(ids, expected_ids) and scores.dtype == torch.float32
    torch.testing.assert_close(scores, expected_scores, **TOLERANCE[dtype])
    # The chosen row must be the reference's best, up to the dtype's rounding (bf16 may swap near-ties only).
    chosen = expected_scores.gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1)
    if dtype == torch.float32:
        assert torch.equal(scores.argmax(-1), expected_scores.argmax(-1))
    assert (expected_scores.max(-1).values - chosen <= TOLERANCE[dtype]["atol"] * 4).all()


def test_bench_head_blocks_are_whole_clusters_totalling_about_s(tmp_path, monkeypatch):
    from hf_dynaspec.bench import shortlist_head as bench

    starts, ends = bench.cluster_blocks(vocab=5003, num_clusters=40, shortlist=600)
    total = sum(b - a for a, b in zip(starts, ends))
    assert 600 <= total <= 1.1 * 600 and len(starts) < 40
    assert starts == sorted(starts) and all(b > a for a, b in zip(starts, ends))
    assert all(b <= a2 for b, a2 in zip(ends, starts[1:]))  # disjoint
    result = bench.run(16, 5003, 600, "fp32", 3, 40, repeats=3, compiled=False)
    assert result["path"] in ("reference", "cpu_blocks") and result["shortlist_rows"] == total
    assert result["ratio"] == result["paths_ms"][result["path"]] / result["full_ms"]
    from hf_dynaspec.bench.results_table import read_records

    bench.write(result, str(tmp_path / "out.json"), str(tmp_path / "results.jsonl"))
    bench.write(result, None, str(tmp_path / "results.jsonl"))
    records = read_records(tmp_path / "results.jsonl", benchmark="shortlist_head")
    assert len(records) == 2 and records[0]["method"] == result["path"]  # one record per run, appended
    assert records[0]["metrics"]["ratio"] == result["ratio"] and "cpu_flags" in records[0]["host"]
    import json

    assert json.loads((tmp_path / "out.json").read_text())["ratio"] == result["ratio"]
    package = pathlib.Path(bench.__file__).resolve().parents[1]
    assert not list(package.rglob("*.csv")) and not list(package.rglob("*.jsonl"))  # nothing inside the package


def test_every_backend_returns_one_type_with_the_reductions():
    """The dispatcher keeps what the backend computed: one `ShortlistHeadOutput`, whose argmax / max / log-sum-exp
    are those of its scores (computed on demand on CPU, fused in the Triton kernel)."""
    from hf_dynaspec.kernels.shortlist_head import ShortlistHeadOutput, shortlist_head

    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(300, 16, generator=generator)
    hidden = torch.randn(2, 16, generator=generator)
    token_order = torch.randperm(300, generator=generator)
    starts, ends = [0, 120, 250], [64, 200, 300]
    outputs = [f(hidden, weight, starts, ends, token_order)
               for f in (shortlist_head_reference, shortlist_head)]
    for out in outputs:
        assert isinstance(out, ShortlistHeadOutput)
        assert torch.equal(out.argmax, out.scores.argmax(-1))
        torch.testing.assert_close(out.max, out.scores.max(-1).values)
        torch.testing.assert_close(out.logsumexp, torch.logsumexp(out.scores, -1))
        assert torch.equal(out.argmax_token_ids, out.token_ids[out.scores.argmax(-1)])
    torch.testing.assert_close(outputs[1].logsumexp, outputs[0].logsumexp)
    # What a kernel fused is kept, not recomputed from the scores (values no reduction of these scores gives).
    fused = [torch.tensor([7, 8]), torch.tensor([1.5, 2.5]), torch.tensor([3.0, 4.0]), torch.tensor([70, 80]),
             torch.tensor([0.25, 0.75])]
    given = ShortlistHeadOutput(outputs[0].scores, token_order, *fused)
    kept = [given.argmax, given.max, given.logsumexp, given.argmax_token_ids, given.top_probability]
    assert all(torch.equal(a, b) for a, b in zip(kept, fused))


@pytest.mark.parametrize("batch", [1, 5, 8, 9])
def test_bf16_head_kernel_and_blas_blocks_agree_with_a_float32_product(batch, monkeypatch):
    """The C kernel (bf16, <= 8 rows) accumulates in float32 without rounding: it must match a float32 product of
    the same bf16 values closely; 9 rows and a machine without the kernel take the BLAS blocks (bf16 rounding)."""
    from hf_dynaspec.kernels.shortlist_head import torch_paths
    from hf_dynaspec.kernels.verify_rows import loader

    vocab, hidden_size = 3001, 136  # hidden not a multiple of 8: the kernel's scalar tail runs
    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(vocab, hidden_size, generator=generator).bfloat16()
    hidden = torch.randn(batch, hidden_size, generator=generator).bfloat16()
    token_order = torch.randperm(vocab, generator=generator)
    starts, ends = [5, 700, 701, 2990], [600, 701, 1500, 3001]  # a one-row block and the last row included
    expected = torch.cat([hidden.float() @ weight[a:b].float().T for a, b in zip(starts, ends)], dim=1)
    scores, ids = shortlist_head(hidden, weight, starts, ends, token_order)
    assert torch.equal(ids, torch.cat([token_order[a:b] for a, b in zip(starts, ends)]))
    tight = loader.available() and batch <= torch_paths.KERNEL_MAX_ROWS
    torch.testing.assert_close(scores, expected, **(dict(rtol=1e-5, atol=1e-4) if tight else TOLERANCE[torch.bfloat16]))
    monkeypatch.setattr(loader, "available", lambda: False)
    blas, _ = shortlist_head(hidden, weight, starts, ends, token_order)
    torch.testing.assert_close(blas, expected, **TOLERANCE[torch.bfloat16])


def test_blocks_kernel_refuses_blocks_outside_the_weight():
    from hf_dynaspec.kernels.verify_rows import loader

    if not loader.available():
        pytest.skip("the CPU kernel needs x86-64 with AVX2/FMA and a C compiler")
    weight = torch.zeros(10, 8).bfloat16()
    with pytest.raises(ValueError, match="inside the weight"):
        loader.bf16_blocks_matmul(torch.zeros(1, 8), weight, [5], [11])
    with pytest.raises(ValueError, match="inside the weight"):
        loader.bf16_blocks_matmul(torch.zeros(1, 8), weight, [3], [3])


def test_the_reference_scores_padding_columns_minus_infinity():
    """Row id -1 is a padding column (the kernel's and the operator's contract, for shapes padded to a bucket):
    it must score -inf, so it is never the argmax nor counted in the log-sum-exp."""
    from hf_dynaspec.kernels.shortlist_head.torch_paths import indexed_head_reference

    generator = torch.Generator().manual_seed(3)
    weight = torch.randn(50, 8, generator=generator)
    weight[0] = 100.0  # row 0, which a padding column would read if it were not masked, wins every product
    hidden = torch.rand(3, 8, generator=generator)
    row_ids = torch.tensor([7, -1, 12, 30, -1])
    out = indexed_head_reference(hidden, weight, row_ids)
    assert torch.isneginf(out.scores[:, row_ids < 0]).all()
    assert (row_ids[out.argmax] >= 0).all()
    real = row_ids[row_ids >= 0]
    torch.testing.assert_close(out.logsumexp, torch.logsumexp(hidden @ weight[real].T, -1))
