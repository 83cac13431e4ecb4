# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The steps of lending and reclaiming one node, as pure functions (no I/O, no clock).

PRIVATE to the collection.  ``executor`` does the I/O in the order the design fixes;
everything it decides is decided here: the journal it writes, the one patch per
transition (carrying the resourceVersion it read), which pods on a node count, when a
Slurm node is registered or drained, and what the escalation policy does at the deadline.
"""

from __future__ import annotations

import json
import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_bridge import (
    MANAGED_NODE_TAINT as BRIDGE_MANAGED_NODE_TAINT,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ESCALATIONS,
    UNDER_WAY,
    EscalationPolicy,
    Journal,
    JournalState,
    Policy,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    BUSY_STATES,
    is_application_pod,
    pod_view,
)

JSON = dict[str, t.Any]

# The label the Slinky operator puts on a NodeSet pod: the Slurm node name it registers.
SLURM_NODE_NAME_LABEL = "nodeset.slinky.slurm.net/pod-hostname"


@dataclass(frozen=True)
class HandoverMarkers:
    """The names the protocol writes on Nodes and in Slurm (all configurable)."""

    journal_annotation: str = "hpcops.io/handover"
    lend_label: str = "hpcops.io/slurm-lent"
    lend_label_value: str = "true"
    taint_key: str = "hpcops.io/lent"
    taint_value: str = "slurm"
    taint_effect: str = "NoSchedule"
    reason_prefix: str = "hpcops:"
    # The Slinky operator's own drains and DOWNs (a slurmd pod terminating or cordoned): its
    # bookkeeping of the pod's life, not somebody taking the machine out of service.
    operator_reason_prefix: str = "slurm-operator:"
    # Written on the lendable NodeSets to wake the operator (see KubernetesCalls.nudge_nodesets).
    nudge_annotation: str = "hpcops.io/handover-nudge"

    @property
    def taint(self) -> JSON:
        return {"key": self.taint_key, "value": self.taint_value, "effect": self.taint_effect}

    def drain_reason(self, op: str) -> str:
        return f"{self.reason_prefix} reclaim {op}"

    def is_our_reason(self, reason: str) -> bool:
        return reason.startswith(self.reason_prefix)

    def is_admin_reason(self, reason: str) -> bool:
        """A drain reason somebody set to take the node out of service ("hw: ECC errors",
        slurmctld's "Kill task failed"): neither ours nor the Slinky operator's."""
        return bool(reason) and not reason.startswith(
            (self.reason_prefix, self.operator_reason_prefix)
        )


# ---- the Node: journal, taint and label ---------------------------------------------------


def journal_of(node: Mapping[str, t.Any], markers: HandoverMarkers) -> Journal:
    annotations = node.get("metadata", {}).get("annotations") or {}
    return Journal.parse(annotations.get(markers.journal_annotation))


def journal_text(journal: Journal) -> str:
    """The annotation value: compact, keys sorted, unset values left out."""
    data = {
        "state": journal.state,
        "op": journal.op,
        "since": journal.since,
        "by": journal.by,
        "reason": journal.reason,
        "deadline": journal.deadline,
        "last_reclaim": journal.last_reclaim,
        "idle_since": journal.idle_since,
        "admin_drain": journal.admin_drain,
        "lent_at": journal.lent_at,
    }
    kept = {key: value for key, value in data.items() if value not in (None, "")}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"))


def transition(
    previous: Journal,
    state: str,
    op: str,
    now: float,
    by: str,
    reason: str = "",
    deadline: float | None = None,
) -> Journal:
    """The journal after a transition; what outlives one handover (last reclaim, an admin's
    drain until the node is lent again, when a loan began until the node is free) is kept."""
    if state == JournalState.LENT and previous.state != JournalState.LENT:
        lent_at: float | None = round(now, 3)
    elif state in (JournalState.LENT, JournalState.RECLAIMING):
        lent_at = previous.lent_at
    else:
        lent_at = None
    return Journal(
        state=state,
        op=op,
        since=round(now, 3),
        by=by,
        reason=reason,
        deadline=round(deadline, 3) if deadline is not None else None,
        last_reclaim=previous.last_reclaim,
        # A free node that is lent or reclaimed starts its idle time again when it is free.
        idle_since=None,
        admin_drain="" if state == JournalState.LENDING else previous.admin_drain,
        lent_at=lent_at,
    )


def has_taint(node: Mapping[str, t.Any], markers: HandoverMarkers) -> bool:
    return any(
        taint.get("key") == markers.taint_key and taint.get("effect") == markers.taint_effect
        for taint in node.get("spec", {}).get("taints") or []
    )


def has_label(node: Mapping[str, t.Any], markers: HandoverMarkers) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    return labels.get(markers.lend_label) == markers.lend_label_value


def node_patch(
    node: Mapping[str, t.Any],
    markers: HandoverMarkers,
    *,
    journal: Journal | None = None,
    taint: bool | None = None,
    label: bool | None = None,
    cordon: bool | None = None,
) -> JSON:
    """One merge patch for a transition, with the resourceVersion it was computed from.

    The apiserver refuses it (409) if the Node changed since it was read, so of two runs
    only one can make a transition.  None leaves a part as it is.
    """
    meta: JSON = {"resourceVersion": node["metadata"]["resourceVersion"]}
    patch: JSON = {"metadata": meta}
    if journal is not None:
        meta["annotations"] = {markers.journal_annotation: journal_text(journal)}
    if label is not None:
        meta["labels"] = {markers.lend_label: markers.lend_label_value if label else None}
    if taint is not None:
        # A merge patch replaces the whole list: rebuild it from the list that was read.
        others = [
            t_
            for t_ in node.get("spec", {}).get("taints") or []
            if not (t_.get("key") == markers.taint_key and t_.get("effect") == markers.taint_effect)
            # slurm-bridge taints a node while Slurm has a node of its name (a lent one too)
            # and drops the taint only when it next looks, seen a minute and more later: a
            # node given back has no Slurm node any more, so the taint goes with ours.
            and not (not taint and t_.get("key") == BRIDGE_MANAGED_NODE_TAINT)
        ]
        patch["spec"] = {"taints": [*others, markers.taint] if taint else others}
    if cordon is not None:
        patch.setdefault("spec", {})["unschedulable"] = cordon
    return patch


def pool_refusal(node: Mapping[str, t.Any], policy: Policy) -> str | None:
    """Why a free node may never be handed over (lent, or reclaimed), or None."""
    labels = node.get("metadata", {}).get("labels") or {}
    if not matches(labels, policy.pool_selector):
        return f"not in the lendable pool (pool_selector {dict(policy.pool_selector)})"
    if policy.never_touch_selector and matches(labels, policy.never_touch_selector):
        return "matches never_touch_selector"
    return None


def ours_to_finish(node: Mapping[str, t.Any], markers: HandoverMarkers) -> bool:
    """A handover of ours is under way on the node, or a mark of ours is on it (a Node that
    came back with the lend label or the taint, not the journal): finish it, whatever its
    labels say now (a lent node that was relabelled out of the pool must still come back)."""
    return (
        journal_of(node, markers).state in UNDER_WAY
        or has_label(node, markers)
        or has_taint(node, markers)
    )


def named_node_refusals(
    names: Sequence[str],
    found: Mapping[str, Mapping[str, t.Any] | None],
    policy: Policy,
    markers: HandoverMarkers,
    variable: str = "handover_nodes",
) -> list[str]:
    """Why each named node cannot be lent or reclaimed, checked before a run takes the Lease
    (lend and reclaim refuse the same nodes the same way). `found` maps a name to its Node,
    or None when there is no such Node."""
    problems = []
    for index, name in enumerate(names):
        node = found.get(name)
        where = f"{variable}[{index}]: {name}"
        if node is None:
            problems.append(f"{where}: no such Node; name a node of the lendable pool")
            continue
        refusal = None if ours_to_finish(node, markers) else pool_refusal(node, policy)
        if refusal:
            problems.append(f"{where}: {refusal}; name a node of the lendable pool")
    return problems


# ---- the pods on a node ---------------------------------------------------------------------


def is_slurmd_pod(pod: Mapping[str, t.Any]) -> bool:
    """A pod of a Slinky NodeSet, whatever its phase."""
    return pod_view(pod).slurmd


def runs_slurmd(pod: Mapping[str, t.Any]) -> bool:
    """A slurmd pod that holds its node: not yet stopped for good (views.TERMINAL_POD_PHASES)."""
    return pod_view(pod).live_slurmd


def application_pods(pods: Sequence[Mapping[str, t.Any]], policy: Policy) -> list[str]:
    """namespace/name of the live application pods among a node's pods."""
    found = []
    for pod in pods:
        view = pod_view(pod)
        if view.phase in ("Pending", "Running") and is_application_pod(view, policy):
            found.append(f"{view.namespace}/{view.name}")
    return sorted(found)


def slurm_node_name(node_name: str, pods: Sequence[Mapping[str, t.Any]]) -> str:
    """The Slurm name of the node's slurmd: the operator's hostname label, else the Node's."""
    for pod in pods:
        if is_slurmd_pod(pod):
            name = (pod.get("metadata", {}).get("labels") or {}).get(SLURM_NODE_NAME_LABEL)
            if name:
                return str(name)
    return node_name


# ---- the Slurm node -------------------------------------------------------------------------


class Registration:
    """How far a lent node's slurmd is with registering in Slurm."""

    REGISTERED: t.Final = "registered"  # lend is done: slurmd registered, the node not DOWN
    WAITING: t.Final = "waiting"
    # slurmctld refused what slurmd reported, for example GRES it cannot find: waiting
    # longer will not help
    INVALID: t.Final = "invalid"


def registration(slurm_node: Mapping[str, t.Any] | None) -> str:
    """The Registration of a Slurm node (None: no such node yet)."""
    if slurm_node is None:
        return Registration.WAITING
    flags = set(slurm_node["state_flags"])
    if "INVALID_REG" in flags:
        return Registration.INVALID
    if slurm_node["state"] in ("DOWN", "FUTURE", "UNKNOWN") or flags & {
        "NOT_RESPONDING",
        "POWERED_DOWN",
    }:
        return Registration.WAITING
    return Registration.REGISTERED


def slurm_drained(slurm_node: Mapping[str, t.Any] | None) -> bool:
    """Reclaim may go on: no work left on the node, and none can start (or no node at all)."""
    if slurm_node is None:
        return True
    held = "DRAIN" in slurm_node["state_flags"] or slurm_node["state"] == "DOWN"
    busy = slurm_node["state"] in BUSY_STATES or "COMPLETING" in slurm_node["state_flags"]
    return held and not busy


@dataclass(frozen=True)
class Escalation:
    """What the deadline does to the jobs still on a node."""

    cancel: tuple[int, ...] = ()  # jobs of `cancel` partitions: cancelled
    requeue: tuple[int, ...] = ()  # jobs of `requeue` partitions: the node goes DOWN
    waiting: tuple[int, ...] = ()  # jobs of `wait` partitions: never touched
    lost: tuple[int, ...] = ()  # `requeue` jobs Slurm cannot requeue: DOWN ends them

    @property
    def down(self) -> bool:
        """Mark the node DOWN: never while a `wait` job runs, since DOWN ends every job."""
        return bool(self.requeue) and not self.waiting

    @property
    def blocked(self) -> bool:
        return bool(self.waiting)

    def report(self) -> dict[str, list[int]]:
        down = self.down
        return {
            "cancelled": list(self.cancel),
            "requeued": [j for j in self.requeue if j not in self.lost] if down else [],
            "ended_not_requeueable": list(self.lost) if down else [],
            "waiting": list(self.waiting),
            "left_running": [] if down else list(self.requeue),
        }


def escalation(jobs: Sequence[Mapping[str, t.Any]], policy: Policy) -> Escalation:
    """The escalation at the deadline for the jobs running on one node.

    A job of a `wait` partition is never touched; since marking a node DOWN ends every job
    on it, a node that runs one is not marked DOWN either: only `cancel` jobs are ended
    (one by one) and the node stays blocked until the waiting jobs end.
    """
    chosen: dict[str, list[int]] = {name: [] for name in ESCALATIONS}
    lost: list[int] = []
    for job in sorted(jobs, key=lambda j: int(j["job_id"])):
        job_id = int(job["job_id"])
        policy_name = policy.partition(str(job["partition"])).escalation
        chosen[policy_name].append(job_id)
        if policy_name == EscalationPolicy.REQUEUE and not (
            job.get("requeue") and job.get("batch")
        ):
            lost.append(job_id)
    return Escalation(
        cancel=tuple(chosen[EscalationPolicy.CANCEL]),
        requeue=tuple(chosen[EscalationPolicy.REQUEUE]),
        waiting=tuple(chosen[EscalationPolicy.WAIT]),
        lost=tuple(lost),
    )


def grace_deadline(partitions: Sequence[str], policy: Policy, now: float) -> float:
    """now + the longest grace of the node's partitions (the default one when it has none)."""
    graces = [policy.partition(name).grace_s for name in partitions] or [
        policy.default_partition.grace_s
    ]
    return now + max(graces)
