# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The handover's model: the journal on a Node, the policy, and their states (pure; no I/O).

PRIVATE to the collection: names here can change without notice. The protocol moves a
node free -> lending -> lent -> reclaiming -> free (docs/handover.md), recorded in a journal
annotation on the Node; the policy says which nodes may move and what a reclaim's deadline
does to the jobs still running.
"""

from __future__ import annotations

import json
import typing as t
from collections.abc import Mapping
from dataclasses import dataclass, field

# The names below are plain strings, as the journal, the modules' results and the messages
# write them: a constant compares, prints and serialises as its text.


class JournalState:
    """Where a node is in the handover, as the journal annotation on its Node says."""

    FREE: t.Final = "free"  # also a Node without the annotation
    LENDING: t.Final = "lending"
    LENT: t.Final = "lent"
    RECLAIMING: t.Final = "reclaiming"
    CORRUPT: t.Final = "corrupt"  # read only: an annotation that is no journal; never written


STATES = (JournalState.FREE, JournalState.LENDING, JournalState.LENT, JournalState.RECLAIMING)
# A handover of ours is under way: the node is Slurm's, or on its way there or back.
UNDER_WAY = (JournalState.LENDING, JournalState.LENT, JournalState.RECLAIMING)


class EscalationPolicy:
    """What a reclaim's deadline does to a partition's jobs still on the node."""

    REQUEUE: t.Final = "requeue"  # the node goes DOWN: batch jobs go back to the queue
    CANCEL: t.Final = "cancel"  # the jobs are cancelled one by one
    WAIT: t.Final = "wait"  # the jobs are never touched: the node waits for them


ESCALATIONS = (EscalationPolicy.REQUEUE, EscalationPolicy.CANCEL, EscalationPolicy.WAIT)


class LendWhen:
    """When the handover lends a free, idle pool node to Slurm."""

    IDLE: t.Final = "idle"  # once it has been idle lend_min_idle_s, whatever Slurm's queue
    DEMAND: t.Final = "demand"  # only for pending jobs it would start, as many as they need


LEND_WHEN = (LendWhen.IDLE, LendWhen.DEMAND)


class AdminDrainPolicy:
    """What a reclaim does with a node somebody drained in Slurm while it was lent
    ("hw: ECC errors"): the reason is kept in the journal and an Event either way."""

    CORDON: t.Final = "cordon"  # given back cordoned: a person looks at it first
    RETURN: t.Final = "return"  # given back schedulable


ADMIN_DRAIN_POLICIES = (AdminDrainPolicy.CORDON, AdminDrainPolicy.RETURN)


class HandoverAction:
    """What node_handover is asked to do (its option action)."""

    LEND: t.Final = "lend"
    RECLAIM: t.Final = "reclaim"
    RESUME: t.Final = "resume"  # finish a lend or reclaim an earlier run left
    MARK_IDLE: t.Final = "mark_idle"
    CLEAN_ORPHANS: t.Final = "clean_orphans"


ACTIONS = (
    HandoverAction.LEND,
    HandoverAction.RECLAIM,
    HandoverAction.RESUME,
    HandoverAction.MARK_IDLE,
    HandoverAction.CLEAN_ORPHANS,
)


class HandoverResult:
    """Where one node ended (node_handover's nodes[].result)."""

    LENT: t.Final = "lent"
    FREE: t.Final = "free"
    ROLLED_BACK: t.Final = "rolled_back"  # an application pod came first
    BLOCKED: t.Final = "blocked"  # jobs of a `wait` partition keep it reclaiming
    FAILED: t.Final = "failed"
    REFUSED: t.Final = "refused"
    SKIPPED: t.Final = "skipped"  # another run acted first
    UNCHANGED: t.Final = "unchanged"
    DRAINING: t.Final = "draining"  # an orphan whose jobs still run
    REMOVED: t.Final = "removed"  # an orphan whose Slurm record is gone


class Condition:
    """A disagreement in a node's evidence (journal, lend label, taint, slurmd pod, Slurm's
    record and its jobs, application pods): the node's owner is not the one the protocol
    promises, or not known (docs/handover.md: Conditions and their resolutions)."""

    # A Slurm job and an application pod on one node: the emergency.
    SLURM_AND_APPS: t.Final = "slurm_and_apps"
    # An application pod beside slurmd (no job yet): Slurm may start one at any time.
    APPS_BESIDE_SLURMD: t.Final = "apps_beside_slurmd"
    # The journal says lent, but the NodeSet no longer selects the node.
    JOURNAL_LENT_NO_LABEL: t.Final = "journal_lent_no_label"
    # The journal says lent, but nothing keeps application pods off the node.
    JOURNAL_LENT_NO_TAINT: t.Final = "journal_lent_no_taint"
    # The journal says lent, but Slurm keeps the node drained by an earlier reclaim or an
    # orphan's clean-up of ours (the Node was deleted and restored with its journal).
    JOURNAL_LENT_DRAINED_BY_US: t.Final = "journal_lent_drained_by_us"
    # The journal says lent, but the Slinky operator drained the node for its own reasons
    # (a slurmd pod cordoned or pending termination for scale-in).
    DRAINED_BY_OPERATOR: t.Final = "drained_by_operator"
    # No journal, but the lend label, slurmd and its registration: a lend whose record was
    # lost (a Node that came back with its labels but not our annotation).
    SLURMD_WITHOUT_JOURNAL: t.Final = "slurmd_without_journal"
    # No journal, but the lend label or taint of ours, and no slurmd that serves.
    MARKS_WITHOUT_JOURNAL: t.Final = "marks_without_journal"
    # A Slurm record of a lendable NodeSet that its Node, free and without slurmd, does not
    # stand for (docs/handover.md: orphans).
    ORPHAN_RECORD: t.Final = "orphan_record"
    # Our marks on a node that no longer matches pool_selector, or matches never_touch_selector.
    LEFT_THE_POOL: t.Final = "left_the_pool"
    # An annotation that is no journal.
    JOURNAL_CORRUPT: t.Final = "journal_corrupt"


CONDITIONS = (
    Condition.SLURM_AND_APPS,
    Condition.APPS_BESIDE_SLURMD,
    Condition.JOURNAL_LENT_NO_LABEL,
    Condition.JOURNAL_LENT_NO_TAINT,
    Condition.JOURNAL_LENT_DRAINED_BY_US,
    Condition.DRAINED_BY_OPERATOR,
    Condition.SLURMD_WITHOUT_JOURNAL,
    Condition.MARKS_WITHOUT_JOURNAL,
    Condition.ORPHAN_RECORD,
    Condition.LEFT_THE_POOL,
    Condition.JOURNAL_CORRUPT,
)
# Resolved in the run that sees them, whatever max_changes_per_run leaves.
EMERGENCIES = (Condition.SLURM_AND_APPS,)


class Resolution:
    """What a run does about a node's evidence: one per condition and policy."""

    # Finish the handover the journal records (lending or reclaiming): the protocol's own
    # in-flight states, not a disagreement.
    RESUME: t.Final = "resume"
    # Finish the lend the evidence shows: journal `lending` and the taint in one patch, then
    # slurmd's registration awaited and the journal `lent`.
    LEND: t.Final = "lend"
    # Give the node back: the taint on again first (no further application pod lands), then
    # the reclaim's steps under the partition's grace and escalation.
    RECLAIM: t.Final = "reclaim"
    # The orphaned Slurm record drained, its jobs given the grace, then removed.
    CLEAN_ORPHAN: t.Final = "clean_orphan"
    # The protocol does not guess: a person acts, as the line says.
    PERSON: t.Final = "person"


RESOLUTIONS = (
    Resolution.RESUME,
    Resolution.LEND,
    Resolution.RECLAIM,
    Resolution.CLEAN_ORPHAN,
    Resolution.PERSON,
)
# A run acts on these itself (person: nobody does until a person does).
RUN_RESOLUTIONS = (Resolution.RESUME, Resolution.LEND, Resolution.RECLAIM, Resolution.CLEAN_ORPHAN)


# The steps of a lend and of a reclaim, in their order.
LEND_STEPS = ("taint", "recheck", "label", "registered")
RECLAIM_STEPS = (
    "journal",
    "drain",
    "drained",
    "escalate",
    "unlabel",
    "pod_gone",
    "free",
    "slurm_removed",
)


class Step:
    """The steps of a handover, as nodes[].steps and the timeline name them and as a test
    names the step to stop after (faults)."""

    TAINT, RECHECK, LABEL, REGISTERED = LEND_STEPS
    JOURNAL, DRAIN, DRAINED, ESCALATE, UNLABEL, POD_GONE, FREE, SLURM_REMOVED = RECLAIM_STEPS
    REMOVE: t.Final = "remove"  # an orphan's Slurm record


class PolicyError(ValueError):
    """A policy setting that cannot work; the message names the setting and the fix."""

    def __init__(self, setting: str, problem: str, fix: str) -> None:
        super().__init__(f"{setting}: {problem}; {fix}")
        self.setting = setting


@dataclass(frozen=True)
class Journal:
    """The handover annotation of a Node (absent: free)."""

    state: str = JournalState.FREE
    op: str = ""
    since: float | None = None
    last_reclaim: float | None = None
    idle_since: float | None = None
    deadline: float | None = None
    reason: str = ""
    by: str = ""
    # The reason of a drain somebody else set in Slurm while the node was lent; kept until
    # the node is lent again.
    admin_drain: str = ""
    # When the node became lent (its slurmd registered); kept through its reclaim, so the
    # loan is recorded whole when it comes back (the lending report).
    lent_at: float | None = None

    @classmethod
    def parse(cls, text: str | None) -> Journal:
        """The journal in an annotation value; an unreadable one is its own state."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            return cls(state=JournalState.CORRUPT, reason="the journal annotation is not JSON")
        if not isinstance(data, dict) or data.get("state") not in STATES:
            return cls(state=JournalState.CORRUPT, reason=f"unknown journal state {data!r:.80}")

        def number(key: str) -> float | None:
            value = data.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        return cls(
            state=str(data["state"]),
            op=str(data.get("op", "")),
            since=number("since"),
            last_reclaim=number("last_reclaim"),
            idle_since=number("idle_since"),
            deadline=number("deadline"),
            reason=str(data.get("reason", "")),
            by=str(data.get("by", "")),
            admin_drain=str(data.get("admin_drain", "")),
            lent_at=number("lent_at"),
        )


@dataclass(frozen=True)
class PartitionPolicy:
    grace_s: int = 300
    escalation: str = EscalationPolicy.REQUEUE


@dataclass(frozen=True)
class Policy:
    pool_selector: Mapping[str, str]
    never_touch_selector: Mapping[str, str] = field(default_factory=dict)
    headroom: int = 1
    max_lent: int | None = None  # at most this many nodes lent; None: no count limit
    max_lent_fraction: float = 1.0  # and at most this fraction of the pool
    lend_min_idle_s: int = 600
    relend_cooldown_s: int = 1800
    max_changes_per_run: int = 8
    demand_namespaces: tuple[str, ...] = ()  # empty: every namespace but the system ones
    demand_selector: Mapping[str, str] = field(default_factory=dict)
    system_namespaces: tuple[str, ...] = ("kube-system", "kube-node-lease", "kube-public")
    partitions: Mapping[str, PartitionPolicy] = field(default_factory=dict)
    default_partition: PartitionPolicy = field(default_factory=PartitionPolicy)
    admin_drain: str = AdminDrainPolicy.CORDON
    lend_when: str = LendWhen.IDLE
    demand_headroom: int = 0  # lend_when demand: nodes lent beyond what waiting jobs need
    # lend_when demand: a lent node idle in Slurm this long, with no job waiting for it, goes
    # back; None: it stays lent until the applications need it (as with idle).
    demand_return_idle_s: int | None = None

    def partition(self, name: str) -> PartitionPolicy:
        return self.partitions.get(name, self.default_partition)

    def check(self) -> None:
        """PolicyError on the first setting that cannot work."""
        problems = self.problems()
        if problems:
            raise problems[0]

    def problems(self) -> list[PolicyError]:
        """Every setting that cannot work, in the order of the fields (none: the policy works)."""
        found: list[PolicyError] = []
        if not self.pool_selector:
            found.append(
                PolicyError(
                    "pool_selector", "is empty", "give the labels of the lendable pool's nodes"
                )
            )
        for name, value in (
            ("headroom", self.headroom),
            ("lend_min_idle_s", self.lend_min_idle_s),
            ("relend_cooldown_s", self.relend_cooldown_s),
            ("demand_headroom", self.demand_headroom),
            ("demand_return_idle_s", self.demand_return_idle_s or 0),
        ):
            if value < 0:
                found.append(PolicyError(name, f"{value} is negative", "give 0 or more"))
        if self.max_changes_per_run < 1:
            found.append(
                PolicyError(
                    "max_changes_per_run",
                    f"{self.max_changes_per_run} is below 1",
                    "give 1 or more",
                )
            )
        if self.max_lent is not None and self.max_lent < 0:
            found.append(
                PolicyError(
                    "max_lent", f"{self.max_lent} is negative", "give a count, or none for no limit"
                )
            )
        if not 0 <= self.max_lent_fraction <= 1:
            found.append(
                PolicyError(
                    "max_lent_fraction",
                    f"{self.max_lent_fraction:g} is not between 0 and 1",
                    "for example 0.5",
                )
            )
        if self.admin_drain not in ADMIN_DRAIN_POLICIES:
            found.append(
                PolicyError(
                    "admin_drain",
                    f"{self.admin_drain!r} is not a known choice",
                    f"use one of {', '.join(ADMIN_DRAIN_POLICIES)}",
                )
            )
        if self.lend_when not in LEND_WHEN:
            found.append(
                PolicyError(
                    "lend_when",
                    f"{self.lend_when!r} is not a known choice",
                    f"use one of {', '.join(LEND_WHEN)}",
                )
            )
        for name, part in {**self.partitions, "(default)": self.default_partition}.items():
            if part.escalation not in ESCALATIONS:
                found.append(
                    PolicyError(
                        f"partitions.{name}.escalation",
                        f"{part.escalation!r} is not a known policy",
                        f"use one of {', '.join(ESCALATIONS)}",
                    )
                )
            if part.grace_s < 0:
                found.append(
                    PolicyError(
                        f"partitions.{name}.grace_s",
                        f"{part.grace_s} is negative",
                        "give 0 or more",
                    )
                )
        return found


def matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    """Every key of the selector among the labels, with its value (an items-view subset test:
    the planner asks it of every node, twice)."""
    return selector.items() <= labels.items()
