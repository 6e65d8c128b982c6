"""Drafting from a lattice (Medusa heads, a diffusion LM): a chain, a lattice path (CPS), a tree picked from the
lattice, or a static tree.

Each round the source scores K positions past the root (the last committed token) at once: that is the lattice.
Medusa heads read the target's last hidden state at the newest verified position (the one whose LM-head row gave
the root); a diffusion LM reads the context and K mask tokens. What the round sends to the verifier
(`MedusaGenerationConfig.lattice_draft`: the heads' config, or a call's checked copy with its keyword arguments):

- `"chain"`: each head's argmax (Medusa-1's top-1 proposal), on the device, no host read;
- `"cps"`: the best path of DiffuSpec's causal-consistency path search (lattice and n-gram scores mixed by
  `cps_lambda`), a chain;
- `"tree"`: the `tree_total_tokens` best nodes of the lattice's prefix tree (`cps_lambda` mixes the n-gram score
  in here too; 1.0 scores by the lattice alone), verified as one tree;
- `"choices"`: Medusa's static sparse tree from `medusa_choices`;
- `"auto"`: planned from measured costs and learnt acceptance (hf_dynaspec.drafting.planning.lattice_planner): each round
  the chain length, lattice-tree depth, prompt-lookup draft (with `prompt_lookup_num_tokens`) or no draft with the
  best expected tokens per second.

With `adaptive_length` the depth of the next round follows DiffuSpec's ADL. Every option drafts tokens that are a
function of the context only: greedy output is identical to plain generate() and sampling exact
(tests/test_medusa.py enumerates it).

Legend: K heads, L sequence length, D target hidden.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from hf_dynaspec.drafting.contract import NO_PLAN, Draft, DraftTree, depths_of
from hf_dynaspec.drafting.lattice import (
    AdaptiveDraftLength,
    Lattice,
    NgramScorer,
    best_paths,
    lattice_tree,
    tree_from_choices,
)
from hf_dynaspec.drafting.lookup import LookupSources, as_ids
from hf_dynaspec.drafting.planning.core import RoundPlan
from hf_dynaspec.drafting.planning.lattice_planner import LatticePlanner
from hf_dynaspec.drafting.planning.planner import share_costs
from hf_dynaspec.modeling.medusa_options import MedusaGenerationConfig


class LatticeRound:
    """A lattice source's rounds (a `DraftingRound`, hf_dynaspec.drafting.contract, as `EagleRound` is an EAGLE
    drafter's): Medusa heads
    (`MedusaAssistant`) or a diffusion LM (hf_dynaspec.drafting.diffusion.DiffusionDrafter). A source has
    `num_positions` (K), `lattice_logits(input_ids, target_hidden, depth, shortlist)` -> (logits
    `[depth, R]`, target ids of the R columns `[R]` or None) and the `TargetFeatures` methods."""

    def __init__(self, source, options: MedusaGenerationConfig, stats, vocab_size: int, planner: LatticePlanner | None = None):
        if (options.lattice_kind == "auto") != (planner is not None):
            raise ValueError("draft='auto' drafts through a LatticePlanner, and only it does")
        self.source, self.options, self.stats, self.planner = source, options, stats, planner
        self.kind, self.shortlisted = options.lattice_kind, options.shortlisted  # read once per call
        positions = source.num_positions
        self.depth = positions if options.num_assistant_tokens is None else min(options.num_assistant_tokens, positions)
        self.adl = (AdaptiveDraftLength(k_min=1, k_max=max(self.depth, 1), rho=options.adl_rho,
                                        delta=options.adl_delta) if options.draft_plan == "adl" else None)
        self.scorer = NgramScorer(vocab_size, order=options.ngram_order) if options.uses_context else None
        # Prompt lookup competes in planned rounds; the host copy of the context is kept for it or the n-gram scorer.
        self.sources = LookupSources(options.prompt_lookup_num_tokens if planner is not None else 0,
                                     keep_context=self.scorer is not None)

    # -- the contract: features, propose, learn, share_costs, finish ------------------------------------------
    def hidden_state_selection(self):
        return self.source.hidden_state_selection()

    def select_target_hidden(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return self.source.select_target_hidden(hidden_states)

    def propose(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, room: int) -> Draft:
        """The round's draft continuing `input_ids` `[1, L]` (its last token is the root), from the target's last
        hidden states `[1, T, D]` (row -1: the position that predicted the root); at most `room` deep. Always a
        tree (a chain is one branch); `Draft.plan` is a planned round's plan (else `NO_PLAN`)."""
        self._read_context(input_ids)
        if self.planner is not None:
            tree, plan = self._planned(input_ids, target_hidden, room)
        else:
            tree, plan = self._unplanned(input_ids, target_hidden, room), NO_PLAN
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree, plan=plan)

    def _unplanned(self, input_ids: torch.Tensor, target_hidden: torch.Tensor, max_depth: int) -> DraftTree:
        """The options' draft (chain, CPS path, lattice tree or static choices), at most `max_depth` deep."""
        depth = min(self.depth, max_depth, self.adl.length if self.adl is not None else self.depth)
        root = input_ids[0, -1:]
        if depth < 1:
            return _chain(root, root.new_empty(0))
        options = self.options
        logits, ids = self.source.lattice_logits(input_ids, target_hidden, depth, self.shortlisted)
        if self.kind == "chain":  # on the device: no read
            columns = logits.argmax(dim=-1)
            tokens = columns if ids is None else ids[columns]
            return _chain(root, tokens.to(root.dtype))
        lattice = Lattice.from_logits(logits, ids, options.max_candidates, options.coverage)
        if self.kind == "cps":
            path, _ = best_paths(lattice, depth, scorer=self.scorer, lam=options.cps_lambda,
                                 beam=options.cps_beam)[0]
            tokens, parents = path, list(range(len(path)))
        elif self.kind == "tree":
            tokens, parents = lattice_tree(lattice, options.tree_total_tokens, depth, top_k=options.tree_top_k,
                                           scorer=self.scorer, lam=options.cps_lambda)
        else:
            tokens, parents = tree_from_choices(lattice, options.medusa_choices, depth)
        return _tree(root, tokens, parents)

    def _planned(self, input_ids: torch.Tensor, target_hidden: torch.Tensor,
                 max_depth: int) -> tuple[DraftTree, RoundPlan]:
        """A `draft="auto"` round: the planner decides whether to score the lattice at all, then (the lattice read:
        one device read) which chain length, tree depth, lookup draft or nothing to send."""
        root = input_ids[0, -1:]
        room = min(self.depth, max_depth)
        candidates, drafts = self.sources.offers(min(self.options.prompt_lookup_num_tokens, room))
        lookup = candidates[0] if candidates else None
        plan = self.planner.plan_round(lookup, room)
        lattice = None
        if plan.source in ("lattice", "chain", "tree"):
            logits, ids = self.source.lattice_logits(input_ids, target_hidden, plan.num_tokens, self.shortlisted)
            lattice = Lattice.from_logits(logits, ids, self.options.max_candidates, self.options.coverage)
            confidences = tuple(math.exp(row[0]) for row in lattice.log_probs)
            if plan.probe:
                plan = replace(plan, confidences=confidences)
            else:
                plan = self.planner.choose(confidences, lookup, room)
        if plan.source == "chain":
            return _chain(root, as_ids(lattice.argmax_path(plan.num_tokens), root)), plan
        if plan.source == "tree":
            nodes = self.planner.tree.nodes(plan.num_tokens)
            tokens, parents = lattice_tree(lattice, nodes, plan.num_tokens, top_k=self.options.tree_top_k,
                                           scorer=self.scorer, lam=self.options.cps_lambda)
            return _tree(root, tokens, parents), plan
        if plan.source == "prompt-lookup":
            plan, copy = self.sources.take(plan, drafts["prompt-lookup"])
            return _chain(root, as_ids(copy, root)), plan
        return _chain(root, root.new_empty(0)), plan

    def share_costs(self, rows: int) -> None:
        """In a batch of `rows` active rows: price rounds as this row's share of the batch's verify forward."""
        share_costs(self.planner, rows)

    def finish(self) -> None:
        """Nothing is kept past a lattice row (its tables live in the shared planner)."""

    def learn(self, draft: Draft, committed_ids: torch.Tensor, num_accepted: int,
              accepted_nodes: list[int] | None = None) -> None:
        """`draft`'s outcome (the contract's `learn`): statistics, ADL, the planner's tables."""
        self._read_context(committed_ids)
        plan, tree = draft.plan, draft.tree
        source = plan.source if plan.source == "prompt-lookup" else self.source.source_name
        self.stats.record(len(tree) - 1, num_accepted, source=source)
        if self.adl is not None:
            self.adl.record(int(tree.max_depth or 0), num_accepted)
        if self.planner is not None:
            # A tree round also tells what the argmax chain inside it would have done (its first children).
            outcome = (tree.greedy_chain_outcome(accepted_nodes)
                       if plan.source == "tree" and accepted_nodes is not None else None)
            self.planner.record(plan, len(tree) - 1, num_accepted, chain_outcome=outcome)
            self.sources.learn(self.planner, plan, len(tree) - 1, num_accepted)

    def _read_context(self, input_ids: torch.Tensor) -> None:
        """The n-gram scorer and prompt lookup read the tokens committed since the last read (one read of a few
        ids)."""
        new = self.sources.read(input_ids)
        if self.scorer is not None and new:
            self.scorer.extend(new)

def _chain(root: torch.Tensor, tokens: torch.Tensor) -> DraftTree:
    """The root `[1]` and K tokens `[K]` as a tree of one branch, built on their device from host sizes only."""
    positions = torch.arange(tokens.shape[0] + 1, device=tokens.device)
    return DraftTree(torch.cat([root, tokens]), parents=positions - 1, depths=positions, max_depth=tokens.shape[0])


def _tree(root: torch.Tensor, tokens: list[int], parents: list[int]) -> DraftTree:
    """The root `[1]` and draft nodes `tokens` (host ids) whose parents are `parents` (0 = the root; node i + 1 is
    draft i): the tree chosen on the host, uploaded in one copy (tokens, parents, depths together: each upload is
    a stream sync on CUDA)."""
    parents = [-1] + list(parents)
    depths = depths_of(parents)
    n = len(tokens)
    values = torch.tensor([*tokens, *parents, *depths], dtype=torch.long).to(root.device)
    token_ids = torch.cat([root, values[:n].to(root.dtype)])
    return DraftTree(token_ids, values[n : 2 * n + 1], values[2 * n + 1 :], max(depths))
