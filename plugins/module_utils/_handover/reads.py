# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a run reads before it acts: the checks against the cluster and the plan.

PRIVATE to the collection: names here can change without notice. handover_check,
handover_plan and handover_run read through these, so a run and its parts agree; the
decisions are the pure functions of ``plan`` and ``options``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import typing as t
from collections.abc import Iterable, Mapping, Sequence

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.demand import (
    LendablePartition,
    PendingJob,
    SlurmQueue,
    is_pending,
    pending_job,
    registered_shape,
    slurmd_limits,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import (
    lendable_nodesets_of,
    nodeset_feature,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import Policy
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    lendable_partitions,
    policy_partition_refusals,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.plan import (
    admin_drains,
    application_pods_on_lent_nodes,
    attention,
    orphans,
    plan,
    status_rows,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reconcile import reconcile
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
    named_node_refusals,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import (
    RUNNING_JOB_STATES,
    node_view,
    pod_view,
    slurm_node_views,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    get_object,
    list_objects,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import job_node_names

JSON = dict[str, t.Any]


def check_against_cluster(
    client: t.Any,
    slurm: t.Any,
    policy: Policy,
    markers: HandoverMarkers,
    *,
    nodes: Sequence[str],
    partitions: Sequence[str] | None,
    lend_label: Mapping[str, t.Any],
    nodeset_namespace: str | None,
    nodesets: Sequence[JSON] | None = None,
) -> JSON:
    """Why the named nodes, and the policy's partitions (None: all it names), cannot be
    used, as handover_check returns it: ``refusals`` (each naming the variable and the fix),
    ``lendable_partitions``, and ``lendable_nodesets`` (their keys). The lendable NodeSets
    are listed unless given (a run reads them once for its check and its plan).
    KubernetesError or SlurmRestError when a read fails."""
    found = {name: get_object(client, "v1", "Node", name) for name in nodes}
    if nodesets is None:
        nodesets = lendable_nodesets_of(client, lend_label, nodeset_namespace)
    keys = [nodeset_feature(nodeset) for nodeset in nodesets]
    refusals = named_node_refusals(nodes, found, policy, markers)
    named = list(policy.partitions) if partitions is None else list(partitions)
    slurm_partitions = slurm.partitions()
    refusals += policy_partition_refusals(named, slurm_partitions, keys)
    return {
        "refusals": refusals,
        "lendable_partitions": lendable_partitions(slurm_partitions, keys),
        "lendable_nodesets": keys,
    }


def read_plan(
    client: t.Any,
    slurm: t.Any,
    policy: Policy,
    *,
    journal_annotation: str,
    lend_label: Mapping[str, t.Any],
    nodeset_namespace: str | None,
    now: float,
    nodesets: Sequence[JSON] | None = None,
    markers: HandoverMarkers | None = None,
    check_partitions: Sequence[str] | None = None,
) -> JSON:
    """The pool, its pods and its Slurm nodes read once, and what handover_plan returns
    from them: the plan, each node's evidence reconciled (reconcile.py), the status rows,
    the orphans and what needs attention. The lendable NodeSets are listed unless given (a
    run's check read them already): their keys name the lendable partitions, their slurmd
    limits what a lent node gives Slurm. `markers` name the lend label, the taint and the
    drain reasons (default: the lend label given, the rest the defaults);
    `check_partitions` are the policy's partitions to check against the cluster as a run
    checks them, into ``refusals`` (None: not checked)."""
    markers = markers or _markers_of(journal_annotation, lend_label)
    nodes = [node_view(obj, journal_annotation) for obj in list_objects(client, "v1", "Node")]
    pods = [pod_view(obj) for obj in list_objects(client, "v1", "Pod")]
    if nodesets is None:
        nodesets = lendable_nodesets_of(client, lend_label, nodeset_namespace)
    features = [nodeset_feature(nodeset) for nodeset in nodesets]
    running, queue = read_slurm_jobs(slurm, features)
    raw_slurm_nodes = slurm.nodes()
    queue = with_node_shapes(queue, raw_slurm_nodes, nodesets, lend_label)
    slurm_nodes = slurm_node_views(raw_slurm_nodes, running, job_node_names)
    reconciled = reconcile(nodes, pods, slurm_nodes, policy, markers, features)
    planned = plan(nodes, pods, slurm_nodes, policy, now, queue, reconciled=reconciled)
    result: JSON = planned.as_dict()
    result["refusals"] = (
        policy_partition_refusals(list(check_partitions), slurm.partitions(), features)
        if check_partitions is not None
        else []
    )
    result["status"] = status_rows(nodes, pods, slurm_nodes, policy, now, reconciled, markers)
    orphaned = orphans(nodes, slurm_nodes, features, pods)
    apps_on_lent = application_pods_on_lent_nodes(nodes, pods, policy)
    result["orphans"] = [orphan.as_dict() for orphan in orphaned]
    result["apps_on_lent_nodes"] = apps_on_lent
    items = attention(
        orphaned,
        apps_on_lent,
        planned.conditions,
        admin_drains(nodes, slurm_nodes, policy),
        markers,
    )
    result["attention_items"] = items
    result["attention"] = [item["line"] for item in items]
    return result


def _markers_of(journal_annotation: str, lend_label: Mapping[str, t.Any]) -> HandoverMarkers:
    """The markers of a read that was given only the journal annotation and the lend label."""
    ((key, value),) = dict(lend_label).items()
    return HandoverMarkers(
        journal_annotation=journal_annotation, lend_label=str(key), lend_label_value=str(value)
    )


def with_node_shapes(
    queue: SlurmQueue,
    slurm_nodes: Sequence[JSON],
    nodesets: Sequence[JSON],
    lend_label: Mapping[str, t.Any],
) -> SlurmQueue:
    """The queue with what Slurm has or will have of a lent node: its record of each node
    it has registered, and the lendable NodeSets' slurmd limits."""
    registered = {
        str(node["name"]): shape
        for node in slurm_nodes
        if (shape := registered_shape(node)) is not None
    }
    limits = tuple(
        slurmd_limits(nodeset, nodeset_feature(nodeset), lend_label) for nodeset in nodesets
    )
    return dataclasses.replace(queue, registered=registered, slurmd=limits)


# What the plan keeps of a running job: where it runs, its partition, when it ends.
RUNNING_JOB_FIELDS = ("job_id", "partition", "state", "end_time", "nodes")


def read_slurm_jobs(slurm: t.Any, nodeset_keys: Sequence[str]) -> tuple[list[JSON], SlurmQueue]:
    """Slurm's running jobs (a few fields each) and its queue for the lendable partitions,
    in one read of the jobs kept small as it arrives, and one of the partitions."""
    partitions = slurm.partitions()
    return running_jobs_and_queue(
        slurm, partitions, set(lendable_partitions(partitions, nodeset_keys))
    )


class QueuePoll:
    """The queue of the named lendable partitions, polled: jobs are read again only when
    slurmctld says some changed (``update_time``), and in full at least every
    `full_every_s` (a change in the second of the last read would otherwise wait for the
    next one), with the partitions' limits."""

    def __init__(
        self,
        lendable: Iterable[str],
        full_every_s: float = 300.0,
        clock: t.Callable[[], float] = time.monotonic,
    ) -> None:
        self.lendable = set(lendable)
        self.full_every_s = full_every_s
        self.clock = clock
        self.queue: SlurmQueue | None = None
        self.reads = self.unchanged = 0  # for the benchmark and the source's log
        self._last_update: int | None = None
        self._full_at = -math.inf

    def read(self, slurm: t.Any) -> SlurmQueue:
        """The queue now: the last one when no job changed, else read again."""
        now = self.clock()
        full = self.queue is None or now - self._full_at >= self.full_every_s
        partitions: Sequence[JSON] = ()
        if full:
            partitions = slurm.partitions()
            self._full_at = now
        pending, last_update = slurm.jobs_since(
            None if full else self._last_update, self._keep_pending
        )
        self.reads += 1
        if pending is None and self.queue is not None:
            self.unchanged += 1
            return self.queue
        self._last_update = last_update
        limits = (
            _partition_limits(partitions, self.lendable)
            if full
            else (self.queue.partitions if self.queue else {})
        )
        self.queue = SlurmQueue(tuple(pending or ()), limits)
        return self.queue

    def _keep_pending(self, job: JSON) -> PendingJob | None:
        return _pending_in(job, self.lendable)


def _pending_in(job: JSON, lendable: set[str]) -> PendingJob | None:
    """The job as demand, when it is pending in one of the lendable partitions (a pending
    job may name several: "batch,backfill")."""
    if is_pending(job) and lendable.intersection(str(job.get("partition")).split(",")):
        return pending_job(job)
    return None


def _partition_limits(
    partitions: Sequence[JSON], lendable: set[str]
) -> dict[str, LendablePartition]:
    return {
        str(part["name"]): LendablePartition(
            str(part["name"]), _seconds(part.get("max_time")), _seconds(part.get("default_time"))
        )
        for part in partitions
        if part.get("name") in lendable
    }


def running_jobs_and_queue(
    slurm: t.Any, partitions: Sequence[JSON], lendable: set[str]
) -> tuple[list[JSON], SlurmQueue]:
    """The running jobs and the queue of the `lendable` partitions, in one read of the jobs."""

    def keep(job: JSON) -> t.Any:
        # Tagged, so that a retried read (which starts the list again) keeps each job once.
        if job.get("state") in RUNNING_JOB_STATES:
            return (True, {key: job.get(key) for key in RUNNING_JOB_FIELDS})
        pending = _pending_in(job, lendable)
        return (False, pending) if pending is not None else None

    kept = slurm.jobs(keep)
    return [item for is_running, item in kept if is_running], SlurmQueue(
        tuple(item for is_running, item in kept if not is_running),
        _partition_limits(partitions, lendable),
    )


def _seconds(minutes: t.Any) -> float | None:
    """A partition's time (minutes, or "infinite"/None: no limit) in seconds."""
    if isinstance(minutes, (int, float)) and not isinstance(minutes, bool):
        return float(minutes) * 60
    return None
