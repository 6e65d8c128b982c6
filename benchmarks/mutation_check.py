"""Apply each known rule violation to a copy of the package and check that a test fails on it by an assertion.

    python benchmarks/mutation_check.py [--only NAME] [--json OUT] [--list] [--jobs N]

Each mutation replaces exact snippets of the source, runs the named test files on the copy (or the tests
`select` picks), and reports which tests failed and how: `assert` (an AssertionError from the test, or pytest's
own "DID NOT RAISE" / "DID NOT WARN" where a test expects an error or a warning) or `crash` (any other
exception). A mutation counts as caught only by an assertion; its run ends at the first such failure
(`-p mutation_stop`, benchmarks/mutation_stop.py), since the rest of its tests could only repeat the catch. Every
snippet must occur exactly once in the current source: a stale snippet stops the run before anything is mutated,
and tests/test_mutation_check.py checks it in the test suite, so the list cannot rot silently. CI runs the whole
check (.ci/run). A mutation of a path that only some hosts run (`needs`: oneDNN's packed bf16 weights and the rows
kernel's AVX-512 BF16 form need such a CPU) is reported as not run on a host without it (an AVX2 CI machine) and
is caught on the hosts that have it: its tests skip there because the path cannot run, not because the rule is
unguarded. The mutations run `--jobs` at a time (default: one per core, each pytest on one
thread: the tiny models' tests are Python-bound, so two single-threaded runs take about half the time of two
two-threaded ones in a row), each in a process forked from the checker after it imported torch, transformers and
pytest once (PRELOADED), so that no mutation pays for those imports again.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the plugin beside this file, however it is loaded
from mutation_stop import ASSERTION_MESSAGES  # noqa: E402  (the plugin's own definition of a catch)

ROOT = Path(__file__).resolve().parent.parent
FAKE_CUDA = "tests/test_fake_cuda.py"
PROCESSORS = "tests/test_context_processors.py"
UNTRUSTED = "tests/test_untrusted_inputs.py"
PROBES = "tests/test_planner_probes.py"
CHAIN_GENERATE = "tests/test_chain_generate.py"
PLANNED = "tests/test_planned_rounds.py"
PLANNED_TREES = "tests/test_planned_trees.py"
MEDUSA = "tests/test_medusa.py"
BATCHED = "tests/test_batched.py"
STATIC = "tests/test_static_round.py"
MEDUSA_AUTO = "tests/test_medusa_auto.py"
LATTICE = "tests/test_lattice.py"
SIMULATION = "tests/test_plan_simulation.py"
FAST_CPU = "tests/test_fast_cpu.py"
PLANNER = "tests/test_planner.py"
SAMPLER = "tests/test_sampler.py"
VERIFY_ROWS = "tests/test_verify_rows.py"
REQUEST = "tests/test_request_lookup.py"
VERIFY_COSTS = "tests/test_verify_costs.py"


@dataclass
class Mutation:
    name: str
    path: str
    old: str | list[str]  # exact snippets, each occurring once
    new: str | list[str]
    tests: list[str]
    also: tuple[str, str, str] | None = None  # a second file's (path, old, new), for a bug spread over two files
    select: str | None = None  # a pytest -k expression: only the tests that guard this rule
    needs: str | None = None  # a host capability (HOST_CAPABILITIES) the mutated path runs only with

    def edits(self) -> list[tuple[str, str, str]]:
        """Every (path, old snippet, new snippet) of the mutation."""
        olds, news = (self.old, self.new) if isinstance(self.old, list) else ([self.old], [self.new])
        edits = [(self.path, old, new) for old, new in zip(olds, news)]
        return edits + ([self.also] if self.also is not None else [])


# What a mutation's path may need of the host (`Mutation.needs`), and what it is.
HOST_CAPABILITIES = {
    "packed": "oneDNN with native bf16 products (AMX or AVX-512 BF16)",
    "avx512_bf16": "the rows kernel's AVX-512 BF16 form (a CPU with AVX-512 BF16)",
}
# Asked of the package itself, in a process of its own: the checker never imports hf_dynaspec (importing it patches
# transformers' generate(), and each child imports its own mutated copy).
CAPABILITIES_HERE = """
import json
from hf_dynaspec.kernels.verify_rows import loader, packed
print(json.dumps(sorted(name for name, present in {
    "packed": packed.available(), "avx512_bf16": loader.available() and loader.isa() == "avx512_bf16"}.items()
    if present)))
"""


def capabilities_here() -> set[str]:
    """The HOST_CAPABILITIES this host has, as the package finds them."""
    found = subprocess.run([sys.executable, "-c", CAPABILITIES_HERE], capture_output=True, text=True, check=True,
                           cwd=ROOT)
    return set(json.loads(found.stdout.strip().splitlines()[-1]))


MUTATIONS = [
    Mutation("cache growth: zero-filled buffer, history lost", "hf_dynaspec/drafting/chain.py",
             "        if self._keys is not None and self.length:\n"
             "            keys[..., : self.length, :] = self._keys[..., : self.length, :]\n"
             "            values[..., : self.length, :] = self._values[..., : self.length, :]\n",
             "        keys.zero_()\n        values.zero_()\n", ["tests/test_drafting.py"]),
    Mutation("cache growth: history not copied", "hf_dynaspec/drafting/chain.py",
             "if self._keys is not None and self.length:", "if False:", ["tests/test_drafting.py"]),
    Mutation("cache growth: values copied from keys", "hf_dynaspec/drafting/chain.py",
             "values[..., : self.length, :] = self._values[..., : self.length, :]",
             "values[..., : self.length, :] = self._keys[..., : self.length, :]", ["tests/test_drafting.py"]),
    Mutation("features: the last rows of the pass instead of the first", "hf_dynaspec/drafting/chain.py",
             "piece = new_target_hidden[:, :num_new]", "piece = new_target_hidden[:, -num_new:]",
             ["tests/test_drafting.py"]),
    Mutation("features: the layer before the last", "hf_dynaspec/modeling/drafter.py",
             ["        return hidden_states[-1]\n", "        return -1\n"],
             ["        return hidden_states[-2]\n", "        return -2\n"], ["tests/test_drafting.py"]),
    Mutation("features: positions shifted by one", "hf_dynaspec/drafting/chain.py",
             "position_ids = torch.arange(start, seq_len - 1, device=device)[None]",
             "position_ids = torch.arange(start + 1, seq_len, device=device)[None]", ["tests/test_drafting.py"]),
    Mutation("draft logits handed over before the temperature", "hf_dynaspec/drafting/chain.py",
             ["                if self.logits_processor is not None:\n                    full = self.logits_processor(context, full)\n",
              "            return sampling.sample(full.softmax(dim=-1)), full, confident"],
             ["                raw = full\n                if self.logits_processor is not None:\n"
              "                    full = self.logits_processor(context, full.clone())\n",
              "            return sampling.sample(full.softmax(dim=-1)), raw, confident"],
             ["tests/test_enumeration.py"]),
    Mutation("confidence: the drawn token's probability decides (the old rule)", "hf_dynaspec/drafting/chain.py",
             ["        if confident is not None and not self.defer_host_decisions and not bool(confident):\n"
              "            return None, None, None, None\n",
              "            return sampling.sample(full.softmax(dim=-1)), full, confident, top"],
             ["",
              "            token = sampling.sample(full.softmax(dim=-1))\n"
              "            if self.confidence > 0 and float(full.softmax(-1)[0, token]) < self.confidence:\n"
              "                return None, None, None, None\n            return token, full, confident, top"],
             ["tests/test_enumeration.py"]),
    Mutation("drafter cache crop one short", "hf_dynaspec/drafting/chain.py",
             "self.cache.crop(start)", "self.cache.crop(max(start - 1, 0))", ["tests/test_drafting.py"]),
    Mutation("drafter cache crop keeps one stale entry", "hf_dynaspec/drafting/chain.py",
             "        self.length = length\n", "        self.length = min(length + 1, self.length)\n",
             ["tests/test_drafting.py"]),
    Mutation("device shortlist: padding columns scored", "hf_dynaspec/kernels/shortlist_head/torch_paths.py",
             "    return ShortlistHeadOutput(scores.masked_fill(row_ids < 0, float(\"-inf\")), row_ids)",
             "    return ShortlistHeadOutput(scores, row_ids)", ["tests/test_shortlist_head.py"]),
    Mutation("row budget: a column at a cluster's end placed in the next cluster (torch ids)",
             "hf_dynaspec/kernels/shortlist_head/torch_paths.py",
             "rank = torch.searchsorted(ends, columns, right=True)", "rank = torch.searchsorted(ends, columns)",
             ["tests/test_shortlists.py"], select="budget or row"),
    Mutation("row budget: a column at a cluster's end read from that cluster (the kernel's own ids)",
             "hf_dynaspec/kernels/shortlist_head/triton_kernel.py",
             "before = (ends[None, :] <= columns[:, None]) & rank_ok[None, :]",
             "before = (ends[None, :] < columns[:, None]) & rank_ok[None, :]",
             ["tests/test_shortlist_head_triton.py"], select="ranked_kernel_scores"),
    Mutation("one-launch head: the combine takes the first tile's token, not the best tile's",
             "hf_dynaspec/kernels/shortlist_head/triton_kernel.py",
             "tl.store(token_ptr + row, tl.load(tile_token_ptr + base + best_tile, cache_modifier=\".cg\"))",
             "tl.store(token_ptr + row, tl.load(tile_token_ptr + base, cache_modifier=\".cg\"))",
             ["tests/test_shortlist_head_triton.py"], select="arrival_counter"),
    Mutation("row budget: a cut cluster keeps its least frequent tokens", "hf_dynaspec/modeling/shortlist/clustering.py",
             "place[ranking] = torch.arange(len(ranking))", "place[ranking] = torch.arange(len(ranking)).flip(0)",
             ["tests/test_shortlists.py"], select="cut or budget"),
    Mutation("row budget: CPU blocks in cluster order, not the router's (the device's column order)",
             "hf_dynaspec/drafting/selector.py", "    chosen = [c for c in taken if taken[c]]",
             "    chosen = sorted(c for c in taken if taken[c])", ["tests/test_shortlists.py"], select="budget or row"),
    Mutation("deferred confidence cut one position late", "hf_dynaspec/drafting/chain.py",
             "keep = int(sum(values[0])) if confident is not None else drafted",
             "keep = int(sum(values[0])) + 1 if confident is not None else drafted", ["tests/test_sync_budget.py"],
             select="deferred_confidence_stop"),
    Mutation("tree drafting: a frontier node sees every earlier node", "hf_dynaspec/drafting/tree.py",
             "            tree_rows = tree_rows[best // k]\n",
             "            tree_rows = torch.ones_like(tree_rows[best // k])\n", ["tests/test_tree.py"],
             select="not sampl and not residual"),
    Mutation("tree greedy path: the shallowest matching node ends the path", "hf_dynaspec/generation/tree_verify.py",
             "last = torch.where(on_path, tree.depths, -1).argmax(dim=0, keepdim=True)",
             "last = torch.where(on_path, -tree.depths, -99).argmax(dim=0, keepdim=True)", ["tests/test_tree.py"],
             select="not sampl and not residual"),
    Mutation("tree sibling trial not renormalised (a later sibling tried with its plain p)",
             "hf_dynaspec/generation/tree_verify.py",
             "mass / remaining.clamp(min=torch.finfo(probs.dtype).tiny)", "mass", ["tests/test_enumeration.py"],
             select="tree_round_is_exact"),
    Mutation("device: the sampled tree walk reads whether it goes on at every depth", "hf_dynaspec/generation/tree_verify.py",
             "        alive = alive & (first < n)\n",
             "        alive = alive & (first < n)\n        if not bool(alive.all()):\n            pass\n",
             [FAKE_CUDA], select="once_per_round and sampled"),
    Mutation("tree sampled walk: a sibling repeating an earlier one's token tried again", "hf_dynaspec/generation/tree_verify.py",
             "repeated = (same & children[None, :]).any(dim=1)", "repeated = torch.zeros_like(children)",
             ["tests/test_tree.py"], select="one_sampling_step"),
    Mutation("verification='auto' verifies sampled drafts token by token", "hf_dynaspec/generation/candidate_generator.py",
             'options.verification in ("block", "auto")', 'options.verification == "block"',
             ["tests/test_block_verify.py"], select="generate_code_is_exact"),
    Mutation("calibration ids too short for a long verify table", "hf_dynaspec/generation/costs/timing.py",
             "length = CONTEXT + max(largest, *MEASURED_SIZES) + 2", "length = CONTEXT + max(MEASURED_SIZES) + 2",
             ["tests/test_drafter_free.py"], select="longer_than"),
    # (A drafter-free assistant's round has no drafter proposer to offer, so #92 retired "drafter-free planner offered
    # the drafter": the bug cannot be written without a crash. Its statistics are checked here instead.)
    Mutation("copy rounds counted as the drafter's in the statistics", "hf_dynaspec/drafting/round.py",
             "copied = bool(num_drafted) and not plan.proposer.reads_features", "copied = False",
             ["tests/test_one_entry.py", "tests/test_drafter_free.py"]),
    Mutation("tree residual keeps the rejected siblings' tokens", "hf_dynaspec/generation/tree_verify.py",
             "residual = torch.where(removed > 0, 0.0, probs)", "residual = probs", ["tests/test_enumeration.py"],
             select="tree_round_is_exact"),
    Mutation("tree sampled walk: the first sibling's trial taken as the only one", "hf_dynaspec/generation/tree_verify.py",
             "children = tree.parents == node  # [N]",
             "children = (tree.parents == node) & (torch.cumsum((tree.parents == node).int(), 0) == 1)  # [N]",
             ["tests/test_enumeration.py"], select="later_siblings"),
    # Device bugs, caught on a fake CUDA device (tests/fake_cuda.py): a device mix or a host sync where a GPU
    # would raise or wait.
    Mutation("device (N1): the row table built from the device's cluster buffers", "hf_dynaspec/drafting/selector.py",
             "clusters = shortlists.host_clusters().frequency_ordered", "clusters = shortlists.clusters.frequency_ordered",
             [FAKE_CUDA],
             also=("hf_dynaspec/drafting/selector.py", "if any(t.device.type != \"cpu\"", "if False and any(t.device.type != \"cpu\"")),
    Mutation("device: FR-Spec's list built from the device buffers (a mask read)",
             "hf_dynaspec/modeling/shortlist/artifact.py", "        host = self.host_buffers()\n        ranking",
             "        host = dict(self.named_buffers(recurse=False))\n        ranking", [FAKE_CUDA]),
    Mutation("device: host decisions not deferred (a read per draft step)", "hf_dynaspec/drafting/chain.py",
             "self.defer_host_decisions = use_accelerator_paths(next(drafter.parameters()).device)",
             "self.defer_host_decisions = False", [FAKE_CUDA], select="deferred_host_decisions"),
    Mutation("device: a draft step's position ids made on the host", "hf_dynaspec/drafting/chain.py",
             "position_ids = torch.full((1, 1), input_ids.shape[1] - 1 + k, device=token_id.device, dtype=torch.long)",
             "position_ids = torch.full((1, 1), input_ids.shape[1] - 1 + k, dtype=torch.long)", [FAKE_CUDA]),
    Mutation("device: a tree depth's attention rows made on the host", "hf_dynaspec/drafting/tree.py",
             "torch.eye(num_frontier, dtype=torch.bool, device=device)", "torch.eye(num_frontier, dtype=torch.bool)",
             [FAKE_CUDA], select="tree_drafting_and_its_masks"),
    Mutation("device: sampled logits widened on the host", "hf_dynaspec/drafting/row_processing.py",
             "full = logits.new_full((logits.shape[0], vocab_size + 1), float(\"-inf\"))",
             "full = torch.full((logits.shape[0], vocab_size + 1), float(\"-inf\"))", [FAKE_CUDA]),
    Mutation("device: prompt lookup searches the device's ids (nonzero per round)",
             "hf_dynaspec/drafting/lookup.py",
             "tokens, match = lookup_match(torch.tensor(ids),",
             "tokens, match = lookup_match(torch.tensor(ids, device=self.sources.device),",
             [FAKE_CUDA], also=("hf_dynaspec/drafting/round.py", "        self.sources.begin(input_ids)\n",
                                "        self.sources.begin(input_ids)\n        self.sources.device = input_ids.device\n"),
             select="names_its_reads"),
    Mutation("device: the side stream's inputs not recorded", "hf_dynaspec/kernels/streams.py",
             "            tensor.record_stream(self.stream)\n", "            pass\n", [FAKE_CUDA], select="side_stream"),
    Mutation("device: processed greedy tree walk node by node on the host", "hf_dynaspec/generation/tree_verify.py",
             "    if not do_sample:\n        return processed_greedy_path(", "    if False:\n        return processed_greedy_path(",
             [FAKE_CUDA], select="once_per_round and greedy"),
    # Round two (issue #52): processors in trees, options set late, caches and ids trusted blindly, integrity
    # checks narrower than their names, what runs against what was planned.
    Mutation("tree greedy walk: processors see the prompt without the node's path", "hf_dynaspec/generation/tree_verify.py",
             "context = torch.cat([input_ids.expand(count, -1), path_tokens[rows, :depth]], dim=1)",
             "context = input_ids.expand(count, -1)", [PROCESSORS], select="greedy"),
    Mutation("tree greedy walk: the node's path one node short", "hf_dynaspec/generation/tree_verify.py",
             "context = torch.cat([input_ids.expand(count, -1), path_tokens[rows, :depth]], dim=1)",
             "context = torch.cat([input_ids.expand(count, -1), path_tokens[rows, : max(depth - 1, 0)]], dim=1)",
             [PROCESSORS], select="greedy"),
    Mutation("tree sampled walk: processors see the prompt without the accepted path",
             "hf_dynaspec/generation/tree_verify.py",
             "context = torch.cat([input_ids, tree.token_ids[path[1:]][None]], dim=1)", "context = input_ids",
             [PROCESSORS], select="sampled"),
    Mutation("options set after loading not checked (assistant_model=)", "hf_dynaspec/generation/candidate_generator.py",
             "    options.validate_options()\n    return options", "    return options", [UNTRUSTED],
             select="after_loading"),
    Mutation("legacy config.json options win over generation_config.json", "hf_dynaspec/modeling/options.py",
             "    return {**legacy, **stored}", "    return {**stored, **legacy}", [UNTRUSTED], select="legacy"),
    Mutation("calibration entries trusted as soon as they parse", "hf_dynaspec/generation/costs/store.py",
             "parse=lambda entry: stored_costs(kind, entry, max_tokens),",
             "parse=lambda entry: (kind(**entry), None),", [UNTRUSTED], select="calibration"),
    Mutation("calibration key without the dtype", "hf_dynaspec/generation/costs/store.py",
             "\"dtype\": str(target.dtype),", "\"dtype\": \"any\",", [UNTRUSTED], select="bf16"),
    Mutation("a packaged prior weighs the rounds measured", "hf_dynaspec/bench/acceptance.py",
             "tree_shape=shape if tree_depth else None, rounds=rounds, weight=weight)",
             "tree_shape=shape if tree_depth else None, rounds=rounds, weight=float(rounds))",
             ["tests/test_expected_acceptance.py"], select="weighs_the_rounds"),
    Mutation("forgetting keeps the sampled planner's tables", "hf_dynaspec/runtime_store.py",
             "        state.planner_memories.clear()\n", "        state.planner_memories.pop(False, None)\n",
             ["tests/test_suffix_cache.py"], select="forgetting"),
    Mutation("captured draft: a step's mask hides its own new slot", "hf_dynaspec/drafting/captured.py",
             "    return (slots <= step_position)[None, None, None, :]",
             "    return (slots < step_position)[None, None, None, :]", ["tests/test_captured_draft.py"],
             select="own_slot"),
    Mutation("captured draft: the statistics keep the shortlists the confidence stop cut",
             "hf_dynaspec/drafting/chain.py", "confidences=host_tops[:keep], shortlists=ids[:keep])",
             "confidences=host_tops[:keep], shortlists=ids)", ["tests/test_captured_draft.py"], select="cutting-stop"),
    Mutation("cost key: the row budget left out", "hf_dynaspec/generation/costs/round_costs.py",
             "options.fixed_clusters, options.max_shortlist_size, options.shortlist_rows],",
             "options.fixed_clusters, options.max_shortlist_size],", [PLANNER], select="calibration"),
    Mutation("lattice cost key: the heads' shortlist left out", "hf_dynaspec/generation/costs/lattice_costs.py",
             "options=[options.shortlisted, options.max_candidates,",
             "options=[options.max_candidates,", [MEDUSA_AUTO], select="measured_once_and_cached"),
    Mutation("batches without an EOS token: a stop inside an accepted path recorded at the path's end",
             "hf_dynaspec/generation/batched_loop.py",
             "            self.first_stops.setdefault(row.index, row.sequence.shape[1] + first)",
             "            self.first_stops.setdefault(row.index, row.sequence.shape[1] + len(stops))", [BATCHED],
             select="own_depth"),
    Mutation("assistant_model=: a stop sequence checked at the round's end only (transformers' own rule)",
             "hf_dynaspec/generation/every_token_stops.py",
             "        first = min(self.checked_length, length - 1) + 1",
             "        first = length", ["tests/test_greedy_exact.py"],
             select="stop_sequence"),
    Mutation("assistant_model=: the streamer given a round's tokens past a stop",
             "hf_dynaspec/generation/every_token_stops.py",
             "            self.streamer.release(None if not cut_off else max(held - cut_off, 0))",
             "            self.streamer.release(None)", ["tests/test_greedy_exact.py"], select="stop_sequence"),
    Mutation("batches without an EOS token: rows keep tokens accepted past the common length",
             "hf_dynaspec/generation/batched_loop.py",
             "                row.sequence = row.sequence[:, : self.length]\n",
             "                row.sequence = row.sequence\n", [BATCHED], select="own_depth"),
    Mutation("cost key: the CPU's instruction set left out", "hf_dynaspec/generation/costs/store.py",
             "        \"cpu\": cpu,\n", "        \"cpu\": None,\n", [FAST_CPU], select="another_machine"),
    Mutation("from_pretrained: a target that is not a model is not named", "hf_dynaspec/modeling/assistant.py",
             "        require_model(target, \"target (the model the assistant drafts for)\")\n", "",
             ["tests/test_bad_inputs.py"], select="refused_naming"),
    Mutation("sampler: an Exp(1) draw of exactly 0 not guarded", "hf_dynaspec/sampling.py",
             "    return (probs / noise.clamp_(min=_SMALLEST)).argmax(dim=-1, keepdim=True)",
             "    return (probs / noise).argmax(dim=-1, keepdim=True)", [SAMPLER], select="zero_exponential"),
    Mutation("sampler: NaN and all-zero rows drawn from silently", "hf_dynaspec/sampling.py",
             "    check_rows(probs)\n", "", [SAMPLER], select="nothing_to_draw"),
    Mutation("CPU kernels: a slower size does not end a run of sizes on one kernel", "hf_dynaspec/generation/costs/verify_kernel.py",
             "        while last + 1 < len(sizes) and fastest[last + 1] == path:\n",
             "        while last + 1 < len(sizes) and fastest[last + 1] != \"native\":\n", [FAST_CPU],
             select="unbroken_run"),
    Mutation("CPU kernels: the rows between two runs left on PyTorch", "hf_dynaspec/generation/costs/verify_kernel.py",
             "        lo = sizes[first - 1] + 1 if first > 0 and fastest[first - 1] not in (\"native\", path) else sizes[first]\n",
             "        lo = sizes[first]\n", [FAST_CPU], select="unbroken_run"),
    Mutation("packed weights: repacked on every call", "hf_dynaspec/kernels/verify_rows/packed.py",
             "    return entry[1] if entry is not None and entry[0] == weight_key(module) else None",
             "    return None", [FAST_CPU], select="packed_weights_take", needs="packed"),
    Mutation("packed weights: the copy kept after the weight changed", "hf_dynaspec/kernels/verify_rows/packed.py",
             "    return entry[1] if entry is not None and entry[0] == weight_key(module) else None",
             "    return entry[1] if entry is not None else None", [FAST_CPU], select="current_weights", needs="packed"),
    Mutation("--cpu-verify auto measures the kernels afresh on every run", "hf_dynaspec/generation/costs/verify_kernel.py",
             "        enable_kernels(model, measured_kernels(model))", "        enable_kernels(model, fastest_kernels(model))",
             [FAST_CPU], select="measures_once"),
    Mutation("shadow weights: the copy kept after the weight changed", "hf_dynaspec/kernels/verify_rows/patch.py",
             "    if entry is None or entry[0] != key:", "    if entry is None:",
             ["tests/test_verify_rows.py"], select="rerouted_path"),
    Mutation("fast_cpu: float32 layers left on PyTorch's kernels", "hf_dynaspec/kernels/verify_rows/patch.py",
             "    dtypes = (torch.bfloat16, torch.float16, torch.float32) if float32 else",
             "    dtypes = (torch.bfloat16, torch.float16) if float32 else", [FAST_CPU], select="one_token_steps"),
    Mutation("fast_cpu: the routed row counts start one row late", "hf_dynaspec/generation/costs/verify_kernel.py",
             "    verify_rows_patch.enable(model, min_rows=kernels.kernel[0], max_rows=kernels.kernel[1], method=\"kernel\",",
             "    verify_rows_patch.enable(model, min_rows=kernels.kernel[0] + 1, max_rows=kernels.kernel[1], method=\"kernel\",",
             [FAST_CPU], select="one_token_steps"),
    Mutation("cost key: the routed row counts left out", "hf_dynaspec/generation/costs/store.py",
             "\"cpu_verify\": verify_rows_patch.describe(target),",
             "\"cpu_verify\": verify_rows_patch.enabled_method(target),", [FAST_CPU], select="never_plan_another"),
    Mutation("AVX-512 BF16 kernel: the row tail's mask drops its last element",
             "hf_dynaspec/kernels/verify_rows/bf16_rows.c",
             "            __mmask32 m = (__mmask32)((1u << (in - i)) - 1u);",
             "            __mmask32 m = (__mmask32)((1u << (in - i - 1)) - 1u);", [VERIFY_ROWS], select="float64_product",
             needs="avx512_bf16"),
    Mutation("AVX-512 kernels: a 16-row block computes only its first row", "hf_dynaspec/kernels/verify_rows/bf16_rows.c",
             "            CASE(NAME, 16) CASE(NAME, 15)", "            CASE(NAME, 15)", [VERIFY_ROWS],
             select="float64_product", needs="avx512_bf16"),
    # One verify table per target and routing (hf_dynaspec.generation.costs.verify_costs).
    Mutation("verify costs: one table for every CPU routing of a target", "hf_dynaspec/generation/costs/verify_costs.py",
             "key = verify_key(target, verify_rows_patch.describe(target))", "key = verify_key(target, None)",
             [VERIFY_COSTS], select="seeds"),
    Mutation("verify costs: the routes seed PyTorch's costs for every size", "hf_dynaspec/generation/costs/verify_kernel.py",
             "return {size: seconds[path(size)][size] for size in sizes}", 'return {size: seconds["native"][size] for size in sizes}',
             [VERIFY_COSTS], select="seeds"),
    Mutation("verify costs: the routes' seed kept under a routing without its prepacked rows",
             "hf_dynaspec/generation/costs/verify_kernel.py",
             'verify_rows_patch.description("kernel", kernels.kernel, kernels.packed) if kernels else None',
             'verify_rows_patch.description("kernel", kernels.kernel) if kernels else None',
             [VERIFY_COSTS], select="seeded_routing", needs="packed"),
    Mutation("verify costs: a stored size measured again", "hf_dynaspec/generation/costs/verify_costs.py",
             "missing = [size for size in sizes if size not in known]", "missing = sizes",
             [VERIFY_COSTS], select="one_verify_table"),
    Mutation("verify costs: an entry's seconds trusted", "hf_dynaspec/generation/costs/verify_costs.py",
             "        if not store.is_seconds(seconds, zero_allowed=False):", "        if False:",
             [VERIFY_COSTS], select="bad_verify_entry"),
    Mutation("verify costs: an entry's token counts trusted", "hf_dynaspec/generation/costs/verify_costs.py",
             "_SIZE.fullmatch(size) and int(size) <= LARGEST_SIZE", "size.isdigit()",
             [VERIFY_COSTS], select="bad_verify_entry"),
    Mutation("cost cache: a measurement's own entries overwritten by the one it was for",
             "hf_dynaspec/generation/costs/store.py",
             ["    costs = read_entry(path, key, parse, what)\n", "        keep(path, key, to_json(costs))"],
             ["    stale = read_store(path)\n    costs = read_entry(path, key, parse, what)\n",
              "        write_store(path, {**stale, key: to_json(costs)})"],
             [VERIFY_COSTS], select="one_verify_table"),
    # The routes' entry is written by the same `store.cached` as the costs: caught there by the routes' own test.
    Mutation("cost cache: the routes' entry overwrites the verify table their measurement kept",
             "hf_dynaspec/generation/costs/store.py",
             ["    costs = read_entry(path, key, parse, what)\n", "        keep(path, key, to_json(costs))"],
             ["    stale = read_store(path)\n    costs = read_entry(path, key, parse, what)\n",
              "        write_store(path, {**stale, key: to_json(costs)})"],
             [VERIFY_COSTS], select="seeds"),
    Mutation("drafter-free calibration prefills the target with its verify table known",
             "hf_dynaspec/generation/costs/round_costs.py",
             "    verify_seconds = verify_table(target, ids, cache, max_tokens + 1, device, prefill)",
             "    prefill()\n    verify_seconds = verify_table(target, ids, cache, max_tokens + 1, device, prefill)",
             [VERIFY_COSTS], select="one_verify_table"),
    Mutation("CPU kernels cache entry trusted", "hf_dynaspec/generation/costs/verify_kernel.py",
             "    if isinstance(entry, dict) and set(entry) == {\"kernel\", \"packed\"} and pair(",
             "    if isinstance(entry, dict) or pair(", [UNTRUSTED], select="cpu_routes"),
    Mutation("prompt ids not checked against the vocabulary", "hf_dynaspec/generation/checks.py",
             "    if vocab_size is not None:\n        check_prompt_ids(input_ids, vocab_size)", "", [UNTRUSTED],
             also=("hf_dynaspec/generation/public_loop.py", "    check_prompt_ids(input_ids, assistant.config.vocab_size)\n", ""),
             select="prompt_id"),
    Mutation("suffix-cache corpus ids not checked", "hf_dynaspec/drafting/lookup.py",
             "bad = [t for t in tokens if t < 0 or (self.vocab_size is not None and t >= self.vocab_size)]", "bad = []",
             [UNTRUSTED], select="corpus"),
    Mutation("non-finite check sees NaN only", "hf_dynaspec/modeling/integrity.py",
             "not bool(torch.isfinite(t).all())", "bool(torch.isnan(t).any())", [UNTRUSTED], select="non_finite"),
    Mutation("fingerprint compares the embedding only", "hf_dynaspec/modeling/integrity.py",
             "for name, weight in ((\"embedding\", embedding), (\"lm_head\", head)):",
             "for name, weight in ((\"embedding\", embedding),):", [UNTRUSTED], select="fingerprint or lm_head"),
    Mutation("fingerprint tolerance too tight for another dtype", "hf_dynaspec/modeling/integrity.py",
             "_FINGERPRINT_TOLERANCE = 2e-2", "_FINGERPRINT_TOLERANCE = 1e-4", [UNTRUSTED], select="fingerprint"),
    Mutation("fingerprint tolerance too loose", "hf_dynaspec/modeling/integrity.py",
             "_FINGERPRINT_TOLERANCE = 2e-2", "_FINGERPRINT_TOLERANCE = 0.5", [UNTRUSTED], select="fingerprint"),
    Mutation("prompt lookup: the latest of the longest-agreeing occurrences, not the earliest",
             "hf_dynaspec/drafting/lookup.py", "start = int(starts[int((agreement == best).int().argmax())])",
             "start = int(starts[len(starts) - 1 - int((agreement == best).flip(0).int().argmax())])",
             ["tests/test_lookup.py"], select="definition or agrees_longest"),
    Mutation("prompt lookup: the match length is the n-gram alone, not extended backwards",
             "hf_dynaspec/drafting/lookup.py", "size + best\n", "size\n",
             ["tests/test_lookup.py"], select="definition or agrees_longest"),
    Mutation("planned lookup draft longer than planned", "hf_dynaspec/drafting/lookup.py",
             "ids = as_ids(list(tokens[: plan.num_tokens]), context.input_ids)[None]",
             "ids = as_ids(list(tokens), context.input_ids)[None]", [PLANNED], select="source_and_length"),
    Mutation("planned round drafts the first source found, not the planned one", "hf_dynaspec/drafting/lookup.py",
             "        tokens = plan.offer.tokens\n", "        tokens = (plan.copies or (plan.offer,))[0].tokens\n",
             [PLANNED], select="source"),
    Mutation("accelerator form ignores the planner's cut", "hf_dynaspec/drafting/chain.py",
             "return min(keep, rule.cut(host_tops)), host_tops", "return keep, host_tops", [PLANNED],
             select="cut"),
    Mutation("greedy and sampled calls share acceptance tables", "hf_dynaspec/drafting/runtime.py",
             "    memories = runtime_of(assistant).planner_memories\n",
             "    memories = runtime_of(assistant).planner_memories\n    do_sample = False\n", [PLANNED],
             select="apart"),
    Mutation("plan reads the drawn token's probability", "hf_dynaspec/drafting/chain.py",
             "            return sampling.sample(full.softmax(dim=-1)), full, confident, top",
             "            token = sampling.sample(full.softmax(dim=-1))\n"
             "            top = full[0].float().softmax(-1)[token[0, 0]] if with_top else top\n"
             "            return token, full, confident, top", [PLANNED], select="every_cost_model and cpu"),
    Mutation("no probe rounds: a planner that stops drafting never learns", "hf_dynaspec/drafting/planning/planner.py",
             "probe = self._drafter_probe([offer for offer in offers if offer.proposer.reads_features], room)",
             "probe = None", [PROBES]),
    Mutation("a tree probe that cannot pay ends every later probe", "hf_dynaspec/drafting/planning/planner.py",
             "                continue\n            memory.probe_schedule.probed(DRAFTER)",
             "                return None\n            memory.probe_schedule.probed(DRAFTER)", [PROBES], select="tree_probe"),
    Mutation("probes always assume an always-right drafter", "hf_dynaspec/drafting/planning/planner.py",
             "probe_tokens, rate = best_length(optimistic, partial(proposer.seconds, self, offer), smallest=1)",
             "probe_tokens, rate = best_length([1.0] * longest, partial(proposer.seconds, self, offer), smallest=1)",
             [PROBES], select="shrink"),
    Mutation("lookup sources never probed: a lookup behind a pessimistic table stays unlearnt",
             "hf_dynaspec/drafting/planning/planner.py",
             "probe = probe or lookup_probe(self.memory.probe_schedule, copies, best, room)",
             "probe = probe or None", [PROBES], select="lookup"),
    Mutation("lattice calls: prompt lookup never probed", "hf_dynaspec/drafting/planning/planner.py",
             "probe = probe or lookup_probe(self.memory.probe_schedule, copies, best, room)",
             "probe = probe or None", [SIMULATION], select="lattice"),
    Mutation("a request's own lookup outcomes ignored (the session's tables alone)",
             "hf_dynaspec/drafting/planning/core.py", "        return odds / (1.0 + odds)\n", "        return p\n",
             [REQUEST]),
    Mutation("a request's first positions and continuations calibrated together",
             "hf_dynaspec/drafting/planning/core.py",
             "        accepted, expected, outcomes = self.sums.get((*key[:-2], min(key[-1], 2)), (0, 0.0, 0))",
             "        accepted, expected, outcomes = self.sums.get((*key[:-2], 2), (0, 0.0, 0))", [REQUEST]),
    Mutation("a lookup position no round reached starts from the pooled table, not the longer match",
             "hf_dynaspec/drafting/planning/core.py",
             "        return self.estimate((*source, match_key(match + position - 1), 1))",
             "        return self.pooled.estimate((*source, 1))", [REQUEST]),
    Mutation("the planner prices copies from the session's tables, not the request's", "hf_dynaspec/drafting/lookup.py",
             "    def table(planner, offer: Offer):\n        return planner.lookup\n",
             "    def table(planner, offer: Offer):\n        return planner.memory.lookup\n", [REQUEST]),
    Mutation("the artifact's measured acceptance ignored (every planner starts at 0.5)",
             "hf_dynaspec/drafting/planning/core.py",
             "        self.position = position_table(prior)\n",
             "        self.position = position_table(None)\n", [SIMULATION, PROBES],
             select="first_rounds or measured_acceptance"),
    Mutation("trees priced at one node", "hf_dynaspec/drafting/proposers/drafter.py",
             "planner.verify(self.shape.nodes(depth) + 1)", "planner.verify(2)", [SIMULATION], select="trees"),
    Mutation("measured costs shared across dtypes (fp32 costs planning a bf16 target)",
             "hf_dynaspec/generation/costs/store.py", "        \"dtype\": str(target.dtype),\n", "",
             ["tests/test_planner.py"], select="calibration"),
    Mutation("public chain route verifies sampled drafts as point masses", "hf_dynaspec/generation/speculative.py",
             "do_sample=bool(generation_config.do_sample), draws_drafts=False, with_trees=trees,",
             "do_sample=bool(generation_config.do_sample), draws_drafts=bool(generation_config.do_sample), "
             "with_trees=trees,",
             [CHAIN_GENERATE], select="sampled and fixed"),
    Mutation("public chain route: lookup drafts ignore the room left", "hf_dynaspec/generation/batched_loop.py",
             "row.drafts.propose(row.ids, row.hidden, max(lockstep.length - row.sequence.shape[1] - 1, 0),",
             "row.drafts.propose(row.ids, row.hidden, max(lockstep.length - row.sequence.shape[1] - 1, 0) + 3,",
             [CHAIN_GENERATE], select="sampled_chain_generate_is_exact and auto"),
    Mutation("deferred positions absorbed after the new ones", "hf_dynaspec/drafting/chain.py",
             "torch.cat([self.pending_hidden, piece], 1)", "torch.cat([piece, self.pending_hidden], 1)",
             ["tests/test_drafting.py"], select="deferred"),
    Mutation("tree rounds teach the chain's table", "hf_dynaspec/drafting/proposers/drafter.py",
             "record_reached(planner.memory.tree_depth, partial(self.key, plan.offer), reached, num_accepted)",
             "record_reached(planner.memory.position, partial(self.key, plan.offer), reached, num_accepted)",
             [PLANNED_TREES], select="teaches"),
    Mutation("trees priced by depth, not node count", "hf_dynaspec/drafting/proposers/drafter.py",
             "planner.verify(self.shape.nodes(depth) + 1)", "planner.verify(depth + 1)", [PLANNED_TREES]),
    Mutation("tree rounds drafted deeper than planned", "hf_dynaspec/drafting/proposers/drafter.py",
             "tree = self.trees.draft_tree(context.input_ids, context.hidden, max_depth=plan.num_tokens)",
             "tree = self.trees.draft_tree(context.input_ids, context.hidden)", [PLANNED_TREES], select="planned_tree"),
    Mutation("tree rounds teach the chain nothing", "hf_dynaspec/drafting/proposers/drafter.py",
             "            record_reached(planner.memory.position, position_key, chain_reached, chain_accepted)",
             "            pass", [PLANNED_TREES], select="chains_table"),
    Mutation("the chain's outcome read past the first children", "hf_dynaspec/drafting/contract.py",
             "            if not kids[node] or kids[node][0] != child:", "            if not kids[node]:",
             [PLANNED_TREES], select="first_children"),
    Mutation("public routes never route verification through the rows kernel", "hf_dynaspec/generation/public_loop.py",
             "    if options.draft_plan == \"auto\" and options.target_verify_kernel == \"auto\" and options.verify_round == \"eager\":",
             "    if False:", ["tests/test_planner.py"], select="rows_kernel"),
    Mutation("medusa: head k drafts with block k - 1 (off by one head)", "hf_dynaspec/modeling/medusa.py",
             "        states = torch.stack([block(hidden) for block in self.blocks])",
             "        states = torch.stack([block(hidden) for block in self.blocks]).roll(1, dims=0)", [MEDUSA],
             select="own_position or loads_as_published"),
    Mutation("medusa: shortlisted heads score the first S rows, not the list's", "hf_dynaspec/modeling/medusa.py",
             "weights = self.target.get_output_embeddings().weight[self.frequency_ids][None]",
             "weights = self.target.get_output_embeddings().weight[: self.frequency_ids.numel()][None]", [MEDUSA],
             select="shortlisted"),
    Mutation("lattice tree: a child scored without its parent's path", "hf_dynaspec/drafting/lattice.py",
             "heapq.heappush(heap, (-(score + path_score(lp, causal, lam)), next(ties), node, token))",
             "heapq.heappush(heap, (-path_score(lp, causal, lam), next(ties), node, token))", [LATTICE],
             select="prefix_closed"),
    Mutation("CPS: the causal score left out", "hf_dynaspec/drafting/lattice.py",
             "    return lam * lattice_lp + (1.0 - lam) * causal_lp", "    return lattice_lp", [LATTICE],
             select="causal_score or full_beam"),
    Mutation("the drafter's veto of a lookup draft never asked", "hf_dynaspec/drafting/planning/fixed.py",
             "if not (drafted and self.veto < 1.0):", "if not (drafted and self.veto < 0.0):",
             ["tests/test_enumeration.py"], select="prompt_lookup"),
    Mutation("a call's plan does not override the heads' configured ADL", "hf_dynaspec/modeling/medusa_options.py",
             "        values.update({option: value for option, (_, value) in given.items()})\n",
             "        values.update({option: value for option, (_, value) in given.items()\n"
             "                       if option != \"draft_plan\" or self.draft_plan != \"adl\"})\n",
             [MEDUSA], select="overrides_the_configured"),
    Mutation("probe rounds cut by the planner", "hf_dynaspec/drafting/proposers/drafter.py",
             "ConfidenceRule(policy, self.max_tokens, plan.probe)", "ConfidenceRule(policy, self.max_tokens)", [PROBES],
             select="pessimistic"),
    Mutation("planned lattice rounds: the chain cut by position alone, its confidences ignored",
             "hf_dynaspec/drafting/proposers/lattice.py",
             ["return planner.memory.position if offer.read is None else planner.memory.confidence",
              "        if offer.read is None:\n            return position_key(position)\n"],
             ["return planner.memory.position", "        if True:\n            return position_key(position)\n"],
             [MEDUSA_AUTO], select="confidences_cut"),
    Mutation("planned lattice rounds: a chain of the whole depth whatever the plan",
             "hf_dynaspec/drafting/proposers/lattice.py",
             "as_ids(plan.offer.read.argmax_path(plan.num_tokens), root)", "as_ids(plan.offer.read.argmax_path(), root)",
             [MEDUSA_AUTO], select="greedy_auto or confidences_pay"),
    Mutation("batched rounds: positions counted on the padded row", "hf_dynaspec/generation/batched_loop.py",
             "positions = torch.stack([_padded(tree.depths, width, tree.depths[:1]) + row.ids.shape[1] - 1",
             "positions = torch.stack([_padded(tree.depths, width, tree.depths[:1]) + row.sequence.shape[1] - 1",
             [BATCHED], select="own_plain_greedy and chain-fixed or own_forward"),
    Mutation("batched rounds: masked cache slots attended", "hf_dynaspec/generation/batched_loop.py",
             "visible[:, :, :past] = valid[:, None, :]", "visible[:, :, :past] = True", [BATCHED],
             select="own_plain_greedy and chain-fixed or own_forward"),
    Mutation("batched rounds: every row keeps the first row's accepted slots", "hf_dynaspec/generation/batched_loop.py",
             "index = torch.stack([torch.cat([k, k.new_zeros(most - k.shape[0])]) for k in kept]) + past",
             "index = torch.stack([torch.cat([kept[0], kept[0].new_zeros(most - kept[0].shape[0])]) for k in kept]) + past",
             [BATCHED], select="different_lengths or own_plain_greedy"),
    # #59: the GPU defects found by reading, each caught by the test written for it.
    Mutation("the loop keeps every token's full-vocabulary rows though nobody asked",
             "hf_dynaspec/generation/batched_loop.py",
             ["        self.scores = list(first_scores) if returned and generation_config.output_scores else None\n",
              "        self.logits = list(first_logits) if returned and generation_config.output_logits else None\n"],
             ["        self.scores = list(first_scores)\n", "        self.logits = list(first_logits)\n"],
             [CHAIN_GENERATE], select="holds_no_scores"),
    Mutation("device: sampling through torch.multinomial (two host syncs per draw)", "hf_dynaspec/sampling.py",
             "    return (probs / noise.clamp_(min=_SMALLEST)).argmax(dim=-1, keepdim=True)",
             "    return torch.multinomial(probs, 1)", [FAKE_CUDA], select="chain_draft_of_k_tokens"),
    Mutation("sampling: the race multiplies by the noise (another law)", "hf_dynaspec/sampling.py",
             "    return (probs / noise.clamp_(min=_SMALLEST)).argmax(dim=-1, keepdim=True)",
             "    return (probs * noise).argmax(dim=-1, keepdim=True)", ["tests/test_sampler.py"]),
    Mutation("device: a finished row dropped with an index on the mask's card, not each layer's",
             "hf_dynaspec/generation/batched_loop.py",
             "        layer.batch_select_indices(index.to(layer.keys.device))",
             "        layer.batch_select_indices(index)", [FAKE_CUDA], select="finished_row"),
    Mutation("device: timing waits for the current card only", "hf_dynaspec/kernels/streams.py",
             "    for device in dict.fromkeys(torch.device(d) for d in devices):\n"
             "        if device.type == \"cuda\":\n            torch.cuda.synchronize(device)\n",
             "    if any(torch.device(d).type == \"cuda\" for d in devices):\n        torch.cuda.synchronize()\n",
             [FAKE_CUDA], select="every_card"),
    Mutation("device: a batched round reads each row's path on its own", "hf_dynaspec/generation/batched_loop.py",
             "    if do_sample or any(len(processors[row.index]) for row in rows):",
             "    if True:", [FAKE_CUDA], select="twice_whatever"),
    Mutation("the drafter's rotary table cast with its weights", "hf_dynaspec/modeling/drafter.py",
             "                setattr(self.rotary_emb, name, table.to(current.device))",
             "                pass", ["tests/test_device_following.py"], select="rotary"),
    # #61: three bugs no test caught before.
    Mutation("batched trees read with a causal mask (siblings see each other)", "hf_dynaspec/generation/batched_loop.py",
             "        visible[i, :n, past : past + n] = tree.ancestor_matrix()",
             "        visible[i, :n, past : past + n] = torch.ones(n, n, dtype=torch.bool, device=device).tril()",
             [BATCHED], select="own_ancestors"),
    Mutation("batched commit appends the whole accepted path past a stop", "hf_dynaspec/generation/batched_loop.py",
             "            return (first or len(stops)), first is not None\n",
             "            return len(stops), first is not None\n", [BATCHED], select="stops_inside"),
    Mutation("CPS n-gram scorer keyed by the oldest tokens of the history", "hf_dynaspec/drafting/lattice.py",
             "            key = tuple(history[len(history) - n :]) if n else ()",
             "            key = tuple(history[:n]) if n else ()", [LATTICE], select="newest"),
    Mutation("batched rounds: real nodes see the padding nodes of a smaller tree",
             "hf_dynaspec/generation/batched_loop.py",
             "    visible[:, :, past : past + width] = torch.eye(width, dtype=torch.bool, device=device)",
             "    visible[:, :, past : past + width] = True or torch.eye(width, dtype=torch.bool, device=device)", [BATCHED],
             select="own_forward or own_plain_greedy"),
    Mutation("batched rows: a processor's per-row state taken from the first row",
             "hf_dynaspec/generation/batched_loop.py", "setattr(processor, name, value[row : row + 1])",
             "setattr(processor, name, value[:1])", [BATCHED], select="processors_see_rows"),
    Mutation("batched rows priced as if each row's draft were verified alone", "hf_dynaspec/drafting/planning/planner.py",
             "        return self.costs.verify(self.rows * num_tokens) / self.rows",
             "        return self.costs.verify(num_tokens)", [BATCHED], select="priced_as_its_share"),
    Mutation("a lookup drafted short learns nothing past it", "hf_dynaspec/drafting/round.py",
             "        self.sources.learn(self.policy, plan, num_drafted, num_accepted)\n",
             "", [PROBES], select="past_it"),
    # The simulation caught it alone (0.957x on the 1.5B's bf16 costs) until copies were keyed by how far they agree
    # (2026-11-29): now the unit test of the rule does.
    Mutation("the planner drops what a short lookup shows past it", "hf_dynaspec/drafting/planning/planner.py",
             "        self.lookup.record(plan.proposer.key(plan.offer, num_drafted + 1), matched)\n",
             "        del matched\n", [SIMULATION, PROBES],
             select="within_3_percent and avx512bf16_bf16_qwen15b or position_past_it"),
    Mutation("a copy passed over learns from the wrong token (the one before the round)", "hf_dynaspec/drafting/lookup.py",
             "planner.record_passed_over(offer, self.context[offer.at] == offer.tokens[0])",
             "planner.record_passed_over(offer, self.context[offer.at - 1] == offer.tokens[0])", [PROBES],
             select="passed_over"),
    Mutation("the copy a round drafted also learns as passed over", "hf_dynaspec/drafting/lookup.py",
             "if (offer is not plan.offer or not num_drafted) and len(self.context) > offer.at:",
             "if len(self.context) > offer.at:", [PROBES], select="passed_over"),
    Mutation("a lookup drafted short learns from the wrong token (its own last one), in both rounds",
             "hf_dynaspec/drafting/lookup.py",
             "self.context[-1] == plan.next_offered", "self.context[-2] == plan.next_offered", [PROBES, MEDUSA_AUTO],
             select="past_it"),
    Mutation("the lattice scored even where it cannot pay (no draft not a candidate)",
             "hf_dynaspec/drafting/planning/planner.py",
             "best, best_rate = RoundPlan(None, 0), 1.0 / self.verify(1)", "best, best_rate = RoundPlan(None, 0), 0.0",
             [MEDUSA_AUTO], select="does_not_pay"),
    Mutation("probes never alternate to a tree", "hf_dynaspec/drafting/planning/planner.py",
             "        if memory.probe_schedule.count(DRAFTER) % 2:\n",
             "        if False:\n", [MEDUSA_AUTO], select="probes_alternate"),
    Mutation("lattice rounds: positions past the first rejection learnt as reached",
             "hf_dynaspec/drafting/proposers/lattice.py",
             "record_chain(planner.memory, plan.confidences, num_accepted, min(num_accepted + 1, num_drafted))",
             "record_chain(planner.memory, plan.confidences, num_accepted, num_drafted)", [MEDUSA_AUTO],
             select="probes_alternate"),
    Mutation("lattice rounds: a tree round teaches the chain's tables nothing", "hf_dynaspec/drafting/proposers/lattice.py",
             "            record_chain(planner.memory, plan.confidences, *draft.tree.greedy_chain_outcome(accepted_nodes))",
             "            pass", [MEDUSA_AUTO], select="probes_alternate"),
    Mutation("the bench's warm-up teaches the measured call (its output left in the suffix cache)",
             "hf_dynaspec/bench/harness.py", "            forget_learnt_state(method.assistant)\n",
             "            pass\n", ["tests/test_suffix_cache.py"], select="forgetting"),
    Mutation("forgetting keeps the suffix cache", "hf_dynaspec/runtime_store.py",
             "        state.suffix = None\n", "        pass\n", ["tests/test_suffix_cache.py"], select="forgetting"),
    Mutation("batches without an EOS token: a stopped row padded (generate() pads only with one)",
             "hf_dynaspec/generation/batched_loop.py",
             "        self.pads = any(hasattr(criterion, \"eos_token_id\") for criterion in stopping_criteria)\n",
             "        self.pads = True\n", [BATCHED], select="stops_inside"),
    Mutation("batches without an EOS token: rows end when the first row stops",
             "hf_dynaspec/generation/batched_loop.py",
             "        self.length = min(self.length, max(self.first_stops.values()))\n",
             "        self.length = min(self.length, min(self.first_stops.values()))\n", [BATCHED],
             select="stops_inside"),
    Mutation("medusa: saved drafting options ignored at load", "hf_dynaspec/modeling/medusa.py",
             "        stored = {k: v for k, v in (read_generation_json(Path(directory)) or {}).items() if k in OPTION_DEFAULTS}\n",
             "        stored = {}\n", [MEDUSA],
             select="saved_options"),
    Mutation("medusa: a per-call option by a transformers name is left to generate()'s own config",
             "hf_dynaspec/generation/speculative.py",
             "               if name not in {p.name for p in _named}), _model_kwargs])",
             "               if name not in {p.name for p in _named} | {\"num_assistant_tokens\", \"prompt_lookup_num_tokens\"}),"
             " _model_kwargs])",
             [CHAIN_GENERATE], select="speculative_generate_is_each_route"),
    Mutation("speculative_generate drops the call's tree shape", "hf_dynaspec/generation/speculative.py",
             "{**shape, **calls}, model_kwargs)", "calls, model_kwargs)", [CHAIN_GENERATE],
             select="speculative_generate_is_each_route"),
    Mutation("medusa: per-call options written onto the heads' config", "hf_dynaspec/modeling/medusa_options.py",
             "        values = self.drafting_options()\n",
             "        values = self.__dict__\n", [MEDUSA], select="saved_options"),
    Mutation("medusa: gathered shortlist rows kept on the heads' __dict__", "hf_dynaspec/modeling/medusa.py",
             "            rows = runtime.shortlist_rows = weights.to(states.dtype).contiguous()",
             "            rows = runtime.shortlist_rows = self.__dict__[\"_rows\"] = weights.to(states.dtype).contiguous()",
             [MEDUSA], select="as_it_found_them"),
    Mutation("the lattice planner's tables shared across decoding modes", "hf_dynaspec/drafting/runtime.py",
             "    return memories[bool(do_sample)]\n",
             "    return memories.setdefault(True, memories[bool(do_sample)])\n",
             [MEDUSA_AUTO], select="measured_acceptance_is_where"),
    # #73: the static verify round.
    Mutation("static round: a forward writes one slot early, over the last committed entry",
             "hf_dynaspec/generation/static_round.py", "        self.set_length(past)\n",
             "        self.set_length(max(past - 1, 0))\n", [STATIC],
             select="plain_forward"),
    Mutation("static round: stale slots past the committed prefix attended", "hf_dynaspec/generation/batched_loop.py",
             "    visible[:, :, :past] = valid[:, None, :]",
             "    visible[:, :, :past] = valid[:, None, :]\n    visible[:, :, past + width :] = True", [STATIC],
             select="plain_forward"),
    # #75: sampled drafting on a shortlist's rows.
    Mutation("rows path: the repetition penalty reads the context's vocabulary ids as row columns",
             "hf_dynaspec/drafting/row_processing.py",
             "    mapped = _rows_of(context, ids) if any(", "    mapped = context if any(",
             ["tests/test_row_processing.py", "tests/test_enumeration.py"], select="repetition"),
    Mutation("rows path: the verifier gets the unprocessed rows as q", "hf_dynaspec/drafting/chain.py",
             "            drawn = widen(rows, scores.token_ids, self.vocab_size) if self.do_sample else None",
             "            drawn = widen(scores.scores, scores.token_ids, self.vocab_size) if self.do_sample else None",
             ["tests/test_enumeration.py"], select="rows_are_exact"),
    # #76: copies as long as they pay.
    Mutation("planned copies capped by the options' fixed lengths", "hf_dynaspec/generation/rounds.py",
             "SuffixCacheProposer(sources, LONGEST_COPY if planned else options.suffix_cache_num_tokens,",
             "SuffixCacheProposer(sources, options.suffix_cache_num_tokens,", [PLANNED], select="as_long_as"),
    Mutation("lookup probes draft whole copies past the positions they learn", "hf_dynaspec/drafting/planning/core.py",
             "        whole = min(offer.num_tokens, room, MAX_POSITION_KEY)",
             "        whole = min(offer.num_tokens, room)", [PLANNED], select="as_long_as"),
    # #75: the target's sampling at the cost of its few tokens.
    Mutation("sparse top-p: a cut through equal logits decided by value order", "hf_dynaspec/drafting/row_processing.py",
             "        if 0 < cut < n and values[cut - 1] == values[cut]:", "        if False:",
             ["tests/test_row_processing.py"], select="sparse or cut_through"),
    Mutation("sparse top-p: min_tokens_to_keep ignored", "hf_dynaspec/drafting/row_processing.py",
             "        removed[max(n - self.min_tokens_to_keep, 0):] = False",
             "        removed[n - 1:] = False", ["tests/test_row_processing.py"], select="sparse"),
    Mutation("sparse top-p: NaN and +inf rows taken by the sparse path", "hf_dynaspec/drafting/row_processing.py",
             '        if not bool(row.sum() == float("-inf")):', "        if False:", ["tests/test_row_processing.py"],
             select="cannot_prove"),
    Mutation("fused top-k/top-p: the k-th value's ties past the k-th place dropped", "hf_dynaspec/drafting/row_processing.py",
             "        if top.values.shape[0] > k and bool(top.values[k] < top.values[k - 1]):",
             "        if top.values.shape[0] > k:", ["tests/test_row_processing.py"], select="fused"),
    Mutation("fused top-k/top-p: NaN, +inf and short rows taken by the fused path", "hf_dynaspec/drafting/row_processing.py",
             "        if not bool(torch.isfinite(top.values[0]) & torch.isfinite(top.values[k - 1])):", "        if False:",
             ["tests/test_row_processing.py"], select="fused"),
    Mutation("fused top-k/top-p: a top-p it cannot prove run on the row without its top-k",
             "hf_dynaspec/drafting/row_processing.py",
             "        return TopPLogitsWarper.__call__(self.top_p, None, top_k_result[None])[0]",
             "        return TopPLogitsWarper.__call__(self.top_p, None, row[None])[0]", ["tests/test_row_processing.py"],
             select="cannot_prove_is_transformers"),
    Mutation("sparse race: the largest probability wins (no noise)", "hf_dynaspec/sampling.py",
             "    race[rows, columns] = values / noise.clamp_(min=_SMALLEST)",
             "    race[rows, columns] = values", ["tests/test_sampler.py"], select="sparse"),
    Mutation("a round that drafted nothing: the target's most likely token", "hf_dynaspec/generation/block_verify.py",
             "        token = sampling.sample(new_logits[0, :1].float().softmax(-1))",
             "        token = new_logits[0, :1].argmax(-1, keepdim=True)", ["tests/test_block_verify.py"],
             select="drafted_nothing"),
    # Round five of rules the suite did not catch (issue 90): each test asserts that its case happened.
    Mutation("rows processing: the spare column for ids outside the rows is a finite 0",
             "hf_dynaspec/drafting/row_processing.py",
             '    spare = logits.new_full((logits.shape[0], 1), float("-inf"))',
             "    spare = logits.new_zeros((logits.shape[0], 1))", ["tests/test_row_processing.py"], select="spare_column"),
    Mutation("assistant_model= route: the target's top-k / top-p left to transformers' sort",
             "hf_dynaspec/generation/hook.py",
             '            bound.arguments["logits_processor"] = with_sparse_warpers(bound.arguments["logits_processor"])\n',
             "",
             ["tests/test_row_processing.py"], select="fused_warpers"),
    Mutation("for_target: the drafter-free defaults override the caller's options", "hf_dynaspec/modeling/assistant.py",
             "{**DRAFTER_FREE_OPTIONS, **options}", "{**options, **DRAFTER_FREE_OPTIONS}", ["tests/test_drafter_free.py"],
             select="override"),
    Mutation("drafter-free verify table measured only up to the options' copy lengths", "hf_dynaspec/generation/rounds.py",
             "options.auto_max_assistant_tokens if assistant.has_drafter else LONGEST_COPY",
             "options.auto_max_assistant_tokens if assistant.has_drafter else 0", ["tests/test_drafter_free.py"],
             select="longest_copy"),
    Mutation("a copy the plan drafted whole counts toward its source's next probe", "hf_dynaspec/drafting/planning/core.py",
             "            probes.passed(offer.source, drafted)", "            probes.passed(offer.source)",
             [PROBES], select="drafted_whole"),
    Mutation("verify costs: the table's key without the target's dtype", "hf_dynaspec/generation/costs/verify_costs.py",
             'store.digest({**store.target_parts(target), "cpu_verify": routing})',
             'store.digest({**store.target_parts(target), "dtype": None, "cpu_verify": routing})',
             [VERIFY_COSTS], select="bf16_target_never"),
    Mutation("verify costs: remembering new sizes writes the table alone into the file",
             "hf_dynaspec/generation/costs/verify_costs.py",
             "    store.keep(store.calibration_path(), key, {str(size): seconds for size, seconds in sorted(known.items())})",
             "    store.write_store(store.calibration_path(), {key: {str(size): seconds for size, seconds in "
             "sorted(known.items())}})", [VERIFY_COSTS], select="keeps_every_other"),
    Mutation("round costs: the key without the tree's node count", "hf_dynaspec/generation/costs/round_costs.py",
             "tree=[options.tree_top_k, options.tree_total_tokens])", "tree=[options.tree_top_k])",
             [VERIFY_COSTS], select="per_tree_shape"),
    Mutation("fast_cpu: release_packed leaves the routing that packs again", "hf_dynaspec/generation/costs/verify_kernel.py",
             "        self.undo()\n        return packed_weights.release(self.model)",
             "        return packed_weights.release(self.model)", [FAST_CPU], select="release_packed", needs="packed"),
    Mutation("the eager round pads a tree to its power-of-two width", "hf_dynaspec/generation/static_round.py",
             "return width_bucket(nodes) if self.static else nodes", "return width_bucket(nodes)", [STATIC],
             select="pads_a_tree"),
    Mutation("a batch's rows share one suffix cache's request part", "hf_dynaspec/generation/speculative.py",
             "                           batch_row=batch.padded)", "                           batch_row=False)",
             [BATCHED], select="suffix_cache_indexes"),
    Mutation("public loop: the rounds are told the target's own token as accepted", "hf_dynaspec/generation/batched_loop.py",
             "row.drafts.learn(draft, row.ids, committed - 1, path.nodes[: committed - 1])",
             "row.drafts.learn(draft, row.ids, committed, path.nodes[: committed - 1])", [CHAIN_GENERATE],
             select="without_the_targets_own"),
    Mutation("assistant_model= route: the rounds are told the target's own token as accepted",
             "hf_dynaspec/generation/candidate_generator.py", "self.round.learn(self.draft, input_ids, int(num_matches))",
             "self.round.learn(self.draft, input_ids, int(num_matches) + 1)", [CHAIN_GENERATE], select="without_the_targets_own"),
    Mutation("bench --sample of a zoo model samples with the cached copy's empty generation config",
             "hf_dynaspec/bench/command.py", "sampling=sampling_settings(args, published_config(args.target, target))",
             "sampling=sampling_settings(args, target.generation_config)", ["tests/test_bench.py"],
             select="zoos_published"),
    Mutation("check_exactness re-scores a bf16 divergence in bf16", "hf_dynaspec/exactness.py",
             "    with _float32_weights(model):\n        logits = model(input_ids=prefix,",
             "    with contextlib.nullcontext(model):\n        logits = model(input_ids=prefix,",
             ["tests/test_exactness.py"], select="rescored"),
    Mutation("static round: the held cache reused after the target was cast or moved", "hf_dynaspec/generation/static_round.py",
             "    if held is None or held.capacity < capacity or held.where != (model.dtype, model.device):",
             "    if held is None or held.capacity < capacity:", [STATIC], select="cast_or_moved"),
    Mutation("assistant_model= route: a static round asked there passes in silence",
             "hf_dynaspec/generation/candidate_generator.py", "        logger.warning_once(STATIC_ROUND_WARNING)",
             "        pass", [STATIC], select="assistant_model_route"),
    Mutation("static round: a graph replay not marked as a new step", "hf_dynaspec/generation/static_round.py",
             "            torch.compiler.cudagraph_mark_step_begin()\n", "            pass\n", [STATIC],
             select="graph_replay"),
    Mutation("static round: a graph replay's logits handed out uncopied", "hf_dynaspec/generation/static_round.py",
             "            out.logits = out.logits.clone()", "            out.logits = out.logits", [STATIC],
             select="graph_replay"),
    Mutation("the demo passes a real mismatch", "hf_dynaspec/cli.py",
             '    return result["identical"] or divergence["near_tie"]', "    return True", ["tests/test_cli.py"],
             select="real_mismatch"),
    Mutation("DynaSpec row table: the column range made on the CPU", "hf_dynaspec/drafting/selector.py",
             "self._columns = torch.arange(self.num_clustered, device=device)",
             "self._columns = torch.arange(self.num_clustered)", [FAKE_CUDA], select="row_table_and_the_path"),
    # #91: the compiled step with the rows kernel inside.
    Mutation("compiled step: the rows kernel's ctypes call traced into the graph", "hf_dynaspec/kernels/verify_rows/patch.py",
             "        elif torch.compiler.is_compiling():", "        elif False:", [FAST_CPU], select="rows_operator"),
    Mutation("rows operator: its fake says the input's dtype", "hf_dynaspec/kernels/verify_rows/op.py",
             "weight.shape[0]), dtype=torch.float32)", "weight.shape[0]), dtype=x.dtype)", [FAST_CPU],
             select="rows_operator"),
    Mutation("fast_cpu: the compile config not told that a CPU may compile", "hf_dynaspec/generation/costs/verify_kernel.py",
             "    config.compile_config._compile_all_devices = True", "    pass", [FAST_CPU], select="compiled_steps"),
    Mutation("fast_cpu: undo keeps the static cache and the compile config", "hf_dynaspec/generation/costs/verify_kernel.py",
             "                setattr(self.model.generation_config, name, value)", "                pass", [FAST_CPU],
             select="compiled_steps"),
    Mutation("Triton head: one arrival counter shared by every stream", "hf_dynaspec/kernels/shortlist_head/triton_kernel.py",
             "_counter(device, _stream(device)),", "_counter(device),", ["tests/test_shortlist_head_triton.py"],
             select="own_arrival_counter"),
    Mutation("static prefill: over the static cache (its mask spans the capacity)", "hf_dynaspec/generation/batched_loop.py",
             ["    cache = DynamicCache() if slots.static else slots.cache\n", "        slots.write_prompt(cache)\n"],
             ["    cache = slots.cache\n", "        pass\n"], [STATIC], select="prefill_masks"),
    Mutation("static prefill: the prompt's keys never written into the static slots", "hf_dynaspec/generation/batched_loop.py",
             "        slots.write_prompt(cache)\n", "        pass\n", [STATIC], select="prefill_masks"),
    Mutation("demo: plain on the fast path left out", "hf_dynaspec/cli.py",
             '    fast_plain = args.cpu_verify == "auto" and kernel_applies(model)', "    fast_plain = False",
             ["tests/test_cli.py"], select="both_plain_baselines"),
    Mutation("compiled step: oneDNN's packed product traced into the graph", "hf_dynaspec/kernels/verify_rows/patch.py",
             "                if torch.compiler.is_compiling():\n                    return packed_weights.compiled_linear",
             "                if False:\n                    return packed_weights.compiled_linear", [FAST_CPU],
             select="packed_weights_call", needs="packed"),
]


def stale_snippets(root: Path = ROOT) -> list[str]:
    """The mutations whose snippets do not occur exactly once in the source under `root` (empty: all current)."""
    problems = []
    for mutation in MUTATIONS:
        for path, old, _ in mutation.edits():
            count = (root / path).read_text().count(old) if (root / path).is_file() else 0
            if count != 1:
                problems.append(f"{mutation.name}: a snippet occurs {count} times in {path}")
        problems += [f"{mutation.name}: no test file {test}" for test in mutation.tests if not (root / test).is_file()]
    return problems




# Imported once by the checker before it forks a process per mutation, so that no mutation pays for them again
# (about 4 s of imports each, most of the check's time when every run is a fresh interpreter). Never hf_dynaspec
# itself: each child imports the mutated copy, and importing the package patches transformers' generate().
PRELOADED = ("torch", "numpy", "scipy.stats", "safetensors.torch", "transformers", "transformers.generation",
             "transformers.modeling_utils", "transformers.models.llama.modeling_llama",
             "transformers.models.qwen2.modeling_qwen2", "sklearn.cluster", "pytest", "_pytest.junitxml")


def preload() -> None:
    import importlib

    # As tests/conftest.py does before anything imports Triton (transformers does, on import): Triton, imported here
    # once for every child, must already be the CPU interpreter the kernel tests run under.
    if os.environ.get("HF_DYNASPEC_TRITON_GPU") != "1":
        os.environ.setdefault("TRITON_INTERPRET", "1")

    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional dependency: the child imports what it needs
            pass


def prepare(mutation: Mutation, tmp: Path) -> Path:
    """A copy of the repository under `tmp` with `mutation` applied; returns the copy's root."""
    copy = tmp / "repo"
    # Only the source and tests: never a virtual environment (CI's .compat-venv-* are GBs) or the big folders. The
    # bytecode caches come along (compiling and assertion-rewriting every module again was ~0.5 s of each child);
    # those of the edited files are deleted, so that the mutated source is compiled whatever its time stamp.
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(".venv", ".compat-venv-*", ".git", "assistants",
                                                              "data", "results", "outputs"))
    for path, old, new in mutation.edits():
        source = copy / path
        source.write_text(source.read_text().replace(old, new))
        for cached in (source.parent / "__pycache__").glob(f"{source.stem}.*.pyc"):
            cached.unlink()
    return copy


def pytest_args(mutation: Mutation, report: Path) -> list[str]:
    selection = ["-k", mutation.select] if mutation.select else []
    # -p mutation_stop: the run ends at the first test failing by an assertion (the mutation is then caught).
    return ["-q", "-p", "no:cacheprovider", "-p", "mutation_stop", "-m", "not real_model", f"--junitxml={report}",
            *selection, *mutation.tests]


def start(mutation: Mutation, tmp: Path, threads: dict) -> int:
    """Fork a child that runs `mutation`'s tests on its copy, its output in tmp/output.txt; returns its pid. The
    child starts from this process's imports (PRELOADED) and imports hf_dynaspec and the tests from the copy."""
    copy = prepare(mutation, tmp)
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        output = os.open(tmp / "output.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.environ.update(threads)
        # Only the plugins named in pytest_args: the installed ones (anyio's, xdist's) cost ~0.5 s to load per child
        # and no mutation's tests use them.
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        os.chdir(copy)
        sys.path[:0] = [str(copy), str(copy / "benchmarks")]
        if threads and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(int(threads["OMP_NUM_THREADS"]))
        import pytest

        code = int(pytest.main(pytest_args(mutation, tmp / "report.xml")))
    except BaseException:  # noqa: BLE001 - the child must never return into the parent's loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def collect(mutation: Mutation, tmp: Path) -> dict:
    """What the child of `mutation` reported: which tests failed, by an assertion or otherwise."""
    report, output = tmp / "report.xml", tmp / "output.txt"
    asserted, crashed = [], []
    for case in ElementTree.parse(report).iter("testcase") if report.exists() else []:
        for problem in [*case.iter("failure"), *case.iter("error")]:
            message = problem.get("message", "")
            name = f"{case.get('classname')}::{case.get('name')}"
            if message.startswith(ASSERTION_MESSAGES):
                asserted.append(name)
            else:
                crashed.append(f"{name} ({message[:80]})")
    lines = output.read_text(errors="replace").strip().splitlines() if output.exists() else []
    return {"mutation": mutation.name, "caught": bool(asserted), "by_assertion": asserted, "crashes": crashed,
            "summary": lines[-1] if lines else "(no output)"}


def run_all(chosen: list[Mutation], jobs: int, threads: dict, report) -> list[dict]:
    """Run every mutation, `jobs` children at a time, forked from this (single-threaded) process after
    `preload()`; `report(result)` is called for each in the list's order."""
    preload()
    # The preloaded heap (torch, transformers) moves to the collector's permanent generation: a child's gc.collect()
    # (pytest runs it at every session's end) then skips it, ~0.4 s a child otherwise.
    gc.collect()
    gc.freeze()
    results: dict[int, dict] = {}
    running: dict[int, tuple[int, tempfile.TemporaryDirectory, float]] = {}  # pid -> (index, its folder, start)
    pending = list(enumerate(chosen))
    reported = 0
    while pending or running:
        while pending and len(running) < max(jobs, 1):
            index, mutation = pending.pop(0)
            folder = tempfile.TemporaryDirectory()
            began = time.perf_counter()
            running[start(mutation, Path(folder.name), threads)] = (index, folder, began)
        pid, _ = os.wait()
        index, folder, began = running.pop(pid)
        results[index] = {**collect(chosen[index], Path(folder.name)), "seconds": round(time.perf_counter() - began, 1)}
        folder.cleanup()
        while reported in results:
            report(results[reported])
            reported += 1
    gc.unfreeze()  # collectable again at exit (Triton's bindings report frozen objects as leaks)
    return [results[i] for i in range(len(chosen))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="run the mutations whose name contains this text")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutations run at a time")
    args = parser.parse_args()
    if args.list:
        print("\n".join(m.name for m in MUTATIONS))
        return
    stale = stale_snippets()
    if stale:
        raise SystemExit("stale mutations (update benchmarks/mutation_check.py):\n  " + "\n  ".join(stale))
    chosen = [m for m in MUTATIONS if not args.only or args.only in m.name]
    here = capabilities_here() if any(m.needs for m in chosen) else set()
    not_here = [m for m in chosen if m.needs is not None and m.needs not in here]
    for mutation in not_here:
        print(f"NOT RUN {mutation.name}: its path needs {HOST_CAPABILITIES[mutation.needs]}, which this host "
              "lacks (its tests skip here; hosts that have it catch it)", flush=True)
    chosen = [m for m in chosen if m not in not_here]
    threads = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"} if args.jobs > 1 else {}

    def report(result: dict) -> None:
        print(f"{'CAUGHT' if result['caught'] else 'MISSED'}  {result['mutation']}: {result['summary']} "
              f"({result['seconds']} s)", flush=True)
        for test in result["by_assertion"]:
            print(f"    assert  {test}")
        for test in result["crashes"]:
            print(f"    crash   {test}")

    results = run_all(chosen, args.jobs, threads, report)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    missed = [r["mutation"] for r in results if not r["caught"]]
    print(f"{len(results) - len(missed)}/{len(results)} mutations caught by an assertion"
          + (f"; {len(not_here)} not run: their paths need what this host lacks" if not_here else ""))
    if missed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
