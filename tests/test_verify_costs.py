"""One verify table per target and CPU routing (hf_dynaspec.generation.costs.verify_costs): every assistant of a
target reads it, the route measurement seeds it, a size is measured once, and a bad entry is measured again."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest
import torch
from conftest import imitating_assistant, one_layer_target

from hf_dynaspec import DynaSpecAssistant
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.generation.costs import round_costs as calibration
from hf_dynaspec.generation.costs import store, timing, verify_costs, verify_kernel
from hf_dynaspec.kernels.verify_rows import packed as packed_weights
from hf_dynaspec.kernels.verify_rows import patch as verify_rows_patch


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """A cache of its own (a new process's); the list of every size list a verify measurement was asked for."""
    monkeypatch.setenv("HF_DYNASPEC_HOME", str(tmp_path))
    monkeypatch.setattr(store, "MEMORY", {})
    calls = []

    def counted(target, ids, cache, sizes, device):
        calls.append(list(sizes))
        return timing.verify_seconds(target, ids, cache, sizes, device)
    monkeypatch.setattr(verify_costs, "verify_seconds", counted)
    return calls


def costs_of(target, assistant, max_tokens):
    options = assistant.generation_config
    return calibration.round_costs(target, assistant, options, runtime_head(assistant, options), max_tokens)


def test_every_assistant_of_a_target_reads_one_verify_table(measured, monkeypatch):
    target = one_layer_target("llama")
    first = costs_of(target, imitating_assistant(target), 7)
    assert measured == [[1, 2, 3, 5, 8]]
    second = costs_of(target, imitating_assistant(target, tree_top_k=2), 7)  # another assistant configuration
    assert measured == [[1, 2, 3, 5, 8]] and second.verify_seconds == first.verify_seconds
    longer = costs_of(target, imitating_assistant(target, tree_top_k=3), 12)
    assert measured == [[1, 2, 3, 5, 8], [9, 13]], "only the sizes no call measured before"
    assert longer.verify_seconds[:4] == first.verify_seconds[:4] and longer.verify_seconds[5] == first.verify_seconds[5]
    # A new process reads them from the file; a drafter-free assistant then runs no forward of the target at all.
    monkeypatch.setattr(store, "MEMORY", {})
    forwards = []
    target.register_forward_hook(lambda *args: forwards.append(1))
    free = costs_of(target, DynaSpecAssistant.for_target(target), 12)
    assert (len(measured), len(forwards)) == (2, 0)
    assert free.verify_seconds == longer.verify_seconds


def routed_seconds(target, ids, cache, sizes, device):
    """Made-up costs per CPU routing: PyTorch's kernels cost 1 ms a token, the rows kernel 2.5 ms + 0.1 ms a token,
    so the kernel is faster from 3 tokens."""
    if verify_rows_patch.describe(target) is None:
        return {size: 1e-3 * size for size in sizes}
    return {size: 2.5e-3 + 1e-4 * size for size in sizes}


def test_the_route_measurement_seeds_the_verify_table_of_the_routing_it_chose(measured, monkeypatch):
    target = one_layer_target("qwen2")  # float32: only the rows kernel is measured beside PyTorch's
    if not verify_kernel.kernel_applies(target):
        pytest.skip("the CPU rows kernel does not build here: no routes are measured")
    monkeypatch.setattr(verify_kernel, "verify_seconds", routed_seconds)
    with verify_kernel.target_verify_kernel(target) as handle:
        assert handle.kernels == verify_kernel.CpuKernels((3, 17))
        costs = costs_of(target, imitating_assistant(target), 16)
    assert not measured, "the routes' measurement holds every size up to 17"
    table = costs.verify_seconds
    # Each size at the cost of the kernel that runs it: PyTorch's below 3 tokens, the rows kernel from 3.
    assert [table[1], table[2], table[3], table[5], table[17]] == pytest.approx([1e-3, 2e-3, 2.8e-3, 3e-3, 4.2e-3])
    # A new process reads the routes and the table from the file (the routes' entry did not overwrite the table).
    monkeypatch.setattr(store, "MEMORY", {})
    monkeypatch.setattr(verify_kernel, "verify_seconds", lambda *args: pytest.fail("the routes measured again"))
    with verify_kernel.target_verify_kernel(target):
        assert costs_of(target, imitating_assistant(target, tree_top_k=2), 16).verify_seconds == table
    assert not measured
    # Another routing of the same target is another table.
    verify_rows_patch.enable(target, min_rows=1, max_rows=2, method="kernel", float32=True)
    try:
        costs_of(target, imitating_assistant(target), 4)
    finally:
        verify_rows_patch.disable(target)
    assert measured == [[1, 2, 3, 5]]


@pytest.mark.parametrize("entry, problem", [
    ([0.01, 0.02], "found list"),
    ({"0": 0.01}, "'0' is not a token count"),
    ({"01": 0.01}, "'01' is not a token count"),
    ({"1.5": 0.01}, "'1.5' is not a token count"),
    ({"5000": 0.01}, "'5000' is not a token count from 1 to 4096"),
    ({"1": 0.0}, r"verify_seconds\[1\] = 0.0 is not a positive"),
    ({"1": 0.01, "2": -0.5}, r"verify_seconds\[2\] = -0.5"),
    ({"1": "fast"}, r"verify_seconds\[1\] = 'fast'"),
    ({"1": math.inf}, r"verify_seconds\[1\] = inf"),
    ({"1": math.nan}, r"verify_seconds\[1\] = nan"),
    ({"1": True}, r"verify_seconds\[1\] = True"),
])
def test_a_bad_verify_entry_is_measured_again_with_a_warning(measured, tmp_path, caplog, entry, problem):
    target = one_layer_target("llama")
    key = verify_costs.verify_key(target, None)
    (tmp_path / "calibration.json").write_text(json.dumps({key: entry}))
    with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.costs"):
        costs = costs_of(target, imitating_assistant(target), 4)
    assert measured == [[1, 2, 3, 5]], "a bad entry must be measured again, not used"
    assert any("unusable" in r.message and re.search(problem, r.message) for r in caplog.records), \
        [r.message for r in caplog.records]
    stored = json.loads((tmp_path / "calibration.json").read_text())[key]
    assert stored == {str(n): costs.verify_seconds[n] for n in (1, 2, 3, 5)}


def test_a_good_verify_entry_is_used_silently(measured, tmp_path, caplog):
    target = one_layer_target("llama")
    key = verify_costs.verify_key(target, None)
    (tmp_path / "calibration.json").write_text(json.dumps({key: {"1": 0.01, "2": 0.012, "3": 0.014, "5": 0.02}}))
    with caplog.at_level(logging.WARNING, logger="hf_dynaspec.generation.costs"):
        costs = costs_of(target, imitating_assistant(target), 4)
    assert not measured and not caplog.records
    assert costs.verify_seconds == pytest.approx([0.0, 0.01, 0.012, 0.014, 0.017, 0.02])


@pytest.mark.parametrize("kernels", [
    verify_kernel.CpuKernels((1, 1), (2, 17)), verify_kernel.CpuKernels((1, 9)),
    verify_kernel.CpuKernels(verify_rows_patch.NO_ROWS, (1, 17)), verify_kernel.NO_KERNELS,
], ids=["kernel+packed", "kernel", "packed", "none"])
def test_the_seeded_routing_is_the_one_a_call_runs_on(kernels):
    """The route measurement keeps its costs under the routing it predicts (`routing_description`): it must be what
    `describe` says once a call's forwards take those kernels, or the seed would never be read."""
    target = one_layer_target("llama").to(torch.bfloat16)
    if not verify_kernel.kernel_applies(target):
        pytest.skip("the CPU rows kernel does not build here")
    if kernels.packed != verify_rows_patch.NO_ROWS and not packed_weights.available():
        pytest.skip("prepacked oneDNN weights need AMX or AVX-512 BF16")
    try:
        verify_kernel.enable_kernels(target, kernels)
        assert verify_rows_patch.describe(target) == verify_kernel.routing_description(kernels)
    finally:
        verify_rows_patch.disable(target)


def test_a_bf16_target_never_reads_its_fp32_copys_verify_table(measured, tmp_path):
    """The table's key holds the target's dtype: the same target cast to bf16 measures its own table (real
    measurements, nothing mocked), and the file then holds both."""
    target = one_layer_target("llama")
    costs_of(target, imitating_assistant(target), 4)
    target.to(torch.bfloat16)
    costs_of(target, imitating_assistant(target).to(torch.bfloat16), 4)
    assert measured == [[1, 2, 3, 5], [1, 2, 3, 5]], "the bf16 target read the fp32 target's verify costs"
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert len([key for key in stored if key.startswith("verify:")]) == 2


def test_remembering_new_verify_sizes_keeps_every_other_cost_entry(measured, tmp_path):
    """Adding sizes to a verify table rewrites its entry only: the round costs, the CPU routes and any other
    entry in the file stay as they were."""
    target = one_layer_target("llama")
    costs_of(target, imitating_assistant(target), 4)
    path = tmp_path / "calibration.json"
    before = json.loads(path.read_text())
    others = {"cpu_routes:elsewhere": {"kernel": [1, 9], "packed": [0, 0]}, "another:target": {"1": 0.5}}
    path.write_text(json.dumps({**before, **others}))
    store.MEMORY.clear()  # a new process: the table is read from the file, then grown
    costs_of(target, imitating_assistant(target, tree_top_k=3), 12)
    assert measured == [[1, 2, 3, 5], [9, 13]], "the case: new sizes were added to the stored table"
    after = json.loads(path.read_text())
    kept = {key: value for key, value in {**before, **others}.items() if not key.startswith("verify:")}
    assert {key: after.get(key) for key in kept} == kept, "an entry other than the verify table was lost"
    (key,) = [key for key in after if key.startswith("verify:")]
    assert set(after[key]) == {"1", "2", "3", "5", "9", "13"}


def test_round_costs_are_kept_per_tree_shape(measured, monkeypatch):
    """A tree depth's cost depends on the tree's shape (children per node, nodes): the round costs' key holds
    both, so a depth measured for one shape never plans trees of another."""
    shapes = []
    measure = calibration.measure_round_costs

    def recorded(*args, tree_top_k, tree_total_tokens, **kwargs):
        shapes.append((tree_top_k, tree_total_tokens))
        return measure(*args, tree_top_k=tree_top_k, tree_total_tokens=tree_total_tokens, **kwargs)
    monkeypatch.setattr(calibration, "measure_round_costs", recorded)
    target = one_layer_target("llama")
    for top_k, total in ((2, 6), (2, 12), (3, 6), (2, 6)):
        costs_of(target, imitating_assistant(target, tree_top_k=top_k, tree_total_tokens=total), 4)
    assert shapes == [(2, 6), (2, 12), (3, 6)], "a tree shape's costs were read for another shape"
