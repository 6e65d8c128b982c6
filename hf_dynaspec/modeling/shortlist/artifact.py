"""The shortlist part of an assistant artifact: frequency lists, vocabulary clusters and the router.

Stored as buffers/parameters of one submodule (`shortlists.*` keys in model.safetensors) whose sizes are
recorded in the config, so save/load is the assistant's own, symmetric and safetensors-only.

Host copies: the runtime heads derive index structures from these buffers (a cluster row table, a static list
with the always-included ids appended), which reads their values. Reading values of device buffers at every
head build would be a host sync, and on a device a mixed-device op is an error, so the derivation always runs
on CPU copies (`host_buffers()`) and only the finished structure is moved. The copies are taken whenever the
module moves (`_apply`, before the move: from the real values wherever they were) and refreshed when a buffer
is replaced or written in place since.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hf_dynaspec.modeling.shortlist.clustering import VocabClusters
from hf_dynaspec.modeling.shortlist.frequency import check_token_ids
from hf_dynaspec.modeling.shortlist.router import ClusterRouter


def _ids(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


class VocabShortlists(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.register_buffer("frequency_ids", _ids(config.frequency_list_size))
        self.register_buffer("vocabtrim_ids", _ids(config.vocabtrim_list_size))
        self.register_buffer("always_ids", _ids(config.num_always_ids))
        clustered = config.vocab_size - config.num_always_ids if config.num_clusters else 0
        self.register_buffer("cluster_token_order", _ids(clustered))
        self.register_buffer("cluster_offsets", _ids(config.num_clusters + 1 if config.num_clusters else 0))
        self.router = (
            ClusterRouter(config.target_hidden_size, config.hidden_size, config.num_clusters, config.router_hidden_size)
            if config.num_clusters
            else None
        )
        self._host: tuple[tuple, dict[str, torch.Tensor]] | None = None  # (buffer identities, CPU copies)

    # -- host copies of the index buffers (see the module docstring) --------------------------------------
    def _buffer_identity(self) -> tuple:
        # The tensors themselves (compared with `is`) and their in-place version counters: a replaced buffer or
        # an in-place write (e.g. loading) makes the copies stale. Holding the tensors keeps their ids unique.
        return tuple((name, buf, buf._version) for name, buf in self.named_buffers(recurse=False))

    def _host_is_current(self) -> bool:
        now = self._buffer_identity()
        return self._host is not None and len(now) == len(self._host[0]) and all(
            a[0] == b[0] and a[1] is b[1] and a[2] == b[2] for a, b in zip(now, self._host[0]))

    def host_buffers(self) -> dict[str, torch.Tensor]:
        """CPU copies of the index buffers (frequency lists, clusters, always-included ids), by name.

        Copied from the buffers when stale: a one-time read at load/attach time, never in a draft step."""
        if not self._host_is_current():
            copies = {name: buf.detach().to("cpu", copy=True) for name, buf in self.named_buffers(recurse=False)}
            self._host = (self._buffer_identity(), copies)
        return self._host[1]

    def _apply(self, fn, recurse: bool = True):
        # From the values before they move (on a device they are read only here). Buffers without values (the
        # meta device, while transformers builds the model before loading) have nothing to copy yet.
        has_values = all(buf.device.type != "meta" for buf in self.buffers(recurse=False))
        host = self.host_buffers() if has_values else None
        super()._apply(fn, recurse)
        self._host = (self._buffer_identity(), host) if host is not None else None
        return self

    # -- building (each setter records the new size in the config) -------------------------------------
    def set_frequency_list(self, ids: torch.Tensor, kind: str = "frspec") -> None:
        """A ranking of token ids, most frequent first: `kind` "frspec" (corpus counts) or "vocabtrim"."""
        ids = torch.as_tensor(ids, dtype=torch.long)
        check_token_ids(ids, self.config.vocab_size, f"{kind} list")
        name = {"frspec": "frequency", "vocabtrim": "vocabtrim"}[kind]
        setattr(self, f"{name}_ids", ids.to(self.frequency_ids.device))
        setattr(self.config, f"{name}_list_size", len(ids))

    def set_clusters(self, clusters: VocabClusters, router_hidden_size: int | None = None) -> None:
        """Install vocabulary clusters and a fresh (untrained) router for them."""
        clusters.validate(self.config.vocab_size)
        device = self.frequency_ids.device
        self.cluster_token_order = clusters.token_order.to(device)
        self.cluster_offsets = clusters.offsets.to(device)
        self.always_ids = clusters.always_ids.to(device)
        self.config.num_clusters = clusters.num_clusters
        self.config.num_always_ids = len(clusters.always_ids)
        if router_hidden_size is not None:
            self.config.router_hidden_size = router_hidden_size
        self.router = ClusterRouter(
            self.config.target_hidden_size, self.config.hidden_size, clusters.num_clusters, self.config.router_hidden_size
        ).to(device)

    def static_list(self, kind: str, size: int | None = None) -> torch.Tensor | None:
        """The first `size` ids of the `kind` ("frspec" | "vocabtrim") ranking plus the always-included ids
        (EOS and special tokens are always draftable), on the buffers' device; None when the artifact stores no
        such ranking. Built on the host copies (its length depends on the values), moved once."""
        host = self.host_buffers()
        ranking = host["frequency_ids" if kind == "frspec" else "vocabtrim_ids"]
        if len(ranking) == 0:
            return None
        ids = ranking[:size] if size else ranking
        always = host["always_ids"]
        return torch.cat([ids, always[~torch.isin(always, ids)]]).to(self.always_ids.device)

    @property
    def clusters(self) -> VocabClusters | None:
        """The clusters as stored (on the buffers' device)."""
        if not self.config.num_clusters:
            return None
        return VocabClusters(self.cluster_token_order, self.cluster_offsets, self.always_ids)

    def host_clusters(self) -> VocabClusters | None:
        """The clusters on the CPU (host copies): what load-time structures are built from."""
        if not self.config.num_clusters:
            return None
        host = self.host_buffers()
        return VocabClusters(host["cluster_token_order"], host["cluster_offsets"], host["always_ids"])
