"""EAGLE-2 dynamic draft trees verified in one target pass (tree mask, tree positions, cache compaction)."""

from hf_dynaspec.tree.generate import parse_tree_shape, tree_generate
from hf_dynaspec.tree.structure import DraftTree, tree_attention_mask, tree_position_ids

__all__ = ["DraftTree", "parse_tree_shape", "tree_attention_mask", "tree_generate", "tree_position_ids"]
