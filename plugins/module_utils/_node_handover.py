# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lending and reclaiming nodes: the I/O of the handover protocol, step by step.

PRIVATE to the collection.  The order of the steps is the design's (docs: handover); what
each step decides comes from ``_handover_protocol``.  Every step reads what the last one
left, so a run that stopped anywhere is finished by the next one; every Node write carries
the resourceVersion it was computed from, so two runs never both make a transition.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import typing as t
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._handover_plan import (
    Journal,
    Policy,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover_protocol import (
    Marks,
    application_pods,
    escalation,
    grace_deadline,
    has_label,
    is_slurmd_pod,
    journal_of,
    node_patch,
    pool_refusal,
    registration,
    slurm_drained,
    slurm_node_name,
    transition,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._kubernetes import (
    Conflict,
    KubernetesError,
    delete_object,
    get_object,
    list_objects,
    patch_object,
    write_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._lease import microtime
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm_node_change import (
    NodeRequest,
    plan_node_change,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm_query import job_node_names
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmrestd import (
    SlurmConnectionError,
    SlurmRequestError,
    SlurmRestError,
)

JSON = dict[str, t.Any]

# Tests stop a run right after the named step (`lend:label`, `reclaim:drain`, ...), as a
# crash would, to show that the next run finishes the handover.
FAULT_ENV = "HPCOPS_HANDOVER_FAULT"
FAULT_EXIT = 75
DEFAULT_POD_GRACE_S = 30  # Kubernetes' terminationGracePeriodSeconds when a pod sets none
CONFLICT_RETRIES = 5
SHARED_READS_FROM = 4  # workers polling at once from which they share one read of all nodes
# slurmrestd answers these when it, or slurmctld behind it, is briefly out of reach.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
NODESET_API = "slinky.slurm.net/v1beta1"
LEND_STEPS = ("taint", "recheck", "label", "registered")
RECLAIM_STEPS = (
    "journal",
    "drain",
    "drained",
    "escalate",
    "unlabel",
    "pod_gone",
    "slurm_removed",
    "free",
)


@dataclass(frozen=True)
class Settings:
    marks: Marks
    policy: Policy
    by: str  # who acts: written in the journal and the Events
    lend_timeout_s: float = 120.0
    pod_timeout_s: float = 30.0
    poll_s: float = 0.5
    event_namespace: str = "default"
    nodeset_namespace: str | None = None  # where the NodeSets are; None: every namespace
    check_mode: bool = False
    fault: str = ""


@dataclass
class Outcome:
    """What happened to one node; `result` is where the node ended."""

    node: str
    action: str
    # lent, free, rolled_back, blocked, failed, refused, skipped or unchanged; for orphans
    # draining or removed
    result: str = "unchanged"
    op: str = ""
    slurm_node: str = ""
    steps: list[str] = field(default_factory=list)
    message: str = ""
    jobs: dict[str, list[int]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    started: float = 0.0
    uid: str = ""  # the Node's, for its Events
    timeline: dict[str, float] = field(default_factory=dict)  # step -> seconds after start
    changed: bool = False

    def as_dict(self) -> JSON:
        return {
            "node": self.node,
            "action": self.action,
            "result": self.result,
            "op": self.op,
            "slurm_node": self.slurm_node,
            "steps": list(self.steps),
            "message": self.message,
            "jobs": dict(self.jobs),
            "seconds": round(self.seconds, 2),
            "timeline": {step: round(at, 2) for step, at in self.timeline.items()},
            "changed": self.changed,
        }


class Refused(Exception):
    """The node may not take this step; the message says why."""


class StepFailed(Exception):
    """A step did not finish in its time; the journal keeps the node where it is."""


class Skipped(Refused):
    """Another run changed the node first: not an error, that run owns the step."""


class Kube:
    """The few Kubernetes calls the protocol makes, on kubernetes.core's client."""

    def __init__(self, client: t.Any, connections: int = 8) -> None:
        self.client = client
        # Resolve the kinds once: discovery is not safe to run from several threads.
        for kind in ("Node", "Pod", "Event"):
            client.resource(kind, "v1")
        # One connection per worker: the client keeps 10 by default (5 per CPU), and a
        # connection it cannot keep is closed, so each further call would pay a new TLS
        # handshake.
        pool_manager = getattr(getattr(client.client, "client", None), "rest_client", None)
        pool_manager = getattr(pool_manager, "pool_manager", None)
        if pool_manager is not None and connections > pool_manager.connection_pool_kw.get(
            "maxsize", 1
        ):
            pool_manager.connection_pool_kw["maxsize"] = connections
            pool_manager.clear()

    def node(self, name: str) -> JSON | None:
        return get_object(self.client, "v1", "Node", name)

    def patch_node(self, name: str, patch: JSON) -> JSON:
        return patch_object(self.client, "v1", "Node", name, patch)

    def pods_on(self, name: str) -> list[JSON]:
        return list_objects(self.client, "v1", "Pod", field_selector=f"spec.nodeName={name}")

    def delete_pod(self, pod: Mapping[str, t.Any]) -> None:
        meta = pod["metadata"]
        delete_object(
            self.client, "v1", "Pod", meta["name"], meta["namespace"], meta["resourceVersion"]
        )

    def event(self, body: JSON) -> None:
        write_object(self.client, body, create=True)

    def nudge_nodesets(
        self, label: str, value: str, annotation: str, op: str, namespace: str | None = None
    ) -> list[str]:
        """Touch the NodeSets that select the lend label, so the operator reconciles now.

        Slinky 1.1's Node watch only wakes NodeSets that already have a pod on the Node; a
        newly labelled node would wait for the NodeSet's next periodic reconcile (about 25 s
        in the lab).  An annotation change on the NodeSet wakes its reconcile at once.
        """
        touched = []
        for nodeset in lendable_nodesets(self.client, label, value, namespace):
            meta = nodeset["metadata"]
            patch_object(
                self.client,
                NODESET_API,
                "NodeSet",
                meta["name"],
                {"metadata": {"annotations": {annotation: op}}},
                meta["namespace"],
            )
            touched.append(f"{meta['namespace']}/{meta['name']}")
        return touched


def lendable_nodesets(
    client: t.Any, label: str, value: str, namespace: str | None = None
) -> list[JSON]:
    """The Slinky NodeSets whose pods select the lend label: those that run slurmd on lent
    nodes."""
    return [
        nodeset
        for nodeset in list_objects(client, NODESET_API, "NodeSet", namespace)
        if (nodeset_pod_spec(nodeset).get("nodeSelector") or {}).get(label) == value
    ]


def nodeset_pod_spec(nodeset: Mapping[str, t.Any]) -> JSON:
    spec: JSON = ((nodeset.get("spec") or {}).get("template") or {}).get("spec") or {}
    return spec


def nodeset_feature(nodeset: Mapping[str, t.Any]) -> str:
    """The Slurm feature Slinky gives a NodeSet's slurmd nodes: the pods' hostname prefix
    without its dash, else the NodeSet's name (as the operator's slurmd arguments do)."""
    hostname = str(nodeset_pod_spec(nodeset).get("hostname") or "").strip("-")
    return hostname or str((nodeset.get("metadata") or {}).get("name", ""))


class SharedNodeReads:
    """The workers' Slurm node reads, served from one read of every node.

    Each worker polls its node while it waits (drained? registered?); with 32 workers that
    was 32 calls to slurmrestd per poll, each slower the more there were.  Here a worker
    gets the node from the newest read of all nodes, if that read started after the worker's
    own last write and no longer than max_age_s ago; else it makes a new read, which the
    workers that ask meanwhile share.  Writes and job calls go straight through.
    """

    def __init__(
        self, slurm: t.Any, max_age_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.slurm = slurm
        self.max_age_s = max_age_s
        self.clock = clock
        self.reads = 0  # reads of all nodes made, for tests and the benchmark
        self._lock = threading.Lock()
        self._started = float("-inf")  # when the newest read was sent
        self._nodes: dict[str, JSON] = {}
        self._written = threading.local()  # this worker's last write

    def node(self, name: str) -> JSON | None:
        wanted = max(self.clock() - self.max_age_s, getattr(self._written, "at", float("-inf")))
        with self._lock:  # one read at a time; who waited finds it fresh enough
            if self._started < wanted:
                started = self.clock()
                self._nodes = {node["name"]: node for node in self.slurm.nodes()}
                self._started = started
                self.reads += 1
            return self._nodes.get(name)

    def _write(self, call: Callable[..., t.Any], *args: t.Any) -> None:
        try:
            call(*args)
        finally:
            # A read sent after this instant sees the write; one sent before may not.
            self._written.at = self.clock()

    def update_node(self, name: str, changes: JSON) -> None:
        self._write(self.slurm.update_node, name, changes)

    def delete_node(self, name: str) -> None:
        self._write(self.slurm.delete_node, name)

    def signal_job(self, job_id: int | str, signal: str = "SIGKILL") -> None:
        self._write(self.slurm.signal_job, job_id, signal)

    def jobs(self) -> list[JSON]:
        jobs: list[JSON] = self.slurm.jobs()
        return jobs


def slurm_for_workers(
    slurm: t.Any, workers: int, poll_s: float, shared_from: int = SHARED_READS_FROM
) -> t.Any:
    """The Slurm client for this many workers: shared reads from shared_from workers on
    (0: never). Below it a node's own read is cheaper than a read of every node, which at a
    site of thousands is megabytes."""
    return SharedNodeReads(slurm, poll_s) if 0 < shared_from <= workers else slurm


def transient(err: SlurmRestError) -> bool:
    """An outage that may pass: slurmrestd unreachable, or slurmctld behind it."""
    return isinstance(err, SlurmConnectionError) or (
        isinstance(err, SlurmRequestError) and err.status in TRANSIENT_STATUSES
    )


class PatientSlurm:
    """The Slurm calls of the handover, riding out an outage until the step's deadline.

    The client retries a request a few times (about 7 s); a reclaim with minutes of grace
    left should not fail for an outage shorter than that grace.  Each worker thread names
    the deadline of the step it is in (`until`); a call that meets an outage waits, with
    backoff and a note each time, and tries again until that deadline, then fails with the
    client's own error.
    """

    def __init__(
        self,
        inner: t.Any,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        first_wait_s: float = 1.0,
        longest_wait_s: float = 15.0,
    ) -> None:
        self.inner = inner
        self.clock = clock
        self.sleep = sleep
        self.first_wait_s = first_wait_s
        self.longest_wait_s = longest_wait_s
        self._step = threading.local()

    def until(self, deadline: float, notes: list[str]) -> None:
        """This thread's calls wait out outages until `deadline`, noting each wait."""
        self._step.deadline = deadline
        self._step.notes = notes

    def _call(self, call: Callable[..., t.Any], *args: t.Any) -> t.Any:
        wait = self.first_wait_s
        while True:
            try:
                return call(*args)
            except SlurmRestError as err:
                left = getattr(self._step, "deadline", float("-inf")) - self.clock()
                if not transient(err) or left <= 0:
                    raise
                pause = min(wait, left)
                self._step.notes.append(
                    f"{str(err).split(';', 1)[0]}; trying again in {pause:.0f} s "
                    f"({left:.0f} s left before this step's deadline)"
                )
                self.sleep(pause)
                wait = min(wait * 2, self.longest_wait_s)

    def node(self, name: str) -> JSON | None:
        node: JSON | None = self._call(self.inner.node, name)
        return node

    def jobs(self) -> list[JSON]:
        jobs: list[JSON] = self._call(self.inner.jobs)
        return jobs

    def update_node(self, name: str, changes: JSON) -> None:
        self._call(self.inner.update_node, name, changes)

    def delete_node(self, name: str) -> None:
        self._call(self.inner.delete_node, name)

    def signal_job(self, job_id: int | str, signal: str = "SIGKILL") -> None:
        self._call(self.inner.signal_job, job_id, signal)


class Handover:
    """Lends, reclaims or resumes one node at a time; safe to call from several threads."""

    def __init__(
        self,
        kube: Kube,
        slurm: t.Any,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.slurm = PatientSlurm(slurm, clock, sleep)
        self.settings = settings
        self.marks = settings.marks
        self.clock = clock
        self.sleep = sleep

    # -- entry points --------------------------------------------------------------------

    def run(self, name: str, action: str) -> Outcome:
        """Lend, reclaim or resume one node."""
        outcome = Outcome(node=name, action=action)
        return self._guarded(outcome, lambda: self._dispatch(outcome))

    def mark_idle(self, name: str, idle_since: float | None) -> Outcome:
        """Record in a free node's journal since when it runs no application pod (None:
        busy again), for the planner's lend_min_idle_s."""
        outcome = Outcome(node=name, action="mark_idle")
        return self._guarded(outcome, lambda: self._mark_idle(outcome, idle_since))

    def clean_orphan(self, name: str) -> Outcome:
        """Drain the Slurm node of a lent Node that was deleted, and remove its record once
        no job runs there (the next run looks again while jobs run)."""
        outcome = Outcome(node=name, action="clean_orphans", slurm_node=name)
        return self._guarded(outcome, lambda: self._clean_orphan(outcome))

    def _guarded(self, outcome: Outcome, body: Callable[[], None]) -> Outcome:
        """Run one node's work; its errors end that node's outcome, not the other nodes'."""
        started = outcome.started = self.clock()
        try:
            body()
        except Skipped as err:
            outcome.result = "skipped"
            outcome.message = str(err)
        except Refused as err:
            outcome.result = "refused"
            outcome.message = str(err)
        except (KubernetesError, SlurmRestError, StepFailed) as err:
            outcome.result = "failed"
            outcome.message = f"{err}; the journal keeps the step, the next run resumes it"
        finally:
            outcome.seconds = self.clock() - started
        return outcome

    def _dispatch(self, outcome: Outcome) -> None:
        node = self._node(outcome.node)
        outcome.uid = node["metadata"].get("uid", "")
        journal = journal_of(node, self.marks)
        if journal.state == "corrupt":
            raise Refused(f"{journal.reason}; fix or remove the annotation by hand")
        action = outcome.action
        if action == "resume":
            action = {"lending": "lend", "reclaiming": "reclaim"}.get(journal.state, "")
            if not action:
                outcome.message = f"nothing to finish: the node is {journal.state}"
                return
        if action == "lend":
            self._lend(node, journal, outcome)
        else:
            self._reclaim(node, journal, outcome, "")

    def _mark_idle(self, outcome: Outcome, idle_since: float | None) -> None:
        if self.settings.check_mode:
            outcome.changed = True
            return

        def mark(current: JSON) -> JSON:
            journal = journal_of(current, self.marks)
            if journal.state != "free" or journal.idle_since == idle_since:
                raise Skipped(f"the node is {journal.state} now")
            return node_patch(
                current, self.marks, journal=dataclasses.replace(journal, idle_since=idle_since)
            )

        self._transition(outcome.node, mark)
        outcome.changed = True

    def _clean_orphan(self, outcome: Outcome) -> None:
        name = outcome.node
        if self.kube.node(name) is not None:
            raise Skipped("it has a Kubernetes Node again: the handover owns it")
        self.slurm.until(self.clock() + self.settings.pod_timeout_s, outcome.warnings)
        slurm_node = self.slurm.node(name)
        if slurm_node is None:
            outcome.result = "removed"
            outcome.message = "no such Slurm node (any more)"
            return
        if self._would(outcome, "removed", ("drain", "remove")):
            return
        held = "DRAIN" in slurm_node["state_flags"] or slurm_node["state"] == "DOWN"
        if not held:
            self.slurm.update_node(
                name,
                {
                    "state": ["DRAIN"],
                    "reason": f"{self.marks.reason_prefix} orphan: its Kubernetes Node is gone",
                },
            )
            outcome.steps.append("drain")
            outcome.changed = True
            slurm_node = self.slurm.node(name)
        if not slurm_drained(slurm_node):
            outcome.result = "draining"
            outcome.message = "drained; jobs still run, its record goes once they end"
            return
        if slurm_node is not None:
            self.slurm.delete_node(name)
            outcome.steps.append("remove")
            outcome.changed = True
        outcome.result = "removed"
        outcome.message = "record removed: no Kubernetes Node, no job"

    # -- lend ------------------------------------------------------------------------------

    def _lend(self, node: JSON, journal: Journal, outcome: Outcome) -> None:
        name = outcome.node
        self.slurm.until(self.clock() + self.settings.lend_timeout_s, outcome.warnings)
        if journal.state == "lent":
            outcome.result = "lent"
            outcome.message = "already lent"
            return
        if journal.state == "reclaiming":
            raise Refused(f"being reclaimed (op {journal.op}); finish that first (action resume)")
        if journal.state == "free":
            self._lendable(node, self.kube.pods_on(name))
            if self._would(outcome, "lent", LEND_STEPS):
                return
            op = new_op()
            outcome.op = op

            def lending(current: JSON) -> JSON:
                now_journal = journal_of(current, self.marks)
                if now_journal.state != "free":
                    raise Skipped(f"another run took the node first ({now_journal.state})")
                after = transition(now_journal, "lending", op, self.clock(), self.settings.by)
                return node_patch(current, self.marks, journal=after, taint=True)

            node = self._transition(name, lending)
            self._step(
                outcome, "taint", "Lending", f"journal lending, taint {self.marks.taint_key}"
            )
        else:  # lending: an earlier run stopped here
            outcome.op = journal.op
            if self._would(outcome, "lent", LEND_STEPS[1:]):
                return
        self._finish_lend(node, outcome)

    def _finish_lend(self, node: JSON, outcome: Outcome) -> None:
        """Lend steps 3 to 5, on a node journalled `lending` and tainted."""
        name = outcome.node
        # Step 3: an application pod the scheduler bound before the taint wins the node.
        pods = self.kube.pods_on(name)
        apps = application_pods(pods, self.settings.policy)
        if apps:
            reason = f"application pod(s) {', '.join(apps)} bound before the taint"
            if has_label(node, self.marks):  # slurmd may run already: give back safely
                self._reclaim(node, journal_of(node, self.marks), outcome, reason)
            else:
                self._free(name, outcome, reason, reclaimed=False)
            outcome.result = "rolled_back"
            outcome.message = reason
            return
        self._step(outcome, "recheck")

        if not has_label(node, self.marks):
            node = self._transition(
                name, lambda current: node_patch(current, self.marks, label=True)
            )
            self._step(outcome, "label", "", f"label {self.marks.lend_label}")
        if not any(is_slurmd_pod(pod) for pod in pods):
            try:
                self.kube.nudge_nodesets(
                    self.marks.lend_label,
                    self.marks.lend_label_value,
                    self.marks.nudge_annotation,
                    outcome.op,
                    self.settings.nodeset_namespace,
                )
            except KubernetesError as err:  # only slower: the operator gets there on its own
                outcome.warnings.append(f"could not wake the NodeSets: {err}")

        found = self._wait(lambda: self._registration(name), self.settings.lend_timeout_s)
        slurm_name, state, slurm_reason = found or ("", "waiting", "")
        if state != "registered":
            reason = (
                f"slurmctld refused slurmd's registration ({slurm_reason or 'INVALID_REG'})"
                if state == "invalid"
                else f"slurmd did not register within lend_timeout_s "
                f"{self.settings.lend_timeout_s:g}"
            )
            node = self._node(name)
            self._reclaim(node, journal_of(node, self.marks), outcome, reason)
            outcome.result = "failed"
            outcome.message = reason + "; given back"
            return
        outcome.slurm_node = slurm_name

        def lent(current: JSON) -> JSON:
            now_journal = journal_of(current, self.marks)
            if now_journal.state != "lending" or now_journal.op != outcome.op:
                raise Skipped(f"the journal changed meanwhile ({now_journal.state})")
            after = transition(now_journal, "lent", outcome.op, self.clock(), self.settings.by)
            return node_patch(current, self.marks, journal=after)

        self._transition(name, lent)
        self._step(outcome, "registered", "Lent", f"Slurm node {slurm_name} registered")
        outcome.result = "lent"

    def _lendable(self, node: JSON, pods: list[JSON]) -> None:
        refusal = pool_refusal(node, self.settings.policy)
        if refusal:
            raise Refused(refusal)
        conditions = {
            c.get("type"): c.get("status") for c in node.get("status", {}).get("conditions") or []
        }
        if conditions.get("Ready") != "True":
            raise Refused("not Ready")
        if node.get("spec", {}).get("unschedulable"):
            raise Refused("cordoned")
        apps = application_pods(pods, self.settings.policy)
        if apps:
            raise Refused(f"runs application pod(s) {', '.join(apps)}")

    def _registration(self, name: str) -> tuple[str, str, str] | None:
        """(Slurm node name, registration, Slurm's reason) once slurmd registered or was
        refused; None while it is still on its way."""
        pods = self.kube.pods_on(name)
        if not any(is_slurmd_pod(pod) for pod in pods):
            return None  # a Slurm node of that name without a slurmd pod is a leftover
        slurm_name = slurm_node_name(name, pods)
        slurm_node = self.slurm.node(slurm_name)
        state = registration(slurm_node)
        if state == "waiting":
            return None
        return slurm_name, state, (slurm_node or {}).get("reason", "")

    # -- reclaim ---------------------------------------------------------------------------

    def _reclaim(self, node: JSON, journal: Journal, outcome: Outcome, reason: str) -> None:
        name = outcome.node
        if journal.state == "free":
            # Refused as lend refuses it: a node the pool does not hold was never ours.
            refusal = pool_refusal(node, self.settings.policy)
            if refusal:
                raise Refused(refusal)
            outcome.result = "free"
            outcome.message = "not lent"
            return
        pods = self.kube.pods_on(name)
        slurm_name = slurm_node_name(name, pods)
        outcome.slurm_node = slurm_name
        # Until the node's own deadline is known, no step can need longer than the longest grace.
        self.slurm.until(self.clock() + longest_grace(self.settings.policy), outcome.warnings)
        if journal.state in ("lending", "lent"):
            if self._would(outcome, "free", RECLAIM_STEPS):
                return
            op = new_op()
            slurm_node = self.slurm.node(slurm_name)
            partitions = slurm_node["partitions"] if slurm_node else []
            deadline = grace_deadline(partitions, self.settings.policy, self.clock())
            outcome.op = op

            def reclaiming(current: JSON) -> JSON:
                now_journal = journal_of(current, self.marks)
                if now_journal.state not in ("lending", "lent"):
                    raise Skipped(f"another run took the node first ({now_journal.state})")
                after = transition(
                    now_journal, "reclaiming", op, self.clock(), self.settings.by, reason, deadline
                )
                return node_patch(current, self.marks, journal=after)

            self._transition(name, reclaiming)
            self._step(
                outcome,
                "journal",
                "Reclaiming",
                f"journal reclaiming, deadline in {deadline - self.clock():.0f} s",
            )
        else:  # reclaiming: an earlier run stopped here, or a `wait` job blocked it
            outcome.op = journal.op
            deadline = journal.deadline if journal.deadline is not None else self.clock()
            if self._would(outcome, "free", RECLAIM_STEPS[1:]):
                return

        # Draining and waiting for the jobs may take until the deadline; a step resumed past
        # it still gets the time of a pod step to ride out an outage.
        self.slurm.until(
            max(deadline, self.clock() + self.settings.pod_timeout_s), outcome.warnings
        )
        self._drain(slurm_name, outcome)
        self._step(outcome, "drain")
        drained = self._wait(
            lambda: self._held(slurm_name, outcome), max(deadline - self.clock(), 0.0)
        )
        if not drained and not self._escalate(slurm_name, outcome):
            return
        self._step(outcome, "drained")
        self._give_back(name, slurm_name, outcome)

    def _drain(self, slurm_name: str, outcome: Outcome) -> None:
        slurm_node = self.slurm.node(slurm_name)
        if slurm_node is None:
            return
        if "DRAIN" in slurm_node["state_flags"] and self.marks.is_our_reason(slurm_node["reason"]):
            return  # drained by an earlier step of ours
        request = NodeRequest(
            state="drain",
            reason=self.marks.drain_reason(outcome.op),
            reason_prefix=self.marks.reason_prefix,
        )
        change = plan_node_change(slurm_name, slurm_node, request)
        if change.foreign_reason:
            # Somebody else's drain keeps jobs off too; keep it and say so.
            outcome.warnings.append(f"kept the drain of someone else: {change.foreign_reason!r}")
        if change.action == "update":
            try:
                self.slurm.update_node(slurm_name, change.body)
            except SlurmRestError as err:
                # The operator may replace the slurmd pod at any time (it does when a pod
                # looks healthy but its node has not registered yet): the node may be gone,
                # or registering anew. The wait that follows drains it again if need be.
                outcome.warnings.append(f"drain of Slurm node {slurm_name} failed ({err})")
                return
            outcome.changed = True

    def _held(self, slurm_name: str, outcome: Outcome) -> bool:
        """Drained and idle; a node that lost its drain while we wait is drained again.

        That happens when slurmd registers anew (its pod was re-created, for example after
        the Node was NotReady for a while: a dynamic node comes back without the drain), or
        when somebody resumed it by hand. The node is still ours to reclaim, and no job may
        start on it meanwhile.
        """
        slurm_node = self.slurm.node(slurm_name)
        if slurm_node is not None and not (
            "DRAIN" in slurm_node["state_flags"] or slurm_node["state"] == "DOWN"
        ):
            outcome.warnings.append(f"Slurm node {slurm_name} lost its drain; drained it again")
            self._drain(slurm_name, outcome)
            slurm_node = self.slurm.node(slurm_name)
        return slurm_drained(slurm_node)

    def _escalate(self, slurm_name: str, outcome: Outcome) -> bool:
        """Apply the policy at the deadline; False when the node stays blocked."""
        self.slurm.until(self.clock() + self.settings.pod_timeout_s, outcome.warnings)
        jobs = [
            job
            for job in self.slurm.jobs()
            if job["state"] in ("RUNNING", "COMPLETING", "SUSPENDED")
            and slurm_name in job_node_names(job)
        ]
        decided = escalation(jobs, self.settings.policy)
        for job_id in decided.cancel:
            self.slurm.signal_job(job_id, "SIGKILL")
        if decided.down:
            self.slurm.update_node(
                slurm_name,
                {
                    "state": ["DOWN"],
                    "reason": f"{self.marks.drain_reason(outcome.op)}: requeue at the deadline",
                },
            )
        outcome.jobs = decided.report()
        if decided.cancel or decided.down:
            outcome.changed = True
            self._step(
                outcome,
                "escalate",
                "Escalated",
                f"deadline passed: cancelled {outcome.jobs['cancelled']}, "
                f"requeued {outcome.jobs['requeued']}, "
                f"ended (not requeueable) {outcome.jobs['ended_not_requeueable']}",
                warning=True,
            )
        if decided.blocked:
            outcome.result = "blocked"
            outcome.message = (
                f"jobs {list(decided.waiting)} of a `wait` partition still run; the node stays "
                "reclaiming and the next run looks again"
            )
            self._event(outcome, "Blocked", outcome.message, warning=True)
            return False
        if not self._wait(lambda: self._held(slurm_name, outcome), self.settings.pod_timeout_s):
            raise StepFailed(
                f"jobs still run on Slurm node {slurm_name} {self.settings.pod_timeout_s:g} s "
                "after the escalation"
            )
        return True

    def _give_back(self, name: str, slurm_name: str, outcome: Outcome) -> None:
        """Reclaim steps 5 to 8: label off, slurmd pod gone, Slurm record gone, taint off."""
        node = self._node(name)
        if has_label(node, self.marks):
            self._transition(name, lambda current: node_patch(current, self.marks, label=False))
            self._step(outcome, "unlabel", "", f"label {self.marks.lend_label} removed")

        def slurmd_gone() -> bool:
            return not [pod for pod in self.kube.pods_on(name) if is_slurmd_pod(pod)]

        # The Slurm node is drained and idle and no NodeSet selects the node any more, so the
        # pod goes now: the operator would delete it too, but only after its next look at
        # Slurm (2 to 7 s in kind). A pod it re-creates from a view that still has the label
        # cannot be bound: its node selector wants the label the scheduler no longer sees.
        # Right after a DOWN escalation the job's processes still run in the container
        # (Slurm does not signal a DOWN node), and slurmd given SIGTERM then may hold its pod
        # for the whole termination grace (measured in kind): the operator's pace first.
        if "escalate" in outcome.steps:
            self._wait(slurmd_gone, self.settings.pod_timeout_s)
        grace_s = self._delete_slurmd_pods(name)
        if not self._wait(slurmd_gone, grace_s + self.settings.pod_timeout_s):
            raise StepFailed(
                f"the slurmd pod on {name} is still there {grace_s + self.settings.pod_timeout_s:g} s "
                f"after it was deleted (its termination grace {grace_s:g} s and pod_timeout_s)"
            )
        self._step(outcome, "pod_gone")
        self.slurm.until(self.clock() + self.settings.pod_timeout_s, outcome.warnings)
        if self.slurm.node(slurm_name) is not None:
            try:
                self.slurm.delete_node(slurm_name)
            except SlurmRestError:
                # slurmd's preStop hook may have removed it between the look and the delete.
                if self.slurm.node(slurm_name) is not None:
                    raise
            self._step(outcome, "slurm_removed", "", f"Slurm node {slurm_name} deleted")
        self._free(name, outcome, "", reclaimed=True)
        outcome.result = "free"

    def _delete_slurmd_pods(self, name: str) -> float:
        """Delete the node's slurmd pods; the longest termination grace they have."""
        grace_s = 0.0
        for pod in self.kube.pods_on(name):
            if not is_slurmd_pod(pod):
                continue
            spec_grace = pod.get("spec", {}).get("terminationGracePeriodSeconds")
            grace_s = max(grace_s, float(DEFAULT_POD_GRACE_S if spec_grace is None else spec_grace))
            if pod["metadata"].get("deletionTimestamp"):
                continue  # on its way already
            # Changed meanwhile: the operator is at it too; the wait sees the pod go.
            with contextlib.suppress(Conflict):
                self.kube.delete_pod(pod)
        return grace_s

    def _free(self, name: str, outcome: Outcome, reason: str, *, reclaimed: bool) -> None:
        def free(current: JSON) -> JSON:
            now = self.clock()
            before = journal_of(current, self.marks)
            after = transition(before, "free", outcome.op, now, self.settings.by, reason)
            if reclaimed:
                after = dataclasses.replace(after, last_reclaim=round(now, 3))
            return node_patch(current, self.marks, journal=after, taint=False)

        self._transition(name, free)
        verb = "rolled back" if reason else "given back to the applications"
        self._step(
            outcome,
            "free",
            "RolledBack" if reason else "Returned",
            f"{verb}{': ' + reason if reason else ''}",
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _node(self, name: str) -> JSON:
        node = self.kube.node(name)
        if node is None:
            raise Refused("no such Node")
        return node

    def _transition(self, name: str, build: Callable[[JSON], JSON]) -> JSON:
        """Read, build the patch from what was read, write it; again if the Node changed."""
        for _attempt in range(CONFLICT_RETRIES):
            current = self._node(name)
            try:
                return self.kube.patch_node(name, build(current))
            except Conflict:
                continue  # e.g. the kubelet's heartbeat; `build` checks the journal again
        raise KubernetesError(f"Node {name} kept changing ({CONFLICT_RETRIES} conflicts)")

    def _wait(self, done: Callable[[], t.Any], timeout_s: float) -> t.Any:
        """done()'s first true value within timeout_s (checked at least once), else False."""
        end = time.monotonic() + timeout_s
        while True:
            value = done()
            if value or time.monotonic() >= end:
                return value
            self.sleep(self.settings.poll_s)

    def _would(self, outcome: Outcome, result: str, steps: t.Sequence[str]) -> bool:
        """In check mode, report the steps left and stop."""
        if not self.settings.check_mode:
            return False
        outcome.result = result
        outcome.steps = [f"would {step}" for step in steps]
        outcome.changed = True
        return True

    def _step(
        self,
        outcome: Outcome,
        step: str,
        event: str = "",
        message: str = "",
        *,
        warning: bool = False,
    ) -> None:
        outcome.steps.append(step)
        outcome.timeline[step] = self.clock() - outcome.started
        outcome.changed = outcome.changed or step != "recheck"
        if event:
            self._event(outcome, event, message, warning=warning)
        if self.settings.fault == f"{outcome.action}:{step}":
            os._exit(FAULT_EXIT)  # a crash, on purpose: no clean-up, no result

    def _event(self, outcome: Outcome, reason: str, message: str, *, warning: bool = False) -> None:
        """A Kubernetes Event on the Node (`kubectl describe node` shows the history)."""
        if not outcome.uid:
            outcome.uid = ((self.kube.node(outcome.node) or {}).get("metadata") or {}).get(
                "uid", ""
            )
        now = microtime(self.clock())
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{outcome.node}.hpcops-{uuid.uuid4().hex[:12]}",
                "namespace": self.settings.event_namespace,
            },
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Node",
                "name": outcome.node,
                "uid": outcome.uid,
            },
            "reason": f"Handover{reason}",
            "message": f"op {outcome.op}: {message}"[:1024],
            "type": "Warning" if warning else "Normal",
            "source": {"component": "hpcops-slinky"},
            "reportingComponent": "hpcops.io/handover",
            "reportingInstance": self.settings.by[:128],
            "firstTimestamp": now[:19] + "Z",
            "lastTimestamp": now[:19] + "Z",
            "count": 1,
        }
        try:
            self.kube.event(body)
        except KubernetesError as err:  # the handover goes on; the journal is the record
            outcome.warnings.append(f"could not record the Event: {err}")


def longest_grace(policy: Policy) -> float:
    """The longest grace any partition of the policy gives."""
    return float(
        max(
            [part.grace_s for part in policy.partitions.values()]
            + [policy.default_partition.grace_s]
        )
    )


def new_op() -> str:
    """An operation id: when (for people) and a random part (for uniqueness)."""
    return f"{int(time.time()):x}-{uuid.uuid4().hex[:6]}"
