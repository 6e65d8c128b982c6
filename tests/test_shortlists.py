"""Vocabulary shortlists: clustering, budget, router, static lists, and exactness through every strategy."""

from __future__ import annotations

import pytest
import torch
from conftest import VOCAB, assisted_generate, imitating_assistant, one_layer_target, plain_generate, tiny_target

from hf_dynaspec import ArtifactError, DynaSpecAssistant
from hf_dynaspec.drafting.runtime import runtime_head
from hf_dynaspec.drafting.selector import (
    ClusterHead,
    ClusterRowTable,
    RowBudget,
    block_ranges,
    clusters_at_position,
    row_budget,
    row_places,
)
from hf_dynaspec.modeling.shortlist import balanced_cluster_size, cluster_vocabulary, load_token_list
from hf_dynaspec.modeling.shortlist.clustering import capped_assignment
from hf_dynaspec.modeling.shortlist.frequency import export_d2t_t2d, export_token_map, ranking_from_counts
from hf_dynaspec.modeling.shortlist.router import ClusterRouter

ALWAYS = [0, 1]  # stand-ins for EOS / special tokens
STRATEGIES = ["full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed"]


def add_shortlists(assistant, target, num_clusters=8, seed=0):
    """Frequency lists and clusters with a random (untrained) router, as the recipes would build them."""
    generator = torch.Generator().manual_seed(seed)
    head = target.get_output_embeddings().weight.detach().cpu()  # scikit-learn clusters on the CPU
    assistant.shortlists.set_frequency_list(torch.randperm(VOCAB, generator=generator)[:60], kind="frspec")
    assistant.shortlists.set_frequency_list(torch.randperm(VOCAB, generator=generator)[:40], kind="vocabtrim")
    assistant.shortlists.set_clusters(cluster_vocabulary(head, num_clusters, always_ids=ALWAYS, seed=seed))
    assistant.generation_config.max_clusters, assistant.generation_config.fixed_clusters = 4, 2
    assistant.to(target.dtype)
    return assistant


def test_clustering_is_a_reproducible_partition():
    head = tiny_target("llama").get_output_embeddings().weight.detach()
    clusters = cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=3)
    clusters.validate(VOCAB)
    assert sorted(torch.cat([clusters.token_order, clusters.always_ids]).tolist()) == list(range(VOCAB))
    again = cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=3)
    assert torch.equal(clusters.token_order, again.token_order) and torch.equal(clusters.offsets, again.offsets)
    labels = clusters.cluster_of_token(VOCAB)
    assert (labels[ALWAYS] == -1).all() and labels.max() == clusters.num_clusters - 1
    # Clusters are coherent: rows are closer (cosine) to their own cluster's mean direction than to others'.
    rows = torch.nn.functional.normalize(head, dim=-1)
    means = torch.stack([rows[labels == c].mean(0) for c in range(clusters.num_clusters)])
    kept = labels >= 0
    assert ((rows[kept] @ means.T).argmax(-1) == labels[kept]).float().mean() > 0.9
    with pytest.raises(ValueError, match="another target"):
        clusters.validate(VOCAB + 1)


def test_row_places_agree_with_the_row_ids_the_rule_scores():
    target = tiny_target("qwen2")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target), target)
    clusters = assistant.shortlists.host_clusters().frequency_ordered(torch.randperm(VOCAB)[:50])
    table = ClusterRowTable(clusters, torch.device("cpu"))
    generator = torch.Generator().manual_seed(5)
    scores = torch.randn(40, clusters.num_clusters, generator=generator)
    scores[0, 1] = scores[0, 2]  # a tie, broken by cluster index as the head breaks it
    tokens = torch.randint(len(ALWAYS), VOCAB, (40,), generator=generator)  # ALWAYS is [0, 1]
    tokens[:2] = torch.tensor(ALWAYS)
    places = row_places(scores, tokens, clusters)
    assert (places[:2] == -1).all() and (places[2:] >= 0).all()
    for rows in (1, 7, 30, VOCAB - len(ALWAYS)):
        for example in range(40):
            ids = table.row_ids(ClusterHead.ranking(scores[example : example + 1]), rows)
            assert (tokens[example] in ids.tolist()) == (places[example] < rows), (rows, example)


def unit_rows(count, dim, seed):
    return torch.nn.functional.normalize(torch.randn(count, dim, generator=torch.Generator().manual_seed(seed)), dim=-1)


@pytest.mark.parametrize("seed", range(4))
def test_capped_assignment_never_passes_over_a_cluster_with_room(seed):
    rows, centroids = unit_rows(203, 6, seed), unit_rows(9, 6, seed + 100)
    capacity = balanced_cluster_size(203, 9)  # 23: 207 places for 203 rows, so most clusters end full
    labels = capped_assignment(rows, centroids, capacity)
    sizes = torch.bincount(labels, minlength=9)
    assert (labels >= 0).all() and sizes.sum() == 203 and sizes.max() <= capacity
    # The argmax alone overfills some cluster here, so the cap did change the assignment.
    assert torch.bincount((rows @ centroids.T).argmax(-1), minlength=9).max() > capacity
    # Every row sits in its most similar cluster among those that still had room: any cluster it prefers is full.
    similarity = rows @ centroids.T
    preferred = similarity > similarity.gather(1, labels[:, None])
    assert (~preferred | (sizes == capacity)[None, :]).all()


def test_a_full_cluster_keeps_its_most_similar_rows():
    # Three rows all nearest cluster 0, listed least similar first; cluster 0 has room for two.
    angles = torch.tensor([0.6, 0.4, 0.2])
    rows = torch.stack([angles.cos(), angles.sin()], -1)
    centroids = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    assert torch.equal(capped_assignment(rows, centroids, 2), torch.tensor([1, 0, 0]))


def test_capped_assignment_with_room_to_spare_is_the_argmax():
    rows, centroids = unit_rows(150, 5, 7), unit_rows(6, 5, 8)
    assert torch.equal(capped_assignment(rows, centroids, 150), (rows @ centroids.T).argmax(-1))


def test_balanced_clusters_partition_within_the_cap():
    head = tiny_target("llama").get_output_embeddings().weight.detach()
    cap = balanced_cluster_size(VOCAB - len(ALWAYS), 8)
    clusters = cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=3, max_cluster_size=cap)
    clusters.validate(VOCAB)
    assert clusters.offsets.diff().max() <= cap
    plain = cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=3)
    assert plain.offsets.diff().max() > cap  # k-means' own sizes are uneven on this head: the cap did work
    with pytest.raises(ValueError, match="balanced_cluster_size"):
        cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=3, max_cluster_size=cap - 1)


@pytest.mark.parametrize("indexed", [False, True], ids=["permuted-blocks", "indexed-rows"])
def test_cluster_head_with_every_row_equals_the_full_head(indexed):
    target = tiny_target("qwen2")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target), target)
    head = target.get_output_embeddings().weight.detach()
    cluster_head = ClusterHead(head, assistant.shortlists, RowBudget([VOCAB - len(ALWAYS)]), indexed=indexed)
    hidden = torch.randn(1, 32)
    scores = cluster_head.scores(hidden, cluster_head.choose_clusters(torch.randn(1, 32), torch.randn(1, 32), 0))
    assert sorted(scores.token_ids.tolist()) == list(range(VOCAB))
    full = (hidden @ head.T).float()
    torch.testing.assert_close(scores.scores[0], full[0, scores.token_ids])
    assert int(scores.argmax_token_ids[0]) == int(full.argmax())


def reference_row_budget(ranking: list[int], rows: int, clusters, frequency_ids) -> list[int]:
    """The rule written out: clusters in the router's order, whole while the budget lasts, the next one cut to
    the remainder keeping its most frequent tokens, the taken tokens laid out in the router's order, then the
    always-included ids."""
    rank = {int(t): r for r, t in enumerate(frequency_ids.tolist())}
    offsets, order = clusters.offsets.tolist(), clusters.token_order.tolist()
    taken, left = {}, rows
    for c in ranking:
        members = sorted(order[offsets[c]: offsets[c + 1]], key=lambda t: (rank.get(t, len(rank)), t))
        taken[c] = members[:left]
        left -= len(taken[c])
        if left == 0:
            break
    return [t for c in taken for t in taken[c]] + clusters.always_ids.tolist()


def test_row_budget_ids_follow_the_rule_on_both_forms_with_columns_equal_to_rows():
    """For random rankings and budgets from one row to every row (cuts at every place, whole clusters, several
    clusters): the device form's ids are the rule's, in its order, as many as R + A (no padding: columns equal
    real rows, the issue-63 bar), distinct; the CPU form's blocks read the same ids."""
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec"), target)
    frequency = assistant.shortlists.host_buffers()["frequency_ids"]
    clusters = assistant.shortlists.host_clusters()
    ordered = clusters.frequency_ordered(frequency)
    table = ClusterRowTable(ordered, torch.device("cpu"))
    permuted = torch.cat([ordered.token_order, ordered.always_ids])
    offsets = ordered.offsets.tolist()
    generator = torch.Generator().manual_seed(0)
    clustered = VOCAB - len(ALWAYS)
    for rows in (1, 2, 5, 11, 12, 13, 30, 60, clustered - 1, clustered):
        for _ in range(15):
            ranking = torch.randperm(clusters.num_clusters, generator=generator)
            expected = reference_row_budget(ranking.tolist(), rows, clusters, frequency)
            ids = table.row_ids(ranking, rows)
            assert ids.tolist() == expected and len(set(expected)) == rows + len(ALWAYS), rows
            starts, ends = block_ranges(ranking.tolist(), rows, offsets)
            assert torch.cat([permuted[a:b] for a, b in zip(starts, ends)]).tolist() == expected[:rows]
    with pytest.raises(ValueError, match="head_weight"):  # a table for ids only cannot score
        table.scores(torch.randn(1, 32), torch.randn(VOCAB, 32), ranking, 5)


def test_a_cut_cluster_keeps_its_most_frequent_tokens():
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec"), target)
    clusters = assistant.shortlists.host_clusters()
    biggest = int(clusters.offsets.diff().argmax())
    members = clusters.token_order[clusters.offsets[biggest]: clusters.offsets[biggest + 1]]
    frequency = members.flip(0)[:3]  # three of its tokens ranked, in the reverse of their stored order
    ordered = clusters.frequency_ordered(frequency)
    ordered.validate(VOCAB)
    got = ordered.token_order[ordered.offsets[biggest]: ordered.offsets[biggest + 1]]
    assert got[:3].tolist() == frequency.tolist()
    assert got[3:].tolist() == sorted(set(members.tolist()) - set(frequency.tolist()))
    ranking = torch.cat([torch.tensor([biggest]), torch.tensor([c for c in range(clusters.num_clusters) if c != biggest])])
    assert ClusterRowTable(ordered, torch.device("cpu")).row_ids(ranking, 2)[:2].tolist() == frequency[:2].tolist()


def test_indexed_and_permuted_cluster_heads_score_the_same_rows_at_every_position():
    """The accelerator form (row ids on the device) and the CPU form (blocks) score the same rows, in the same
    column order, with the same scores, position by position, under a position-aware budget and a size cap."""
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target), target)
    head = target.get_output_embeddings().weight.detach()
    generator = torch.Generator().manual_seed(4)
    for budget in (RowBudget([40, 30, 7, 1]), RowBudget([95])):
        heads = [ClusterHead(head, assistant.shortlists, budget, indexed=i) for i in (False, True)]
        for position in range(5):
            e, h, hidden = (torch.randn(2, 32, generator=generator) for _ in range(3))
            blocks, indexed = (x.scores(hidden, x.choose_clusters(e, h, position)) for x in heads)
            assert torch.equal(indexed.token_ids, blocks.token_ids)
            assert len(indexed.token_ids) == budget.at(position) + len(ALWAYS)
            torch.testing.assert_close(indexed.scores, blocks.scores)
            assert torch.equal(heads[1].shortlist_ids(e, h, position), heads[0].shortlist_ids(e, h, position))
            assert heads[1].min_rows == heads[0].min_rows == min(budget.rows) + len(ALWAYS)


def test_cluster_count_schedule_matches_the_formula():
    assert [clusters_at_position(t, 16) for t in range(8)] == [16, 16, 2, 2, 1, 1, 1, 1]
    assert [clusters_at_position(t, 64) for t in range(6)] == [64, 64, 10, 8, 6, 5]
    for k_max in (1, 7, 33):
        for t in range(2, 10):
            assert clusters_at_position(t, k_max) == max(1, k_max // ((t + 1) * 2))


class Options:
    def __init__(self, **values):
        self.shortlist_rows, self.max_clusters, self.fixed_clusters, self.max_shortlist_size = "clusters", 8, 3, None
        self.__dict__.update(values)


def test_row_budget_from_the_options():
    # Stored rows, per position; the last one repeats; dynaspec-fixed keeps R(0); the cap leaves room for A.
    assert row_budget("dynaspec", Options(shortlist_rows=[50, 40, 9]), 95, 2, 6.0).rows == (50, 40, 9)
    assert row_budget("dynaspec", Options(shortlist_rows=[50, 40, 9]), 95, 2, 6.0).at(7) == 9
    assert row_budget("dynaspec", Options(shortlist_rows=120), 95, 2, 6.0).rows == (95,)
    assert row_budget("dynaspec-fixed", Options(shortlist_rows=[50, 40]), 95, 2, 6.0).rows == (50,)
    assert row_budget("dynaspec", Options(shortlist_rows=[50, 40], max_shortlist_size=30), 95, 2, 6.0).rows == (28, 28)
    assert row_budget("dynaspec", Options(shortlist_rows=[50], max_shortlist_size=1), 95, 2, 6.0).rows == (1,)
    # "clusters" (artifacts without stored rows): k(t) clusters' worth of rows until k(t) reaches 1.
    assert row_budget("dynaspec", Options(max_clusters=16), 10_000, 2, 10.0).rows == (160, 160, 20, 20, 10)
    assert row_budget("dynaspec", Options(max_clusters=1), 10_000, 2, 10.0).rows == (10,)
    assert row_budget("dynaspec-fixed", Options(), 10_000, 2, 10.5).rows == (32,)
    with pytest.raises(ValueError, match="positive ints"):
        RowBudget([3, 0])


def test_expected_rows_per_cluster_weighs_clusters_by_the_frequency_of_their_tokens():
    from hf_dynaspec.modeling.shortlist.clustering import VocabClusters

    clusters = VocabClusters(torch.arange(2, 12), torch.tensor([0, 2, 10]), torch.tensor([0, 1]))  # sizes 2 and 8
    assert clusters.expected_rows_per_cluster(torch.tensor([], dtype=torch.long)) == (4 + 64) / 10
    assert clusters.expected_rows_per_cluster(torch.tensor([2])) == 2.0  # all the mass in the small cluster
    assert clusters.expected_rows_per_cluster(torch.tensor([5, 2])) == pytest.approx((8 * 1 + 2 * 0.5) / 1.5)
    assert clusters.expected_rows_per_cluster(torch.tensor([0, 9])) == 8.0  # an always-included id weighs nothing


def test_a_cluster_budget_asked_for_by_name_replaces_stored_rows(tmp_path):
    """An artifact storing a row budget, loaded with `max_clusters=` (the paper's knob, and what examples written
    before the row budget pass): the cluster budget is used, not silently ignored; rows passed too win."""
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec", shortlist_rows=[50, 9]),
                               target)
    assistant.save_pretrained(tmp_path)
    assert DynaSpecAssistant.from_pretrained(tmp_path, target=target).generation_config.shortlist_rows == [50, 9]
    by_clusters = DynaSpecAssistant.from_pretrained(tmp_path, target=target, max_clusters=2)
    assert by_clusters.generation_config.shortlist_rows == "clusters"
    both = DynaSpecAssistant.from_pretrained(tmp_path, target=target, max_clusters=2, shortlist_rows=[7])
    assert both.generation_config.shortlist_rows == [7]


def test_shortlist_rows_option_is_checked():
    with pytest.raises(ValueError, match="shortlist_rows"):
        DynaSpecAssistant.from_target(tiny_target("llama"), shortlist_rows=[3, -1])
    with pytest.raises(ValueError, match="shortlist_rows"):
        DynaSpecAssistant.from_target(tiny_target("llama"), shortlist_rows="many")


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_greedy_identical_with_every_strategy(family, strategy, tmp_path):
    target = one_layer_target(family)
    assistant = add_shortlists(imitating_assistant(target, noise=0.15, num_assistant_tokens=3), target)
    assistant.save_pretrained(tmp_path)
    assistant = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist=strategy)
    for seed in range(3):
        input_ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        assert torch.equal(assisted_generate(target, assistant, input_ids, max_new_tokens=20), expected)
        stats = assistant.stats
        if strategy == "full":
            assert stats.avg_shortlist is None
        else:
            assert 0 < stats.avg_shortlist < VOCAB and 0 <= stats.coverage <= 1
            assert len(stats.coverage_per_position) >= 1


@pytest.mark.parametrize("rows", [[13, 5], "clusters"])
def test_greedy_identical_with_balanced_clusters(rows, tmp_path):
    """An artifact built with --balanced saves, loads and drafts through the same heads, exactly."""
    target = one_layer_target("llama")
    assistant = imitating_assistant(target, noise=0.15, num_assistant_tokens=3)
    head = target.get_output_embeddings().weight.detach()
    cap = balanced_cluster_size(VOCAB - len(ALWAYS), 8)
    assistant.shortlists.set_frequency_list(torch.randperm(VOCAB, generator=torch.Generator().manual_seed(0))[:60])
    assistant.shortlists.set_clusters(cluster_vocabulary(head, 8, always_ids=ALWAYS, seed=0, max_cluster_size=cap))
    assistant.save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target, shortlist="dynaspec", shortlist_rows=rows)
    assert loaded.shortlists.host_clusters().offsets.diff().max() <= cap
    for seed in range(3):
        input_ids = torch.randint(0, VOCAB, (1, 7), generator=torch.Generator().manual_seed(seed))
        expected = plain_generate(target, input_ids, max_new_tokens=20)
        assert torch.equal(assisted_generate(target, loaded, input_ids, max_new_tokens=20), expected)
        assert 0 < loaded.stats.avg_shortlist < VOCAB


def test_position_aware_budget_shrinks_the_shortlist_with_depth():
    target = one_layer_target("llama")
    assistant = add_shortlists(imitating_assistant(target, num_assistant_tokens=4), target)
    assistant.generation_config.shortlist = "dynaspec"
    session_head = runtime_head(assistant, assistant.generation_config)
    e, h = torch.randn(1, 32), torch.randn(1, 32)
    sizes = [len(session_head.scores(torch.randn(1, 32), session_head.choose_clusters(e, h, t)).token_ids) for t in range(4)]
    assert sizes[0] == sizes[1] > sizes[2] >= sizes[3] > len(ALWAYS)


def test_shortlists_and_router_round_trip(tmp_path):
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target), target)
    with torch.no_grad():
        for p in assistant.shortlists.router.parameters():
            p.normal_()
    assistant.save_pretrained(tmp_path)
    loaded = DynaSpecAssistant.from_pretrained(tmp_path, target=target)
    for key, value in assistant.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    assert loaded.config.num_clusters == assistant.config.num_clusters > 0


def test_router_for_another_hidden_size_is_refused(tmp_path):
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target), target)
    assistant.shortlists.router = ClusterRouter(48, 48, assistant.config.num_clusters)
    assistant.save_pretrained(tmp_path)
    with pytest.raises(ArtifactError, match="wrong shape.*router"):
        DynaSpecAssistant.from_pretrained(tmp_path, target=target)


def test_missing_components_give_clear_errors():
    target = tiny_target("llama")
    with pytest.raises(ValueError, match="needs vocabulary clusters"):
        assisted_generate(target, DynaSpecAssistant.from_target(target, shortlist="dynaspec"), torch.tensor([[3, 4]]), max_new_tokens=3)
    with pytest.raises(ValueError, match="needs a frequency list"):
        assisted_generate(target, DynaSpecAssistant.from_target(target, shortlist="frspec"), torch.tensor([[3, 4]]), max_new_tokens=3)
    with pytest.raises(ValueError, match="another vocabulary"):
        DynaSpecAssistant.from_target(target).shortlists.set_frequency_list(torch.tensor([5, VOCAB + 2]))
    with pytest.raises(ValueError, match="shortlist must be one of"):
        DynaSpecAssistant.from_target(target, shortlist="topk")


def test_frspec_token_list_import_and_export(tmp_path):
    ids = torch.tensor([5, 3, 9, 1])
    export_token_map(ids, tmp_path / "freq_4.pt")
    assert torch.equal(load_token_list(tmp_path / "freq_4.pt", VOCAB), ids)
    torch.save([7, 2, 4], tmp_path / "list.pt")  # FR-Spec's own files are plain lists
    assert load_token_list(tmp_path / "list.pt").tolist() == [7, 2, 4]
    maps = export_d2t_t2d(ids, VOCAB)
    assert torch.equal(torch.arange(4) + maps["d2t"], ids.sort().values) and maps["t2d"].sum() == 4


class Payload:  # anything a restricted unpickler must refuse
    def __reduce__(self):
        return (print, ("unpickled!",))


def test_frspec_import_refuses_non_tensor_pickles(tmp_path):
    torch.save(Payload(), tmp_path / "evil.pt")
    with pytest.raises(ValueError, match="cannot load safely|not a token list"):
        load_token_list(tmp_path / "evil.pt")
    torch.save({"ids": torch.tensor([1, 2])}, tmp_path / "dict.pt")
    with pytest.raises(ValueError, match="flat list"):
        load_token_list(tmp_path / "dict.pt")
    torch.save(torch.tensor([1.5, 2.0]), tmp_path / "float.pt")
    with pytest.raises(ValueError, match="flat list"):
        load_token_list(tmp_path / "float.pt")


def test_ranking_from_counts():
    counts = torch.tensor([0, 5, 2, 5, 1])
    assert ranking_from_counts(counts).tolist() == [1, 3, 2, 4]


def test_runtime_head_is_reused_until_something_it_depends_on_changes():
    target = tiny_target("llama")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec"), target)
    first = runtime_head(assistant, assistant.generation_config)
    assert runtime_head(assistant, assistant.generation_config) is first
    with torch.no_grad():
        assistant.shortlists.router.out.weight.normal_()
    second = runtime_head(assistant, assistant.generation_config)
    assert second is not first
    assistant.generation_config.max_clusters = 2
    rebuilt = runtime_head(assistant, assistant.generation_config)
    assert rebuilt is not second and rebuilt.budget.at(0) < second.budget.at(0)
    assistant.generation_config.shortlist_rows = [9, 4]
    stored = runtime_head(assistant, assistant.generation_config)
    assert stored is not rebuilt and stored.budget.rows == (9, 4)


def test_planned_scores_equal_sequential_choice():
    # On CPU the router runs inline; the plan/scores split must give exactly the clusters chosen directly.
    target = tiny_target("qwen2")
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec"), target)
    head = runtime_head(assistant, assistant.generation_config)
    e, h, hidden = torch.randn(1, 32), torch.randn(1, 32), torch.randn(1, 32)
    for position in range(4):
        planned = head.scores(hidden, head.choose_clusters(e, h, position))
        assert torch.equal(planned.token_ids, head.shortlist_ids(e, h, position))
        ranking = head.router(e, h)[0].argsort(descending=True).tolist()
        frequency = assistant.shortlists.host_buffers()["frequency_ids"]
        expected = reference_row_budget(ranking, head.budget.at(position), assistant.shortlists.host_clusters(),
                                        frequency)
        assert planned.token_ids.tolist() == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (runs wherever one exists)")
def test_side_stream_router_equals_sequential_on_cuda():
    """The router runs on the side stream while the main stream goes on; the head must wait for it. The side
    stream is delayed (a sleep before the router), so a head that read the router's output without waiting
    would score whatever the buffer held then, not the router's choice."""
    target = tiny_target("qwen2").cuda()
    assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="dynaspec"), target)
    head = runtime_head(assistant, assistant.generation_config)
    assert head.side_stream.stream is not None
    router = head.router
    e, h, hidden = (torch.randn(1, 32, device="cuda") for _ in range(3))

    def delayed_router(*inputs):
        torch.cuda._sleep(50_000_000)  # tens of milliseconds on the side stream
        return router(*inputs)

    for position in range(4):
        head.router = delayed_router
        overlapped = head.scores(hidden, head.choose_clusters(e, h, position))
        head.router = router
        sequential = head.shortlist_ids(e, h, position)
        chosen = overlapped.token_ids[overlapped.token_ids >= 0]
        assert torch.equal(chosen.sort().values, sequential.sort().values)


def test_a_lookup_draft_kept_after_the_veto_check_adds_no_shortlist_to_the_statistics():
    """The veto check scores the first position; when the lookup draft is kept, that shortlist drafted nothing
    and must not count. A veto that never fires (0.999) must leave every statistic as the unchecked lookup does."""
    target = tiny_target("llama")
    prompt = torch.tensor([[5, 6, 7, 8, 5, 6, 7, 8, 5, 6]])
    stats = {}
    for veto in (1.0, 0.999):
        assistant = add_shortlists(DynaSpecAssistant.from_target(target, shortlist="frspec", draft_plan="fixed",
                                                                 suffix_cache_num_tokens=0), target)
        config = assistant.generation_config
        config.prompt_lookup_num_tokens, config.prompt_lookup_min_ngram, config.prompt_lookup_veto = 3, 1, veto
        output = assisted_generate(target, assistant, prompt, max_new_tokens=24)
        assert torch.equal(output, plain_generate(target, prompt, max_new_tokens=24))
        s = assistant.stats
        assert s.lookup_vetoes == 0
        stats[veto] = (s.lookup_passes, s.shortlist_rows, s.shortlist_steps, s.coverage_checked, s.coverage_hits)
    assert stats[1.0][0] > 0 and stats[1.0][2] > 0  # both kinds of round happened
    assert stats[0.999] == stats[1.0]
