"""The vocabulary shortlist components an assistant stores: FR-Spec / VocabTrim frequency lists and DynaSpec's
vocabulary clusters and router (how they are built, and the modules that hold them)."""

from hf_dynaspec.modeling.shortlist.clustering import VocabClusters, balanced_cluster_size, cluster_vocabulary
from hf_dynaspec.modeling.shortlist.frequency import load_token_list, ranking_from_counts
from hf_dynaspec.modeling.shortlist.router import ClusterRouter

__all__ = ["ClusterRouter", "VocabClusters", "balanced_cluster_size", "cluster_vocabulary", "load_token_list", "ranking_from_counts"]
