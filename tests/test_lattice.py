"""Lattices (hf_dynaspec.drafting.lattice): the coverage cut, CPS's path search against brute force, the lattice
tree against the best prefix-closed set, static Medusa trees, the n-gram scorer's normalisation, and ADL."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from hf_dynaspec.drafting.lattice import (
    AdaptiveDraftLength,
    Lattice,
    NgramScorer,
    best_paths,
    lattice_tree,
    path_score,
    tree_from_choices,
)


def random_lattice(seed: int, positions: int = 4, vocab: int = 9, max_candidates: int = 5,
                   coverage: float = 0.9) -> Lattice:
    logits = 2.5 * torch.randn(positions, vocab, generator=torch.Generator().manual_seed(seed))
    return Lattice.from_logits(logits, None, max_candidates=max_candidates, coverage=coverage)


def test_the_coverage_cut_keeps_the_fewest_candidates_that_cover_it():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.9, 0.05, 0.03, 0.02], [0.25, 0.25, 0.25, 0.25]]))
    lattice = Lattice.from_logits(logits, None, max_candidates=4, coverage=0.8)
    assert lattice.kept == [2, 1, 4]
    assert lattice.token_ids[0] == [0, 1, 2, 3]
    assert math.isclose(lattice.log_probs[1][0], math.log(0.9), rel_tol=1e-5)
    shortlisted = Lattice.from_logits(logits[:, :3], torch.tensor([7, 3, 11]), max_candidates=2, coverage=0.8)
    assert shortlisted.token_ids[0] == [7, 3] and shortlisted.kept[1] == 1


def brute_force_best(lattice: Lattice, length: int, scorer, lam: float) -> float:
    best = -math.inf
    choices = [list(zip(lattice.token_ids[j][: lattice.kept[j]], lattice.log_probs[j])) for j in range(length)]
    for path in itertools.product(*choices):
        score, tokens = 0.0, []
        for token, lp in path:
            causal = scorer.log_prob(scorer.context + tokens, token) if scorer is not None else 0.0
            score += path_score(lp, causal, lam)
            tokens.append(token)
        best = max(best, score)
    return best


@pytest.mark.parametrize("seed", range(5))
def test_path_search_with_a_full_beam_finds_the_best_path(seed):
    lattice = random_lattice(seed)
    scorer = NgramScorer(vocab_size=9, order=3)
    scorer.extend(torch.randint(0, 9, (40,), generator=torch.Generator().manual_seed(seed)).tolist())
    for lam in (1.0, 0.5, 0.0):
        paths = best_paths(lattice, 3, scorer=scorer, lam=lam, beam=10_000)
        assert math.isclose(paths[0][1], brute_force_best(lattice, 3, scorer, lam), rel_tol=1e-9, abs_tol=1e-9)
        assert [s for _, s in paths] == sorted((s for _, s in paths), reverse=True)
    assert best_paths(lattice, 4, lam=1.0, beam=1)[0][0] == lattice.argmax_path()


def test_the_causal_score_moves_the_path_to_what_the_context_continues():
    """Position 1 is unsure between 4 and 6; the context always followed 3 by 6: CPS takes 3 6, argmax 3 4."""
    logits = torch.full((2, 8), -9.0)
    logits[0, 3] = 5.0
    logits[1, 4], logits[1, 6] = 2.2, 2.0
    lattice = Lattice.from_logits(logits, None, max_candidates=4, coverage=0.95)
    scorer = NgramScorer(vocab_size=8, order=2)
    scorer.extend([1, 3, 6, 2, 3, 6, 5, 3, 6])
    assert best_paths(lattice, 2, scorer=scorer, lam=1.0)[0][0] == [3, 4]
    assert best_paths(lattice, 2, scorer=scorer, lam=0.5)[0][0] == [3, 6]


def test_the_ngram_scorer_is_a_distribution():
    scorer = NgramScorer(vocab_size=7, order=3, strength=0.7)
    scorer.extend([0, 1, 2, 0, 1, 3, 0, 1, 2, 6])
    for history in ([], [0], [0, 1], [5, 5], [6]):
        total = sum(math.exp(scorer.log_prob(history, token)) for token in range(7))
        assert math.isclose(total, 1.0, rel_tol=1e-9), history
    assert scorer.log_prob([0, 1], 2) > scorer.log_prob([0, 1], 3) > scorer.log_prob([0, 1], 4)


def brute_force_ngram(context: list[int], vocab: int, order: int, strength: float, history: list[int],
                      token: int) -> float:
    """The interpolated n-gram probability counted straight from `context`: for n = 0..order-1, the newest n
    tokens of `history` as the key, every position of `context` preceded by that key counted."""
    p = 1.0 / vocab
    for n in range(min(order, len(history) + 1)):
        key = history[len(history) - n :]
        follows = [context[i] for i in range(n, len(context)) if context[i - n : i] == key]
        if follows:
            p = (follows.count(token) + strength * p) / (len(follows) + strength)
    return math.log(p)


@pytest.mark.parametrize("seed", range(4))
def test_the_ngram_scorer_counts_the_newest_tokens_of_each_history(seed):
    """Against a brute-force count, on histories whose oldest and newest tokens differ (a scorer keyed by the
    wrong end of the history agrees only where both ends do)."""
    generator = torch.Generator().manual_seed(seed)
    context = torch.randint(0, 5, (60,), generator=generator).tolist()
    scorer = NgramScorer(vocab_size=5, order=3, strength=0.6)
    scorer.extend(context[:30])
    scorer.extend(context[30:])  # counted as they are committed, in two steps
    differing = 0
    for _ in range(40):
        history = torch.randint(0, 5, (int(torch.randint(1, 6, (1,), generator=generator)),),
                                generator=generator).tolist()
        differing += history[:2] != history[-2:]
        for token in range(5):
            expected = brute_force_ngram(context, 5, 3, 0.6, history, token)
            assert math.isclose(scorer.log_prob(history, token), expected, rel_tol=1e-9), (history, token)
    assert differing >= 20  # the case that separates the two ends happened


@pytest.mark.parametrize("seed", range(5))
def test_the_lattice_tree_is_the_best_prefix_closed_set(seed):
    """Brute force: every node's path score; the tree holds the `total` best among nodes whose parent is in."""
    lattice = random_lattice(seed, positions=3, max_candidates=4, coverage=0.99)
    top_k, total = 3, 7
    tokens, parents = lattice_tree(lattice, total, max_depth=3, top_k=top_k)
    assert len(tokens) == total
    paths: list[tuple[int, ...]] = [()]
    scores = [0.0]
    for token, parent in zip(tokens, parents):
        assert parent < len(paths)  # parents precede children
        depth = len(paths[parent])
        rank = lattice.token_ids[depth].index(token)
        assert rank < top_k
        paths.append(paths[parent] + (token,))
        scores.append(scores[parent] + lattice.log_probs[depth][rank])
    assert len(set(paths)) == len(paths)
    every = {}
    for depth in range(1, 4):
        for ranks in itertools.product(range(min(top_k, lattice.kept[0])), repeat=depth):
            if any(r >= min(top_k, lattice.kept[j]) for j, r in enumerate(ranks)):
                continue
            every[tuple(lattice.token_ids[j][r] for j, r in enumerate(ranks))] = sum(
                lattice.log_probs[j][r] for j, r in enumerate(ranks))
    best = sorted(every.values(), reverse=True)[:total]
    assert sorted(scores[1:], reverse=True) == pytest.approx(best)


def test_static_choices_build_medusas_sparse_tree():
    lattice = random_lattice(0, positions=3)
    tokens, parents = tree_from_choices(lattice, [(1, 0), (0,), (1,), (0, 2), (3, 1), (0, 0, 0), (0, 0)], max_depth=3)
    ids = lattice.token_ids
    assert tokens == [ids[0][0], ids[0][1], ids[1][0], ids[1][2], ids[1][0], ids[2][0]]
    assert parents == [0, 0, 1, 1, 2, 3]  # (3, 1) has no (3,): dropped
    assert tree_from_choices(lattice, [(0,), (0, 0), (0, 0, 0)], max_depth=2)[1] == [0, 1]


def test_adaptive_length_grows_on_full_acceptance_and_shrinks_on_rejection():
    adl = AdaptiveDraftLength(k_min=1, k_max=6, rho=0.5, delta=1, start=2)
    assert adl.length == 3
    for _ in range(6):
        adl.record(adl.length, adl.length)
    assert adl.length == 6
    lengths = []
    for _ in range(6):
        adl.record(adl.length, 0)
        lengths.append(adl.length)
    assert lengths == sorted(lengths, reverse=True) and lengths[-1] == 1
    with pytest.raises(ValueError, match="k_min"):
        AdaptiveDraftLength(k_min=3, k_max=2)
