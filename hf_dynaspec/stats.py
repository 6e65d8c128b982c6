"""Acceptance statistics of an assistant, as `assistant.stats` reports them.

The statistics of an assistant's last generate() call are held here, outside the artifact (a weak mapping from
the assistant: nothing is written onto the model), started by the call (`start_stats`) and read through the
assistant's read-only `stats` property (`latest_stats`).
"""

from __future__ import annotations

import copy
import weakref
from dataclasses import dataclass, field

import torch


@dataclass
class DraftStats:
    """Counts over the target's decoding passes of the last `generate()` call (every pass after the prefill,
    including those with no draft: the last token before max_length, or a round the drafter's `confidence`
    threshold left empty).

    tau is the mean number of tokens committed per pass: accepted drafts plus the target's own token.
    `acceptance_histogram[n]` counts passes that accepted exactly n drafts.
    """

    verify_passes: int = 0
    drafted: int = 0
    accepted: int = 0
    acceptance_histogram: list[int] = field(default_factory=list)
    accepted_per_pass: list[int] = field(default_factory=list)
    drafted_per_pass: list[int] = field(default_factory=list)
    # Passes whose draft came from prompt lookup (hf_dynaspec.drafting.lookup) rather than the drafter, and their counts.
    lookup_passes: int = 0
    lookup_drafted: int = 0
    lookup_accepted: int = 0
    lookup_vetoes: int = 0  # rounds whose lookup draft the drafter overruled (generation_config.prompt_lookup_veto)
    passes_by_source: dict = field(default_factory=dict)  # which source drafted each pass (see `record`)
    accepted_by_source: dict = field(default_factory=dict)
    # Shortlist rows summed over draft steps that used a shortlist, and coverage at draft position j (was the
    # target's own token at j inside the shortlist drafted from?): read through the properties below.
    _shortlist_rows: int = 0
    _shortlist_steps: int = 0
    _coverage_hits: list[int] = field(default_factory=list)
    _coverage_checked: list[int] = field(default_factory=list)
    # The drafted token ids of every pass, kept only when `assistant.collect_draft_tokens` is set (VocabTrim).
    draft_token_ids: list = field(default_factory=list)
    # Shortlist counts still on the device: (position, rows `[]`, hit `[]` or None), read on first access, so
    # that recording a round never waits on an accelerator.
    _pending: list = field(default_factory=list, repr=False)

    def record(self, num_drafted: int, num_accepted: int, looked_up: bool = False, source: str | None = None) -> None:
        """One verified pass; `source`: what drafted it ("drafter", "prompt-lookup", "suffix-request", ...,
        "none"), counted in `passes_by_source` / `accepted_by_source`."""
        self.verify_passes += 1
        if source is not None:
            self.passes_by_source[source] = self.passes_by_source.get(source, 0) + 1
            self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + num_accepted
        if looked_up:
            self.lookup_passes += 1
            self.lookup_drafted += num_drafted
            self.lookup_accepted += num_accepted
        self.accepted_per_pass.append(num_accepted)
        self.drafted_per_pass.append(num_drafted)
        self.drafted += num_drafted
        self.accepted += num_accepted
        if len(self.acceptance_histogram) <= num_accepted:
            self.acceptance_histogram.extend([0] * (num_accepted + 1 - len(self.acceptance_histogram)))
        self.acceptance_histogram[num_accepted] += 1

    def record_shortlists(self, shortlist_ids: list, target_tokens) -> None:
        """`shortlist_ids[j]`: ids scored at draft position j (None = full head; -1 marks padding columns);
        `target_tokens[j]`: the target's token there. Kept as device tensors until a statistic is read."""
        for position, ids in enumerate(shortlist_ids):
            if ids is None:
                continue
            rows = (ids >= 0).sum()
            hit = (ids == target_tokens[position]).any() if position < len(target_tokens) else None
            self._pending.append((position, rows, hit))

    def _settle(self) -> None:
        """Fold the pending device counts into the totals: one read for all of them."""
        if not self._pending:
            return
        values = torch.stack([torch.stack([rows, hit.long() if hit is not None else torch.full_like(rows, -1)])
                              for _, rows, hit in self._pending]).tolist()
        for (position, _, _), (rows, hit) in zip(self._pending, values):
            self._shortlist_rows += int(rows)
            self._shortlist_steps += 1
            if hit < 0:
                continue
            while len(self._coverage_checked) <= position:
                self._coverage_checked.append(0)
                self._coverage_hits.append(0)
            self._coverage_checked[position] += 1
            self._coverage_hits[position] += int(hit)
        self._pending = []

    @property
    def shortlist_rows(self) -> int:
        self._settle()
        return self._shortlist_rows

    @property
    def shortlist_steps(self) -> int:
        self._settle()
        return self._shortlist_steps

    @property
    def coverage_hits(self) -> list[int]:
        self._settle()
        return self._coverage_hits

    @property
    def coverage_checked(self) -> list[int]:
        self._settle()
        return self._coverage_checked

    @property
    def avg_shortlist(self) -> float | None:
        return self.shortlist_rows / self.shortlist_steps if self.shortlist_steps else None

    @property
    def coverage(self) -> float | None:
        checked = sum(self.coverage_checked)
        return sum(self.coverage_hits) / checked if checked else None

    @property
    def coverage_per_position(self) -> list[float]:
        return [h / c for h, c in zip(self.coverage_hits, self.coverage_checked)]

    @property
    def tau(self) -> float:
        """Mean accepted length: tokens committed per verification pass (1.0 means no draft was ever accepted)."""
        return (self.accepted + self.verify_passes) / self.verify_passes if self.verify_passes else float("nan")

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    def as_dict(self) -> dict:
        """The statistics as plain values (copies: later calls do not change them)."""
        return {name: copy.copy(getattr(self, name)) for name in REPORTED}


# What `as_dict` reports, in its order.
REPORTED = ("tau", "acceptance_rate", "verify_passes", "drafted", "accepted", "acceptance_histogram", "avg_shortlist",
            "coverage", "coverage_per_position", "lookup_passes", "lookup_drafted", "lookup_accepted", "lookup_vetoes",
            "passes_by_source", "accepted_by_source")


_LATEST: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def start_stats(owner) -> DraftStats:
    """Fresh statistics for a generate() call of `owner` (an assistant); they become its `latest_stats`."""
    stats = _LATEST[owner] = DraftStats()
    return stats


def latest_stats(owner) -> DraftStats:
    """The statistics of `owner`'s last generate() call (empty before its first)."""
    return _LATEST.setdefault(owner, DraftStats())
