"""Vocabulary shortlists for the drafter's LM head: FR-Spec, VocabTrim and DynaSpec (clusters + router)."""

from hf_dynaspec.shortlist.budget import clusters_at_position
from hf_dynaspec.shortlist.clustering import VocabClusters, cluster_vocabulary
from hf_dynaspec.shortlist.frequency import load_token_list, ranking_from_counts
from hf_dynaspec.shortlist.router import ClusterRouter

STRATEGIES = ("full", "frspec", "vocabtrim", "dynaspec", "dynaspec-fixed")

__all__ = [
    "STRATEGIES",
    "ClusterRouter",
    "VocabClusters",
    "cluster_vocabulary",
    "clusters_at_position",
    "load_token_list",
    "ranking_from_counts",
]
