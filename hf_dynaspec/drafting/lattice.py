"""Lattices: per future position a distribution over tokens, with no causal link between positions.

Medusa heads and diffusion LMs draft this way: position j's distribution does not know which token was picked at
position j - 1, so the per-position argmax is often not a coherent left-to-right path. DiffuSpec's
causal-consistency path search (CPS) picks one: per position keep the candidates covering cumulative probability
`coverage` (DiffuSpec: 0.8), at most `max_candidates` (15), and score left-to-right paths by
`lam * log p_lattice + (1 - lam) * log p_causal`, with a cheap causal scorer (`NgramScorer`, an n-gram model of
the context). `best_paths` runs that search as a beam; `lattice_tree` keeps the best-scored prefix-closed set of
nodes as a draft tree (best first: a node's score never exceeds its parent's, so parents come first);
`tree_from_choices` builds Medusa's static sparse trees (`medusa_choices`: per-position candidate ranks).

Whatever path or tree is chosen, its tokens are a deterministic function of the context, i.e. point-mass
proposals: the tree verifier's recursive rejection keeps greedy output identical and sampling exact
(hf_dynaspec.generation.tree_verify).

`AdaptiveDraftLength` is DiffuSpec's adaptive draft length (ADL): the next round's length from exponentially
smoothed drafted and accepted lengths.

Legend: K lattice positions, M candidates per position, V vocabulary.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict
from dataclasses import dataclass

import torch


@dataclass
class Lattice:
    """Host copy of a lattice: `token_ids[j]` / `log_probs[j]`, position j's candidates best first (target ids,
    log-probabilities under that position's full softmax); `kept[j]` of them cover the coverage (CPS's cut)."""

    token_ids: list[list[int]]
    log_probs: list[list[float]]
    kept: list[int]

    @classmethod
    def from_logits(cls, logits: torch.Tensor, ids: torch.Tensor | None, max_candidates: int = 15,
                    coverage: float = 0.8) -> Lattice:
        """Logits `[K, R]` over R columns (`ids` `[R]` their target ids, None: column = id) -> the lattice of the
        `max_candidates` best per position, read to the host at once (one device read per round)."""
        log_probs = logits.float().log_softmax(dim=-1)
        values, columns = log_probs.topk(min(max_candidates, log_probs.shape[-1]), dim=-1)  # [K, M]
        tokens = columns if ids is None else ids[columns]
        before = values.exp().cumsum(dim=-1) - values.exp()  # mass of the better candidates
        kept = ((before < coverage).sum(dim=-1)).clamp(min=1)
        host = torch.cat([tokens.float(), values, kept[:, None].float()], dim=-1).tolist()  # ids < 2^24
        width = values.shape[-1]
        return cls([[int(t) for t in row[:width]] for row in host], [row[width: 2 * width] for row in host],
                   [int(row[-1]) for row in host])

    def __len__(self) -> int:
        return len(self.token_ids)

    def argmax_path(self, length: int | None = None) -> list[int]:
        """Each position's most likely token, the first `length` positions."""
        return [row[0] for row in self.token_ids[:length]]


class NgramScorer:
    """log p(token | history) of an interpolated n-gram model of the context (absolute counts, each order
    smoothed towards the next lower with weight `strength`, the lowest towards uniform over `vocab_size`): the
    cheap causal scorer of CPS. `extend` adds tokens as they are committed."""

    def __init__(self, vocab_size: int, order: int = 3, strength: float = 1.0):
        if order < 1:
            raise ValueError(f"an n-gram scorer needs order >= 1, got {order}")
        self.vocab_size, self.order, self.strength = vocab_size, order, strength
        self.context: list[int] = []
        self.counts: list[dict[tuple, dict[int, int]]] = [defaultdict(dict) for _ in range(order)]
        self.totals: list[dict[tuple, int]] = [defaultdict(int) for _ in range(order)]

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.context.append(token)
            end = len(self.context) - 1
            for n in range(self.order):  # histories of 0..order-1 tokens before `token`
                if end - n < 0:
                    break
                history = tuple(self.context[end - n : end])
                row = self.counts[n][history]
                row[token] = row.get(token, 0) + 1
                self.totals[n][history] += 1

    def log_prob(self, history: list[int], token: int) -> float:
        """log p(token | the last order-1 tokens of `history`)."""
        p = 1.0 / self.vocab_size
        for n in range(self.order):
            if n > len(history):
                break
            key = tuple(history[len(history) - n :]) if n else ()
            total = self.totals[n].get(key, 0)
            if total:
                p = (self.counts[n][key].get(token, 0) + self.strength * p) / (total + self.strength)
        return math.log(p)


def path_score(lattice_lp: float, causal_lp: float, lam: float) -> float:
    """CPS's score of one step: `lam * log p_lattice + (1 - lam) * log p_causal`."""
    return lam * lattice_lp + (1.0 - lam) * causal_lp


def best_paths(lattice: Lattice, length: int, *, scorer: NgramScorer | None = None, lam: float = 1.0,
               beam: int = 4) -> list[tuple[list[int], float]]:
    """The `beam` best left-to-right paths of `length` positions over each position's kept candidates, best
    first, as (tokens, score). `lam` = 1 (or no scorer) scores by the lattice alone: the argmax path first."""
    beams: list[tuple[float, list[int]]] = [(0.0, [])]
    history = scorer.context if scorer is not None else []
    for j in range(min(length, len(lattice))):
        grown = []
        for score, path in beams:
            for token, lp in zip(lattice.token_ids[j][: lattice.kept[j]], lattice.log_probs[j]):
                causal = scorer.log_prob(history + path, token) if scorer is not None and lam < 1 else 0.0
                grown.append((score + path_score(lp, causal, lam), path + [token]))
        grown.sort(key=lambda item: -item[0])  # stable: ties keep lattice order
        beams = grown[:beam]
    return [(path, score) for score, path in beams]


def lattice_tree(lattice: Lattice, total_tokens: int, max_depth: int, *, top_k: int = 4,
                 scorer: NgramScorer | None = None, lam: float = 1.0) -> tuple[list[int], list[int]]:
    """The `total_tokens` best-scored nodes of the lattice's prefix tree (children of a depth-j node: position
    j's first `top_k` kept candidates), grown best first -> (tokens, parents) of the draft nodes in creation
    order, parents as node indices with 0 the root (draft node i is tree node i + 1). Parents precede
    children: every step's score is a log-probability mix, <= 0, so a node never outscores its parent."""
    depth_limit = min(max_depth, len(lattice))
    tokens: list[int] = []
    parents: list[int] = []
    paths: list[list[int]] = [[]]  # tree node -> its tokens from the root
    history = scorer.context if scorer is not None else []
    ties = itertools.count()  # creation order breaks score ties
    heap: list[tuple[float, int, int, int]] = []  # (-score, tie, parent node, token)

    def push_children(node: int, score: float) -> None:
        depth = len(paths[node])
        if depth >= depth_limit:
            return
        width = min(top_k, lattice.kept[depth])
        for token, lp in zip(lattice.token_ids[depth][:width], lattice.log_probs[depth][:width]):
            causal = scorer.log_prob(history + paths[node], token) if scorer is not None and lam < 1 else 0.0
            heapq.heappush(heap, (-(score + path_score(lp, causal, lam)), next(ties), node, token))

    push_children(0, 0.0)
    while heap and len(tokens) < total_tokens:
        negative, _, parent, token = heapq.heappop(heap)
        tokens.append(token)
        parents.append(parent)
        paths.append(paths[parent] + [token])
        push_children(len(paths) - 1, -negative)
    return tokens, parents


def tree_from_choices(lattice: Lattice, choices: list[tuple[int, ...]], max_depth: int) -> tuple[list[int], list[int]]:
    """Medusa's static sparse tree: each choice `(r_0, ..., r_j)` is the node taking position j's r_j-th
    candidate under the node of `(r_0, ..., r_{j-1})` -> (tokens, parents) as `lattice_tree` returns them.
    Choices are sorted by depth, then order; one whose prefix is missing, or deeper than `max_depth` or the
    lattice, is dropped."""
    node_of: dict[tuple[int, ...], int] = {(): 0}
    tokens, parents = [], []
    for choice in sorted({tuple(c) for c in choices}, key=lambda c: (len(c), c)):
        depth = len(choice)
        if not depth or depth > min(max_depth, len(lattice)) or choice[:-1] not in node_of:
            continue
        rank = choice[-1]
        if rank >= len(lattice.token_ids[depth - 1]):
            continue
        tokens.append(lattice.token_ids[depth - 1][rank])
        parents.append(node_of[choice[:-1]])
        node_of[choice] = len(tokens)
    return tokens, parents


class AdaptiveDraftLength:
    """DiffuSpec's ADL: after each round, `accepted` and `drafted` are smoothed with factor `rho`
    (`s <- rho * s + (1 - rho) * x`); the next length is the smoothed accepted length plus `delta`, never past
    the smoothed drafted length plus `delta` (both rounded half up), within `k_min..k_max`. Drafts accepted whole grow the next one by
    `delta`; drafts rejected early shrink it."""

    def __init__(self, k_min: int = 1, k_max: int = 8, rho: float = 0.5, delta: int = 1, start: int | None = None):
        if not 1 <= k_min <= k_max or not 0.0 <= rho < 1.0 or delta < 0:
            raise ValueError(f"ADL needs 1 <= k_min <= k_max, 0 <= rho < 1, delta >= 0; got k_min={k_min}, "
                             f"k_max={k_max}, rho={rho}, delta={delta}")
        self.k_min, self.k_max, self.rho, self.delta = k_min, k_max, rho, delta
        first = k_max if start is None else start
        self.accepted_ema = float(first)
        self.drafted_ema = float(first)

    @property
    def length(self) -> int:
        wanted = min(math.floor(self.accepted_ema + 0.5), math.floor(self.drafted_ema + 0.5)) + self.delta  # half up
        return max(self.k_min, min(self.k_max, wanted))

    def record(self, drafted: int, accepted: int) -> None:
        self.accepted_ema = self.rho * self.accepted_ema + (1 - self.rho) * accepted
        self.drafted_ema = self.rho * self.drafted_ema + (1 - self.rho) * drafted
