"""A lattice source's proposers (Medusa heads, a diffusion LM): each round the source scores K positions past the
root (the last committed token) at once, and the round sends a chain, a lattice path (CPS), a tree picked from the
lattice, or a static tree.

Medusa heads read the target's last hidden state at the newest verified position (the one whose LM-head row gave
the root); a diffusion LM reads the context and K mask tokens. What a round drafts
(`MedusaGenerationConfig.lattice_draft`: the heads' config, or a call's checked copy with its keyword arguments):

- `"chain"`: each head's argmax (Medusa-1's top-1 proposal), on the device, no host read;
- `"cps"`: the best path of DiffuSpec's causal-consistency path search (lattice and n-gram scores mixed by
  `cps_lambda`), a chain;
- `"tree"`: the `tree_total_tokens` best nodes of the lattice's prefix tree (`cps_lambda` mixes the n-gram score
  in here too; 1.0 scores by the lattice alone), verified as one tree;
- `"choices"`: Medusa's static sparse tree from `medusa_choices`;
  these four are `LatticeDraft`, in a fixed order (with `adaptive_length`, DiffuSpec's ADL sets the next depth);
- `"auto"`: planned (`LatticeChain`, `LatticeTree`, priced by the one planner,
  hf_dynaspec.drafting.planning.planner). Reading the lattice costs its scores for every position at once
  (`lattice_seconds`), so a round is chosen in two phases: before the read, the chain's and the tree's offers are
  priced by position (their read's cost included) against a copy and no draft, and the lattice is read only if it
  pays; once read, its cost is sunk, and each chain length (priced by acceptance by position and confidence, the
  head's top probability there), tree depth (node count from `TreeShape`, tokens from the tree-depth table) and the
  copy are compared again.

Every option drafts tokens that are a function of the context only: greedy output is identical to plain generate()
and sampling exact (tests/test_medusa.py and tests/test_medusa_auto.py enumerate it).

Legend: K heads, L sequence length, D target hidden.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial

import torch

from hf_dynaspec.drafting.contract import Draft, DraftTree, RoundContext, chain_tree, host_tree
from hf_dynaspec.drafting.lattice import Lattice, NgramScorer, best_paths, lattice_tree, tree_from_choices
from hf_dynaspec.drafting.lookup import as_ids
from hf_dynaspec.drafting.planning.core import Offer, PlannerMemory, RoundPlan, TreeShape, confidence_bin, position_key
from hf_dynaspec.drafting.planning.planner import record_reached
from hf_dynaspec.modeling.acceptance_prior import AcceptancePrior


def lattice_memory(prior: AcceptancePrior | None = None) -> PlannerMemory:
    """A lattice source's tables (`prior`: its measured acceptance, stored with the heads): confidence is keyed
    (position, bin), since a head's top probability means more or less at each position."""
    return PlannerMemory(prior, confidence_bin_at=1)


class LatticeReader:
    """One row's lattice: `source` (a Medusa assistant or a diffusion drafter: `num_positions`,
    `lattice_logits(input_ids, target_hidden, depth, shortlist)` -> (logits `[depth, R]`, target ids of the R
    columns `[R]` or None), `source_name`), read at most `depth` positions deep with `options`; `scorer`: the
    n-gram scorer of CPS paths and trees (None: the lattice alone)."""

    def __init__(self, source, options, depth: int, scorer: NgramScorer | None):
        self.source, self.options, self.depth, self.scorer = source, options, depth, scorer

    def logits(self, context: RoundContext, depth: int):
        return self.source.lattice_logits(context.input_ids, context.hidden, depth, self.options.shortlisted)

    def read(self, context: RoundContext, depth: int) -> Lattice:
        logits, ids = self.logits(context, depth)
        return Lattice.from_logits(logits, ids, self.options.max_candidates, self.options.coverage)

    def tree(self, root: torch.Tensor, lattice: Lattice, total_tokens: int, depth: int) -> DraftTree:
        options = self.options
        tokens, parents = lattice_tree(lattice, total_tokens, depth, top_k=options.tree_top_k, scorer=self.scorer,
                                       lam=options.cps_lambda)
        return host_tree(root, tokens, parents)


class LatticeDraft:
    """The options' fixed kind of lattice draft (chain, CPS path, lattice tree or static choices), `plan.num_tokens`
    deep."""

    reads_features = True

    def __init__(self, reader: LatticeReader, kind: str):
        self.reader, self.kind = reader, kind

    def offer(self, context: RoundContext) -> list[Offer]:
        return [Offer(self, self.reader.source.source_name, self.reader.depth)]

    def absorb(self, context: RoundContext) -> None:
        """Nothing: a lattice reads the newest features only."""

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        reader, options, depth = self.reader, self.reader.options, plan.num_tokens
        root = context.input_ids[0, -1:]
        if self.kind == "chain":  # on the device: no read
            logits, ids = reader.logits(context, depth)
            columns = logits.argmax(dim=-1)
            tree = chain_tree(root, (columns if ids is None else ids[columns]).to(root.dtype))
        elif self.kind == "tree":
            tree = reader.tree(root, reader.read(context, depth), options.tree_total_tokens, depth)
        elif self.kind == "cps":
            path, _ = best_paths(reader.read(context, depth), depth, scorer=reader.scorer, lam=options.cps_lambda,
                                 beam=options.cps_beam)[0]
            tree = host_tree(root, path, list(range(len(path))))
        else:
            tree = host_tree(root, *tree_from_choices(reader.read(context, depth), options.medusa_choices, depth))
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree, plan=plan)


class LatticeChain:
    """A planned lattice round's chain: the lattice's argmax path. Before the read (`offer.read` None) it is priced
    by position with the read's cost; read, by position and confidence, the read paid."""

    reads_features = True
    smallest = 1

    def __init__(self, reader: LatticeReader):
        self.reader = reader
        self.kinds: list = [self]  # the planned kinds a read is offered to again (LatticeTree adds itself)

    def offer(self, context: RoundContext) -> list[Offer]:
        return [Offer(self, self.reader.source.source_name, self.reader.depth)]

    def absorb(self, context: RoundContext) -> None:
        """Nothing: a lattice reads the newest features only."""

    def draft(self, context: RoundContext, plan: RoundPlan, policy) -> Draft:
        """Read: draft the plan. Not read yet: read the lattice as deep as it goes (one device read), then draft the
        kind and length the planner now picks, the read paid, or a copy or nothing (a probe: this kind, its
        length)."""
        if plan.offer.read is not None:
            return self._drafted(context, plan)
        lattice = self.reader.read(context, min(self.reader.depth, context.room))
        confidences = tuple(math.exp(row[0]) for row in lattice.log_probs)
        offers = [Offer(kind, plan.offer.source, len(confidences), confidences=confidences, read=lattice)
                  for kind in self.kinds]
        if plan.probe:
            mine = next(offer for offer in offers if offer.proposer is plan.proposer)
            return plan.proposer._drafted(context, replace(plan, offer=mine, confidences=confidences))
        chosen = replace(policy.best(offers + list(plan.copies), context.room), copies=plan.copies)
        if chosen.offer is None:
            return Draft(token_ids=context.input_ids.new_empty((1, 0)), logits=None, plan=chosen)
        return chosen.proposer.draft(context, replace(chosen, confidences=chosen.offer.confidences), policy)

    def _drafted(self, context: RoundContext, plan: RoundPlan) -> Draft:
        root = context.input_ids[0, -1:]
        tree = chain_tree(root, as_ids(plan.offer.read.argmax_path(plan.num_tokens), root))
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree, plan=plan)

    # -- pricing and learning (hf_dynaspec.drafting.planning.planner) -------------------------------------------
    @staticmethod
    def table(planner, offer: Offer):
        """Not read yet: by position; read, by position and the confidence read there."""
        return planner.memory.position if offer.read is None else planner.memory.confidence

    @staticmethod
    def key(offer: Offer, position: int):
        if offer.read is None:
            return position_key(position)
        return position_key(position), confidence_bin(offer.confidences[position - 1])

    @staticmethod
    def seconds(planner, offer: Offer, k: int) -> float:
        return (0.0 if offer.read is not None else planner.costs.lattice_seconds) + planner.verify(k + 1)

    @staticmethod
    def record(planner, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None,
               accepted_nodes=None) -> None:
        record_chain(planner.memory, plan.confidences, num_accepted, min(num_accepted + 1, num_drafted))


class LatticeTree(LatticeChain):
    """A planned lattice round's tree of `shape`'s node count at each depth, picked from the lattice's prefix
    tree; priced by the tree-depth table, with the host search's cost (and, not read yet, the read's)."""

    def __init__(self, reader: LatticeReader, chain: LatticeChain, shape: TreeShape):
        self.reader, self.shape = reader, shape
        chain.kinds.append(self)
        self.kinds = chain.kinds

    def _drafted(self, context: RoundContext, plan: RoundPlan) -> Draft:
        depth = plan.num_tokens
        tree = self.reader.tree(context.input_ids[0, -1:], plan.offer.read, self.shape.nodes(depth), depth)
        return Draft(token_ids=tree.token_ids[None, 1:], logits=None, tree=tree, plan=plan)

    @staticmethod
    def table(planner, offer: Offer):
        return planner.memory.tree_depth

    def key(self, offer: Offer, depth: int):
        return self.shape.top_k, self.shape.total_tokens, position_key(depth)

    def seconds(self, planner, offer: Offer, depth: int) -> float:
        costs = planner.costs
        sunk = 0.0 if offer.read is not None else costs.lattice_seconds
        return sunk + costs.tree_seconds + planner.verify(self.shape.nodes(depth) + 1)

    def record(self, planner, plan: RoundPlan, num_drafted: int, num_accepted: int, draft=None,
               accepted_nodes=None) -> None:
        """Depths 1..min(accepted + 1, the plan's depth) were reached; the chain's tables learn what the argmax
        chain inside the tree did (its first children)."""
        reached = min(num_accepted + 1, plan.num_tokens)
        record_reached(planner.memory.tree_depth, partial(self.key, plan.offer), reached, num_accepted)
        if draft is not None and accepted_nodes is not None:
            record_chain(planner.memory, plan.confidences, *draft.tree.greedy_chain_outcome(accepted_nodes))


def record_chain(memory, confidences, num_accepted: int, num_reached: int) -> None:
    """A lattice chain's positions 1..num_reached (those with a confidence) were reached, the first num_accepted
    accepted: the position table and the (position, confidence bin) table learn them."""
    for j, confidence in enumerate(confidences[:num_reached], start=1):
        memory.position.record(position_key(j), j <= num_accepted)
        memory.confidence.record((position_key(j), confidence_bin(confidence)), j <= num_accepted)
