# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Each node's owner from all the evidence, not from the journal alone (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

The journal records what the runs wrote. A node's history may hold what they did not write:
its Node deleted and registered again by its kubelet (its own labels, none of our
annotations or taints) or restored by an admin (all of them), relabelled out of the pool,
drained by the Slinky operator. The evidence is the journal, the lend label, the lent taint,
slurmd pods on the node, Slurm's record of the node and its jobs, and application pods.
Where it disagrees, the node has a named Condition and exactly one Resolution
(docs/handover.md: Conditions and their resolutions); the planner plans the resolution
before new work.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    EMERGENCIES,
    UNDER_WAY,
    Condition,
    JournalState,
    Policy,
    Resolution,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import HandoverMarkers
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    NodeView,
    PodView,
    SlurmNodeView,
    is_application_pod,
)


class SlurmRecord:
    """Slurm's record of a node, as the evidence needs it."""

    NONE: t.Final = "none"
    UP: t.Final = "up"  # registered, not drained: jobs may start
    DOWN: t.Final = "down"  # DOWN, not responding or not registered yet
    DRAINED_OURS: t.Final = "drained_ours"  # a drain reason of ours (hpcops: ...)
    DRAINED_OPERATOR: t.Final = "drained_operator"  # the Slinky operator's (slurm-operator: ...)
    DRAINED_ADMIN: t.Final = "drained_admin"  # anybody else's: a person's, slurmctld's


SLURM_RECORDS = (
    SlurmRecord.NONE,
    SlurmRecord.UP,
    SlurmRecord.DOWN,
    SlurmRecord.DRAINED_OURS,
    SlurmRecord.DRAINED_OPERATOR,
    SlurmRecord.DRAINED_ADMIN,
)
# The Slinky operator's drain while it replaces a slurmd pod ("slurm-operator: Pod is
# terminating"): its bookkeeping of the pod's life, which an upgrade clears
# (upgrade_resume), not the node taken from Slurm (scale-in, a cordon).
OPERATOR_POD_REPLACED = "is terminating"
# Slurm states and flags of a node that does not serve (yet).
_NOT_SERVING = frozenset(
    {"DOWN", "FUTURE", "UNKNOWN", "NOT_RESPONDING", "POWERED_DOWN", "INVALID_REG"}
)


def slurm_record(slurm: SlurmNodeView | None, markers: HandoverMarkers) -> str:
    """One of SlurmRecord."""
    if slurm is None:
        return SlurmRecord.NONE
    if "DRAIN" in slurm.states:
        if markers.is_our_reason(slurm.reason):
            return SlurmRecord.DRAINED_OURS
        if slurm.reason.startswith(markers.operator_reason_prefix):
            return SlurmRecord.DRAINED_OPERATOR
        return SlurmRecord.DRAINED_ADMIN
    if slurm.states & _NOT_SERVING:
        return SlurmRecord.DOWN
    return SlurmRecord.UP


@dataclass(frozen=True)
class Evidence:
    """What is known of one node."""

    journal: str  # JournalState
    label: bool = False  # the lend label
    taint: bool = False  # the lent taint
    slurmd: bool = False  # a slurmd pod on the node
    slurm: str = SlurmRecord.NONE  # one of SlurmRecord
    jobs: tuple[int, ...] = ()  # Slurm jobs running on it
    apps: tuple[str, ...] = ()  # application pods on it, namespace/name
    in_pool: bool = True  # matches pool_selector
    never_touch: bool = False  # matches never_touch_selector
    schedulable: bool = True  # Ready and not cordoned
    slurm_reason: str = ""  # Slurm's reason of a drain or DOWN

    @property
    def marked(self) -> bool:
        """Something of ours is on the Node: a journal not free, the lend label or the taint."""
        return self.journal != JournalState.FREE or self.label or self.taint

    def text(self) -> str:
        """The evidence in words, for the lines people read."""
        parts = [
            f"journal {self.journal}",
            "lend label" if self.label else "no lend label",
            "lent taint" if self.taint else "no lent taint",
            "slurmd pod" if self.slurmd else "no slurmd pod",
            f"Slurm {self.slurm.replace('_', ' ')}"
            + (f" ({self.slurm_reason!r})" if self.slurm_reason else ""),
        ]
        if self.jobs:
            parts.append(f"job(s) {', '.join(map(str, self.jobs))} running")
        if self.apps:
            parts.append(f"application pod(s) {', '.join(self.apps)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Reconciled:
    """A node's condition ('' when the evidence agrees) and its resolution ('' when
    nothing is to be done)."""

    node: str
    condition: str
    resolution: str
    evidence: Evidence

    @property
    def emergency(self) -> bool:
        return self.condition in EMERGENCIES

    def as_dict(self) -> dict[str, t.Any]:
        return {
            "node": self.node,
            "condition": self.condition,
            "resolution": self.resolution,
            "emergency": self.emergency,
            "evidence": self.evidence.text(),
        }


def resolve(evidence: Evidence) -> tuple[str, str]:
    """(condition, resolution) of one node's evidence; ('', '') when it agrees and nothing is
    under way. Every combination gives exactly one; see docs/handover.md for the table."""
    e = evidence
    busy_both = bool(e.jobs) and bool(e.apps)
    if e.journal == JournalState.CORRUPT:
        return Condition.JOURNAL_CORRUPT, Resolution.PERSON
    if not e.in_pool or e.never_touch:
        if not e.marked:
            return "", ""  # not ours, never was
        # A node that left the pool is never planned; a Slurm job beside an application
        # pod is not left there, unless the node is never to be touched.
        if busy_both and not e.never_touch:
            return Condition.SLURM_AND_APPS, Resolution.RECLAIM
        return Condition.LEFT_THE_POOL, Resolution.PERSON
    if e.journal == JournalState.RECLAIMING:
        return (Condition.SLURM_AND_APPS if busy_both else ""), Resolution.RESUME
    if e.journal == JournalState.LENDING:
        if busy_both:
            return Condition.SLURM_AND_APPS, Resolution.RECLAIM
        return "", Resolution.RESUME
    if e.journal == JournalState.LENT:
        return _lent(e)
    return _free(e)


def _lent(e: Evidence) -> tuple[str, str]:
    if e.jobs and e.apps:
        return Condition.SLURM_AND_APPS, Resolution.RECLAIM
    if e.apps:
        return Condition.APPS_BESIDE_SLURMD, Resolution.RECLAIM
    if not e.label:
        return Condition.JOURNAL_LENT_NO_LABEL, Resolution.RECLAIM
    if not e.taint:
        return Condition.JOURNAL_LENT_NO_TAINT, Resolution.RECLAIM
    if e.slurm == SlurmRecord.DRAINED_OURS:
        return Condition.JOURNAL_LENT_DRAINED_BY_US, Resolution.RECLAIM
    if e.slurm == SlurmRecord.DRAINED_OPERATOR and OPERATOR_POD_REPLACED not in e.slurm_reason:
        return Condition.DRAINED_BY_OPERATOR, Resolution.RECLAIM
    # slurmd missing or Slurm DOWN alone is what a slurmd pod being replaced looks like (an
    # upgrade, the operator's own repair): not a disagreement. An admin's drain is the
    # admin's (attention, not a condition).
    return "", ""


def _free(e: Evidence) -> tuple[str, str]:
    ours = e.label or e.taint
    if not ours and e.slurm == SlurmRecord.NONE:
        return "", ""
    if e.jobs and e.apps and (ours or e.slurmd):
        return Condition.SLURM_AND_APPS, Resolution.RECLAIM
    if not ours:
        # A Slurm record and no mark of ours: served by a slurmd on the node (not ours to
        # judge), or an orphan (docs/handover.md).
        return ("", "") if e.slurmd else (Condition.ORPHAN_RECORD, Resolution.CLEAN_ORPHAN)
    if e.apps and (e.label or e.slurmd):
        return Condition.APPS_BESIDE_SLURMD, Resolution.RECLAIM
    if e.label and e.slurmd and e.slurm == SlurmRecord.UP and e.schedulable and not e.apps:
        return Condition.SLURMD_WITHOUT_JOURNAL, Resolution.LEND
    return Condition.MARKS_WITHOUT_JOURNAL, Resolution.RECLAIM


def evidence_of(
    node: NodeView,
    pods: Sequence[PodView],
    slurm: SlurmNodeView | None,
    policy: Policy,
    markers: HandoverMarkers,
    marks_known: bool = True,
) -> Evidence:
    """The evidence of one node; `pods` are those bound to it, `slurm` its record (None:
    none, or not of a lendable NodeSet). Without `marks_known` (views built without the
    Node's label and taints) the journal stands for the lend label and the taint."""
    apps = sorted(
        f"{pod.namespace}/{pod.name}"
        for pod in pods
        if pod.phase in ("Pending", "Running") and is_application_pod(pod, policy)
    )
    under_way = node.journal.state in UNDER_WAY
    return Evidence(
        journal=node.journal.state,
        label=node.labels.get(markers.lend_label) == markers.lend_label_value
        if marks_known
        else under_way,
        taint=(markers.taint_key, markers.taint_effect) in node.taints
        if marks_known
        else under_way,
        slurmd=any(pod.live_slurmd for pod in pods),
        slurm=slurm_record(slurm, markers),
        jobs=tuple(job.job_id for job in slurm.jobs) if slurm else (),
        apps=tuple(apps),
        in_pool=matches(node.labels, policy.pool_selector),
        never_touch=bool(policy.never_touch_selector)
        and matches(node.labels, policy.never_touch_selector),
        schedulable=node.ready and not node.unschedulable,
        slurm_reason=slurm.reason if slurm else "",
    )


def reconcile(
    nodes: Sequence[NodeView],
    pods: Sequence[PodView],
    slurm_nodes: Mapping[str, SlurmNodeView],
    policy: Policy,
    markers: HandoverMarkers,
    lendable_features: Iterable[str] | None = None,
    *,
    marks_known: bool = True,
) -> dict[str, Reconciled]:
    """The nodes with a condition or a resolution, by name: those whose evidence disagrees,
    and those with a handover under way (nodes whose evidence agrees are left out). A Slurm
    record counts as the node's when it is of a lendable NodeSet (its feature), or any of
    that name when `lendable_features` is None (not known)."""
    features = None if lendable_features is None else frozenset(lendable_features)
    on_node: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.node:
            on_node.setdefault(pod.node, []).append(pod)
    taint = (markers.taint_key, markers.taint_effect)
    found = {}
    for node in nodes:  # by name where it matters: plan and status sort their own
        slurm = slurm_nodes.get(node.name)
        if slurm is not None and features is not None and not slurm.features & features:
            slurm = None
        here = on_node.get(node.name, ())
        if marks_known:
            label = node.labels.get(markers.lend_label) == markers.lend_label_value
            tainted = taint in node.taints
        else:
            label = tainted = node.journal.state in UNDER_WAY
        if _agrees(node, label, tainted, here, slurm, policy, markers):
            continue  # most nodes: a plan of 50,000 reads each once, quickly
        evidence = evidence_of(node, here, slurm, policy, markers, marks_known)
        condition, resolution = resolve(evidence)
        if condition or resolution:
            found[node.name] = Reconciled(node.name, condition, resolution, evidence)
    return found


def _agrees(
    node: NodeView,
    label: bool,
    tainted: bool,
    pods: Sequence[PodView],
    slurm: SlurmNodeView | None,
    policy: Policy,
    markers: HandoverMarkers,
) -> bool:
    """What resolve() would find ('', '') for, in the two common cases, without building the
    evidence: a free node without a mark or a Slurm record, a lent node with both marks, no
    application pod and a Slurm record nobody of ours or the operator's drained; and a
    node outside the pool without a mark."""
    state = node.journal.state
    if state == JournalState.FREE and not label and not tainted:
        return slurm is None or not matches(node.labels, policy.pool_selector)
    if state != JournalState.LENT or not (label and tainted):
        return False
    if any(is_application_pod(pod, policy) and pod.phase in ("Pending", "Running") for pod in pods):
        return False
    if not matches(node.labels, policy.pool_selector) or (
        policy.never_touch_selector and matches(node.labels, policy.never_touch_selector)
    ):
        return False
    return slurm_record(slurm, markers) not in (
        SlurmRecord.DRAINED_OURS,
        SlurmRecord.DRAINED_OPERATOR,
    )


def what_happens(item: Reconciled, markers: HandoverMarkers) -> str:
    """What a run does about a node's condition, or what a person does."""
    name = item.node
    if item.resolution == Resolution.RESUME:
        return (
            f"rebalance.yml (or any lend.yml or reclaim.yml) finishes the {item.evidence.journal}"
        )
    if item.resolution == Resolution.LEND:
        return (
            "rebalance.yml finishes the lend: the journal and the taint written, slurmd's "
            "registration awaited"
        )
    if item.resolution == Resolution.RECLAIM:
        why = (
            " so that no further application pod lands, and its job(s) keep the partition's "
            "grace before the escalation"
            if item.emergency
            else ""
        )
        return f"rebalance.yml re-taints it{why} and gives it back to the applications"
    if item.resolution == Resolution.CLEAN_ORPHAN:
        return "rebalance.yml drains its Slurm record, then removes it once no job runs there"
    if item.condition == Condition.JOURNAL_CORRUPT:
        return f"fix or remove the annotation {markers.journal_annotation} by hand"
    return (
        "give it back by name: reclaim.yml -e "
        f'\'{{"handover_nodes": ["{name}"]}}\' (or return it to the pool\'s labels)'
    )


def condition_line(item: Reconciled, markers: HandoverMarkers) -> str:
    """One line for people: the node, its condition, the evidence and what happens."""
    head = "EMERGENCY " if item.emergency else ""
    return (
        f"{head}node {item.node}: {item.condition} ({item.evidence.text()}): "
        f"{what_happens(item, markers)}"
    )
