# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Lending and reclaiming nodes: the I/O of the handover protocol, step by step.

PRIVATE to the collection.  The order of the steps is the one docs/handover.md gives; what
each step decides comes from ``steps``.  Every step reads what the last one
left, so a run that stopped anywhere is finished by the next one; every Node write carries
the resourceVersion it was computed from, so two runs never both make a transition.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import typing as t
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.faults import after_step
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import KubernetesCalls
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    EMERGENCIES,
    LEND_STEPS,
    RECLAIM_STEPS,
    AdminDrainPolicy,
    HandoverAction,
    HandoverResult,
    Journal,
    JournalState,
    Policy,
    Step,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    Escalation,
    HandoverMarkers,
    Registration,
    application_pods,
    escalation,
    grace_deadline,
    has_label,
    has_taint,
    is_slurmd_pod,
    journal_of,
    node_patch,
    pool_refusal,
    registration,
    runs_slurmd,
    slurm_drained,
    slurm_node_name,
    transition,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.views import node_view
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    Conflict,
    KubernetesError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.timestamps import microtime
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.node_change import (
    NodeRequest,
    plan_node_change,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.patient import PatientSlurm
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import job_node_names
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import SlurmRestError

JSON = dict[str, t.Any]

DEFAULT_POD_GRACE_S = 30  # Kubernetes' terminationGracePeriodSeconds when a pod sets none
# A drained slurmd pod's termination grace: its preStop and SIGTERM, then the kubelet's
# SIGKILL for what still runs (nothing of a job: the node is drained and idle, or escalated).
DRAINED_POD_GRACE_S = 1
CONFLICT_RETRIES = 5
FIRST_POLL_S = 0.05  # a wait's first look after the one it starts with; doubles up to poll_s


@dataclass(frozen=True)
class Settings:
    markers: HandoverMarkers
    policy: Policy
    by: str  # who acts: written in the journal and the Events
    lend_timeout_s: float = 120.0
    pod_timeout_s: float = 30.0
    poll_s: float = 0.5
    event_namespace: str = "default"
    nodeset_namespace: str | None = None  # where the NodeSets are; None: every namespace
    check_mode: bool = False
    fault: str = ""  # a test's fault point (faults.armed_fault); '' in every real run


@dataclass
class Outcome:
    """What happened to one node; `result` is where the node ended."""

    node: str
    action: str
    result: str = HandoverResult.UNCHANGED  # one of HandoverResult
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
    admin_drain: str = ""  # the reason of a drain somebody else set on its Slurm node
    condition: str = ""  # the disagreement in its evidence this handover resolves (reconcile)
    # The loan this handover began (lent) or ended (returned): lent, reclaim, returned (Unix
    # seconds; reclaim and returned None while it lasts), for the lending report.
    loan: JSON | None = None

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
            "warnings": list(self.warnings),
            "admin_drain": self.admin_drain,
            "condition": self.condition,
            "loan": dict(self.loan) if self.loan else None,
        }


class _AlreadyKept(Exception):
    """The journal holds the admin's drain already: nothing to write."""


class _AlreadyUnlabelled(Exception):
    """The Node has no lent label: nothing to write."""


class Refused(Exception):
    """The node may not take this step; the message says why."""


class StepFailed(Exception):
    """A step did not finish in its time; the journal keeps the node where it is."""


class Skipped(Refused):
    """Another run changed the node first: not an error, that run owns the step."""


class Handover:
    """Lends, reclaims or resumes one node at a time; safe to call from several threads."""

    def __init__(
        self,
        kube: KubernetesCalls,
        slurm: t.Any,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.slurm = PatientSlurm(slurm, clock, sleep)
        # The operation id of the handovers begun here (the nodes a run lends, or reclaims,
        # together): their drains then carry one reason and go to slurmctld as one update
        # (SharedNodeReads); 32 drains of their own were 1.1 s of a 32-node reclaim.
        self.op = new_op()
        self.settings = settings
        self.markers = settings.markers
        self.clock = clock
        self.sleep = sleep

    # -- entry points --------------------------------------------------------------------

    def run(self, name: str, action: str, reason: str = "", condition: str = "") -> Outcome:
        """Lend, reclaim or resume one node; a reclaim's reason goes into its journal. A
        `condition` (reconcile) is what the evidence of the node disagreed on: named in a
        Warning Event before anything is done (HandoverEmergency for a Slurm job beside an
        application pod, HandoverCondition otherwise)."""
        outcome = Outcome(node=name, action=action, condition=condition)
        return self._guarded(outcome, lambda: self._dispatch(outcome, reason))

    def mark_idle(self, name: str, idle_since: float | None) -> Outcome:
        """Record in a free node's journal since when it runs no application pod (None:
        busy again), for the planner's lend_min_idle_s."""
        outcome = Outcome(node=name, action=HandoverAction.MARK_IDLE)
        return self._guarded(outcome, lambda: self._mark_idle(outcome, idle_since))

    def clean_orphan(self, name: str) -> Outcome:
        """Drain the Slurm node of a lent Node that was deleted, and remove its record once
        no job runs there (the next run looks again while jobs run)."""
        outcome = Outcome(node=name, action=HandoverAction.CLEAN_ORPHANS, slurm_node=name)
        return self._guarded(outcome, lambda: self._clean_orphan(outcome))

    def _guarded(self, outcome: Outcome, body: Callable[[], None]) -> Outcome:
        """Run one node's work; its errors end that node's outcome, not the other nodes'."""
        started = outcome.started = self.clock()
        try:
            body()
        except Skipped as err:
            outcome.result = HandoverResult.SKIPPED
            outcome.message = str(err)
        except Refused as err:
            outcome.result = HandoverResult.REFUSED
            outcome.message = str(err)
        except (KubernetesError, SlurmRestError, StepFailed) as err:
            outcome.result = HandoverResult.FAILED
            outcome.message = f"{err}; the journal keeps the step, the next run resumes it"
        finally:
            outcome.seconds = self.clock() - started
        return outcome

    def _dispatch(self, outcome: Outcome, reason: str = "") -> None:
        node = self._read_node(outcome.node)
        outcome.uid = node["metadata"].get("uid", "")
        journal = journal_of(node, self.markers)
        if journal.state == JournalState.CORRUPT:
            raise Refused(f"{journal.reason}; fix or remove the annotation by hand")
        action = outcome.action
        if outcome.condition and not self.settings.check_mode:
            emergency = outcome.condition in EMERGENCIES
            done = {
                HandoverAction.RECLAIM: "re-taint it, then give it back under its partition's "
                "grace",
                HandoverAction.LEND: "finish the lend the evidence shows",
            }.get(action, "finish the handover under way")
            self._event(
                outcome,
                "Emergency" if emergency else "Condition",
                f"{reason or outcome.condition}: {done}",
                warning=True,
            )
        if action == HandoverAction.RESUME:
            action = {
                JournalState.LENDING: HandoverAction.LEND,
                JournalState.RECLAIMING: HandoverAction.RECLAIM,
            }.get(journal.state, "")
            if not action:
                outcome.message = f"nothing to finish: the node is {journal.state}"
                return
        if action == HandoverAction.LEND:
            self._lend(node, journal, outcome)
        else:
            self._reclaim(node, journal, outcome, reason)

    def _mark_idle(self, outcome: Outcome, idle_since: float | None) -> None:
        if self.settings.check_mode:
            outcome.changed = True
            return

        def mark(current: JSON) -> JSON:
            journal = journal_of(current, self.markers)
            if journal.state != JournalState.FREE or journal.idle_since == idle_since:
                raise Skipped(f"the node is {journal.state} now")
            return node_patch(
                current, self.markers, journal=dataclasses.replace(journal, idle_since=idle_since)
            )

        self._transition(outcome.node, mark)
        outcome.changed = True

    def _clean_orphan(self, outcome: Outcome) -> None:
        """A Slurm node of a lendable NodeSet no lent node stands for (handover_plan's
        orphans): drained, its jobs given their partition's grace from then and its
        escalation after, and its record removed once nothing runs there."""
        name = outcome.node
        node = self.kube.node(name)
        if node is not None:
            # A Node that came back is the handover's again once it is lent (or on its way).
            if journal_of(node, self.markers).state != JournalState.FREE:
                raise Skipped("it is lent, or on its way there or back: the handover owns it")
            if any(runs_slurmd(pod) for pod in self.kube.pods_on(name)):
                raise Skipped("slurmd runs on its Kubernetes Node again")
        self.slurm.until(self.clock() + self.settings.pod_timeout_s, outcome.warnings)
        slurm_node = self.slurm.node(name)
        if slurm_node is None:
            outcome.result = HandoverResult.REMOVED
            outcome.message = "no such Slurm node (any more)"
            return
        if self._stop_in_check_mode(outcome, HandoverResult.REMOVED, (Step.DRAIN, Step.REMOVE)):
            return
        held = "DRAIN" in slurm_node["state_flags"] or slurm_node["state"] == "DOWN"
        if not held:
            why = "its Kubernetes Node is gone" if node is None else "no lent Node stands for it"
            self.slurm.update_node(
                name, {"state": ["DRAIN"], "reason": f"{self.markers.reason_prefix} orphan: {why}"}
            )
            outcome.steps.append(Step.DRAIN)
            outcome.changed = True
            slurm_node = self.slurm.node(name)
        if not slurm_drained(slurm_node) and slurm_node is not None:
            # Jobs on a machine that is gone may never end: the grace counts from when the
            # node was taken out of service (its reason's time), then the escalation applies.
            since = slurm_node.get("reason_changed_at") or self.clock()
            deadline = grace_deadline(slurm_node["partitions"], self.settings.policy, since)
            if self.clock() < deadline:
                outcome.result = HandoverResult.DRAINING
                outcome.message = (
                    f"drained; jobs still run, its record goes once they end (or meet their "
                    f"partition's escalation in {deadline - self.clock():.0f} s)"
                )
                return
            if self._escalate(name, outcome) is None:
                outcome.result = HandoverResult.DRAINING
                return
            self._await_jobs_off(name, outcome)
            slurm_node = self.slurm.node(name)
        if slurm_node is not None:
            self.slurm.delete_node(name)
            outcome.steps.append(Step.REMOVE)
            outcome.changed = True
        outcome.result = HandoverResult.REMOVED
        outcome.message = "record removed: no lent Node stands for it, no job runs there"

    # -- lend ------------------------------------------------------------------------------

    def _lend(self, node: JSON, journal: Journal, outcome: Outcome) -> None:
        name = outcome.node
        self.slurm.until(self.clock() + self.settings.lend_timeout_s, outcome.warnings)
        if journal.state == JournalState.LENT:
            outcome.result = HandoverResult.LENT
            outcome.message = "already lent"
            return
        if journal.state == JournalState.RECLAIMING:
            raise Refused(f"being reclaimed (op {journal.op}); finish that first (action resume)")
        if journal.state == JournalState.FREE:
            self._refuse_unless_lendable(node, self.kube.pods_on(name))
            if self._stop_in_check_mode(outcome, HandoverResult.LENT, LEND_STEPS):
                return
            op = self.op
            outcome.op = op

            def lending(current: JSON) -> JSON:
                now_journal = journal_of(current, self.markers)
                if now_journal.state != JournalState.FREE:
                    raise Skipped(f"another run took the node first ({now_journal.state})")
                after = transition(
                    now_journal, JournalState.LENDING, op, self.clock(), self.settings.by
                )
                return node_patch(current, self.markers, journal=after, taint=True)

            node = self._transition(name, lending)
            self._record_step(
                outcome, Step.TAINT, "Lending", f"journal lending, taint {self.markers.taint_key}"
            )
        else:  # lending: an earlier run stopped here
            outcome.op = journal.op
            if self._stop_in_check_mode(outcome, HandoverResult.LENT, LEND_STEPS[1:]):
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
            if has_label(node, self.markers):  # slurmd may run already: give back safely
                self._reclaim(node, journal_of(node, self.markers), outcome, reason)
            else:
                self._set_free(name, outcome, reason, reclaimed=False)
            outcome.result = HandoverResult.ROLLED_BACK
            outcome.message = reason
            return
        self._record_step(outcome, Step.RECHECK)

        if not has_label(node, self.markers):
            node = self._transition(
                name, lambda current: node_patch(current, self.markers, label=True)
            )
            self._record_step(outcome, Step.LABEL, "", f"label {self.markers.lend_label}")
        if not any(runs_slurmd(pod) for pod in pods):
            try:
                self.kube.nudge_nodesets(
                    self.markers.lend_label,
                    self.markers.lend_label_value,
                    self.markers.nudge_annotation,
                    outcome.op,
                    self.settings.nodeset_namespace,
                )
            except KubernetesError as err:  # only slower: the operator gets there on its own
                outcome.warnings.append(f"could not wake the NodeSets: {err}")

        found = self._wait(lambda: self._registration(name), self.settings.lend_timeout_s)
        slurm_name, state, slurm_reason = found or ("", Registration.WAITING, "")
        if state != Registration.REGISTERED:
            reason = (
                f"slurmctld refused slurmd's registration ({slurm_reason or 'INVALID_REG'})"
                if state == Registration.INVALID
                else f"slurmd did not register within lend_timeout_s "
                f"{self.settings.lend_timeout_s:g}"
            )
            node = self._read_node(name)
            self._reclaim(node, journal_of(node, self.markers), outcome, reason)
            outcome.result = HandoverResult.FAILED
            outcome.message = reason + "; given back"
            return
        outcome.slurm_node = slurm_name

        def lent(current: JSON) -> JSON:
            now_journal = journal_of(current, self.markers)
            if now_journal.state != JournalState.LENDING or now_journal.op != outcome.op:
                raise Skipped(f"the journal changed meanwhile ({now_journal.state})")
            after = transition(
                now_journal, JournalState.LENT, outcome.op, self.clock(), self.settings.by
            )
            outcome.loan = {"lent": after.lent_at, "reclaim": None, "returned": None}
            return node_patch(current, self.markers, journal=after)

        self._transition(name, lent)
        self._record_step(outcome, Step.REGISTERED, "Lent", f"Slurm node {slurm_name} registered")
        outcome.result = HandoverResult.LENT

    def _refuse_unless_lendable(self, node: JSON, pods: list[JSON]) -> None:
        refusal = pool_refusal(node, self.settings.policy)
        if refusal:
            raise Refused(refusal)
        view = node_view(node, self.markers.journal_annotation)
        if not view.ready:
            raise Refused("not Ready")
        if view.unschedulable:
            raise Refused("cordoned")
        apps = application_pods(pods, self.settings.policy)
        if apps:
            raise Refused(f"runs application pod(s) {', '.join(apps)}")

    def _registration(self, name: str) -> tuple[str, str, str] | None:
        """(Slurm node name, registration, Slurm's reason) once slurmd registered or was
        refused; None while it is still on its way."""
        pods = self.kube.pods_on(name)
        if not any(runs_slurmd(pod) for pod in pods):
            return None  # a Slurm node of that name without a slurmd pod is a leftover
        slurm_name = slurm_node_name(name, pods)
        slurm_node = self.slurm.node(slurm_name)
        state = registration(slurm_node)
        if state == Registration.WAITING:
            return None
        return slurm_name, state, (slurm_node or {}).get("reason", "")

    # -- reclaim ---------------------------------------------------------------------------

    def _reclaim(self, node: JSON, journal: Journal, outcome: Outcome, reason: str) -> None:
        name = outcome.node
        pods = self.kube.pods_on(name)
        # Without a journal, the node is Slurm's while a mark of ours or slurmd is on it (a
        # Node that came back with its labels, not our annotation): given back all the same.
        marked = (
            has_label(node, self.markers)
            or has_taint(node, self.markers)
            or any(runs_slurmd(pod) for pod in pods)
        )
        if journal.state == JournalState.FREE and not marked:
            # Refused as lend refuses it: a node the pool does not hold was never ours.
            refusal = pool_refusal(node, self.settings.policy)
            if refusal:
                raise Refused(refusal)
            outcome.result = HandoverResult.FREE
            outcome.message = "not lent"
            return
        slurm_name = slurm_node_name(name, pods)
        outcome.slurm_node = slurm_name
        # Until the node's own deadline is known, no step can need longer than the longest grace.
        self.slurm.until(self.clock() + longest_grace(self.settings.policy), outcome.warnings)
        if journal.state in (JournalState.FREE, JournalState.LENDING, JournalState.LENT):
            if self._stop_in_check_mode(outcome, HandoverResult.FREE, RECLAIM_STEPS):
                return
            op = self.op
            slurm_node = self.slurm.node(slurm_name)
            partitions = slurm_node["partitions"] if slurm_node else []
            deadline = grace_deadline(partitions, self.settings.policy, self.clock())
            outcome.op = op

            def reclaiming(current: JSON) -> JSON:
                now_journal = journal_of(current, self.markers)
                if now_journal.state != journal.state and now_journal.state not in (
                    JournalState.LENDING,
                    JournalState.LENT,
                ):
                    raise Skipped(f"another run took the node first ({now_journal.state})")
                after = transition(
                    now_journal,
                    JournalState.RECLAIMING,
                    op,
                    self.clock(),
                    self.settings.by,
                    reason,
                    deadline,
                )
                # The taint too: a Node that came back without it keeps no application
                # pod off (a no-op where it is on).
                return node_patch(current, self.markers, journal=after, taint=True)

            retaint = not has_taint(node, self.markers)
            self._transition(name, reclaiming)
            self._record_step(
                outcome,
                Step.JOURNAL,
                "Reclaiming",
                f"journal reclaiming{', taint on again' if retaint else ''}, deadline in "
                f"{deadline - self.clock():.0f} s",
            )
        else:  # reclaiming: an earlier run stopped here, or a `wait` job blocked it
            outcome.op = journal.op
            deadline = journal.deadline if journal.deadline is not None else self.clock()
            if self._stop_in_check_mode(outcome, HandoverResult.FREE, RECLAIM_STEPS[1:]):
                return
            if not has_taint(node, self.markers):
                # A Node restored without its taint: no application pod may land until the
                # slurmd pod is gone.
                self._transition(
                    name, lambda current: node_patch(current, self.markers, taint=True)
                )
                outcome.changed = True
                outcome.warnings.append(
                    f"the taint {self.markers.taint_key} was missing; put on again"
                )
            slurm_node = self.slurm.node(slurm_name)

        # Draining and waiting for the jobs may take until the deadline; a step resumed past
        # it still gets the time of a pod step to ride out an outage.
        self.slurm.until(
            max(deadline, self.clock() + self.settings.pod_timeout_s), outcome.warnings
        )
        # As read for the deadline, the journal's write ago: a read more was a tenth of an idle
        # reclaim in the lab. slurmrestd has no compare-and-set, so an admin's drain set
        # between a read and the update is lost to ours either way; the window is 0.05 s wider.
        self._drain(slurm_name, outcome, slurm_node)
        self._record_step(outcome, Step.DRAIN)
        drained = self._wait(
            lambda: self._drained_and_idle(slurm_name, outcome), max(deadline - self.clock(), 0.0)
        )
        if not drained:
            escalation = self._escalate(
                slurm_name, outcome, stop_slurmd=lambda: self._stop_slurmd(name, outcome)
            )
            if escalation is None:
                return  # blocked by a `wait` job
            if escalation.down:
                # The jobs' processes stopped with the slurmd pod, before the DOWN, so
                # nothing of Slurm's runs on the node: it goes back now, and the record once
                # slurmctld has taken the requeued jobs off it (1.0 to 3.3 s after the DOWN
                # in kind), which the applications need not wait for.
                self._give_back(name, slurm_name, outcome, jobs_off=False)
                return
            self._await_jobs_off(slurm_name, outcome)
        self._record_step(outcome, Step.DRAINED)
        self._stop_slurmd(name, outcome)
        self._give_back(name, slurm_name, outcome)

    def _drain(self, slurm_name: str, outcome: Outcome, slurm_node: JSON | None) -> None:
        """Drain the Slurm node as last read (slurm_node; None: no such node)."""
        if slurm_node is None:
            return
        if "DRAIN" in slurm_node["state_flags"] and self.markers.is_our_reason(
            slurm_node["reason"]
        ):
            return  # drained by an earlier step of ours
        request = NodeRequest(
            state="drain",
            reason=self.markers.drain_reason(outcome.op),
            reason_prefix=self.markers.reason_prefix,
        )
        change = plan_node_change(slurm_name, slurm_node, request)
        if change.foreign_reason and self.markers.is_admin_reason(change.foreign_reason):
            set_by = str(slurm_node.get("reason_set_by_user") or "")
            self._keep_admin_drain(slurm_name, change.foreign_reason, set_by, outcome)
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

    def _keep_admin_drain(
        self, slurm_name: str, reason: str, set_by: str, outcome: Outcome
    ) -> None:
        """Somebody else drained the lent node ("hw: ECC errors"). Their drain keeps jobs off
        too, so it stays; its reason goes into the journal and a Warning Event, so that the
        node never goes back to the applications without it (AdminDrainPolicy)."""
        if outcome.admin_drain == reason:
            return  # seen earlier in this run
        outcome.admin_drain = reason
        cordon = self.settings.policy.admin_drain == AdminDrainPolicy.CORDON
        then = (
            "cordoned, so that it stays out of service until a person uncordons it"
            if cordon
            else "schedulable (admin_drain: return)"
        )
        message = (
            f"Slurm node {slurm_name} was drained by someone else"
            f"{f' ({set_by})' if set_by else ''}: {reason!r}; it keeps jobs off until the "
            "reclaim deletes the Slurm node and its reason with it, so the reason is kept in "
            f"the Node's journal ({self.markers.journal_annotation}: admin_drain) and this "
            f"Warning Event, and the node comes back {then}"
        )
        outcome.warnings.append(message)

        def keep(current: JSON) -> JSON:
            journal = journal_of(current, self.markers)
            if journal.admin_drain == reason:
                raise _AlreadyKept
            return node_patch(
                current, self.markers, journal=dataclasses.replace(journal, admin_drain=reason)
            )

        try:
            self._transition(outcome.node, keep)
        except _AlreadyKept:
            return  # an earlier run kept it and said so
        outcome.changed = True
        self._event(outcome, "AdminDrain", message, warning=True)

    def _drained_and_idle(self, slurm_name: str, outcome: Outcome) -> bool:
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
            self._drain(slurm_name, outcome, slurm_node)
            slurm_node = self.slurm.node(slurm_name)
        return slurm_drained(slurm_node)

    def _escalate(
        self,
        slurm_name: str,
        outcome: Outcome,
        stop_slurmd: Callable[[], None] | None = None,
    ) -> Escalation | None:
        """Apply the policy at the deadline: what it did, or None when the node stays
        blocked. The jobs may still be on the node when it returns (`_await_jobs_off`).
        `stop_slurmd` runs before the node is marked DOWN."""
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
            if stop_slurmd is not None:
                # slurmd given SIGTERM while its jobs run ends at once, and their processes
                # with its container; on a node already DOWN it is busy with slurmctld's kill
                # of those jobs and holds its pod until the kubelet's SIGKILL (its minimum
                # grace, 2 s: measured in kind). DOWN then requeues the jobs all the same.
                stop_slurmd()
            self.slurm.update_node(
                slurm_name,
                {
                    "state": ["DOWN"],
                    "reason": f"{self.markers.drain_reason(outcome.op)}: requeue at the deadline",
                },
            )
        outcome.jobs = decided.report()
        if decided.cancel or decided.down:
            outcome.changed = True
            self._record_step(
                outcome,
                Step.ESCALATE,
                "Escalated",
                f"deadline passed: cancelled {outcome.jobs['cancelled']}, "
                f"requeued {outcome.jobs['requeued']}, "
                f"ended (not requeueable) {outcome.jobs['ended_not_requeueable']}",
                warning=True,
            )
        if decided.blocked:
            outcome.result = HandoverResult.BLOCKED
            outcome.message = (
                f"jobs {list(decided.waiting)} of a `wait` partition still run; the node stays "
                "reclaiming and the next run looks again"
            )
            self._event(outcome, "Blocked", outcome.message, warning=True)
            return None
        return decided

    def _jobs_off(self, slurm_name: str, outcome: Outcome) -> bool:
        """Slurm has taken every job off the node within pod_timeout_s of an escalation."""
        return bool(
            self._wait(
                lambda: self._drained_and_idle(slurm_name, outcome), self.settings.pod_timeout_s
            )
        )

    def _await_jobs_off(self, slurm_name: str, outcome: Outcome) -> None:
        if not self._jobs_off(slurm_name, outcome):
            raise StepFailed(
                f"jobs still run on Slurm node {slurm_name} {self.settings.pod_timeout_s:g} s "
                "after the escalation"
            )

    def _stop_slurmd(self, name: str, outcome: Outcome) -> None:
        """Reclaim steps 4 and 5: label off, slurmd pod stopped (each done already: a look)."""
        self._unlabel(name, outcome)

        def slurmd_stopped(pods: list[JSON]) -> bool:
            return not any(runs_slurmd(pod) for pod in pods)

        # The Slurm node is drained and idle (or its jobs are past their grace) and no
        # NodeSet selects the node any more, so the pod goes now: the operator would delete
        # it too, but only after its next look at Slurm (2 to 7 s in kind). A pod it
        # re-creates from a view that still has the label cannot be bound: its node selector
        # wants the label the scheduler no longer sees.
        # It goes with a grace of 1 s: no job runs there any more, or none may (they are
        # requeued at the deadline), and the run that gives the node back deletes its Slurm
        # record itself, so slurmd's shutdown is not worth the applications' wait. The jobs'
        # processes go with the pod.
        grace_s = self._delete_slurmd_pods(name, DRAINED_POD_GRACE_S)
        # Watched, not polled: the application waits for exactly this moment, the kubelet's
        # terminal phase (every container and the sandbox stopped), not the object's deletion
        # after the kubelet's clean-up (0.3 to 1 s more in kind).
        if not self.kube.await_pods_on(name, slurmd_stopped, grace_s + self.settings.pod_timeout_s):
            raise StepFailed(
                f"the slurmd pod on {name} still runs {grace_s + self.settings.pod_timeout_s:g} s "
                f"after it was deleted (its termination grace {grace_s:g} s and pod_timeout_s)"
            )
        self._record_step(outcome, Step.POD_GONE)

    def _give_back(
        self, name: str, slurm_name: str, outcome: Outcome, *, jobs_off: bool = True
    ) -> None:
        """Reclaim steps 6 and 7, once slurmd has stopped: taint off, Slurm record gone
        (after a DOWN escalation, `jobs_off` False, once slurmctld has the jobs off it)."""
        # Nothing of Slurm's runs on the node once its slurmd pod has stopped: it goes back
        # now, and the record after (slurmrestd's read and delete took 0.12 s in kind, which
        # the applications need not wait for).
        self._set_free(name, outcome, "", reclaimed=True)
        outcome.result = HandoverResult.FREE
        self._remove_slurm_record(slurm_name, outcome, jobs_off)

    def _remove_slurm_record(self, slurm_name: str, outcome: Outcome, jobs_off: bool) -> None:
        """No DOWN ghost stays in sinfo. On a node already given back: a record left here (a
        run that stops, slurmrestd failing, slurmctld still holding the jobs of a DOWN
        escalation) has no lent Node standing for it, and the next run's orphan clean-up
        removes it."""
        left = "its record stays until a later run's orphan clean-up removes it"
        self.slurm.until(self.clock() + self.settings.pod_timeout_s, outcome.warnings)
        try:
            if not jobs_off:
                if not self._jobs_off(slurm_name, outcome):
                    outcome.warnings.append(
                        f"Slurm still lists jobs on Slurm node {slurm_name} "
                        f"{self.settings.pod_timeout_s:g} s after the escalation: {left}"
                    )
                    return
                self._record_step(outcome, Step.DRAINED)
            if self.slurm.node(slurm_name) is None:
                return
            try:
                self.slurm.delete_node(slurm_name)
            except SlurmRestError:
                # slurmd's preStop hook may have removed it between the look and the delete.
                if self.slurm.node(slurm_name) is not None:
                    raise
                return
        except SlurmRestError as err:
            outcome.warnings.append(f"Slurm node {slurm_name} not deleted ({err}): {left}")
            return
        self._record_step(outcome, Step.SLURM_REMOVED, "", f"Slurm node {slurm_name} deleted")

    def _unlabel(self, name: str, outcome: Outcome) -> None:
        """No NodeSet selects the node any more, so no slurmd pod comes back to it."""

        def unlabelled(current: JSON) -> JSON:
            if not has_label(current, self.markers):
                raise _AlreadyUnlabelled
            return node_patch(current, self.markers, label=False)

        try:  # one read of the Node, not a look and then the transition's own
            self._transition(name, unlabelled)
        except _AlreadyUnlabelled:
            return
        self._record_step(outcome, Step.UNLABEL, "", f"label {self.markers.lend_label} removed")

    def _delete_slurmd_pods(self, name: str, grace_period_s: int | None = None) -> float:
        """Delete the node's slurmd pods, with their own termination grace or the one given
        (which also shortens the grace of a pod already terminating); the longest grace."""
        grace_s = 0.0
        for pod in self.kube.pods_on(name):
            if not is_slurmd_pod(pod):
                continue
            spec_grace = pod.get("spec", {}).get("terminationGracePeriodSeconds")
            own_s = float(DEFAULT_POD_GRACE_S if spec_grace is None else spec_grace)
            if grace_period_s is None:
                grace_s = max(grace_s, own_s)
                if pod["metadata"].get("deletionTimestamp"):
                    continue  # on its way already
            else:
                grace_s = max(grace_s, float(min(grace_period_s, own_s)))
            # Changed meanwhile: the operator is at it too; the wait sees the pod go.
            with contextlib.suppress(Conflict):
                self.kube.delete_pod(pod, grace_period_s)
        return grace_s

    def _set_free(self, name: str, outcome: Outcome, reason: str, *, reclaimed: bool) -> None:
        held = ""  # the reason of an admin's drain the node comes back with

        def free(current: JSON) -> JSON:
            nonlocal held
            now = self.clock()
            before = journal_of(current, self.markers)
            after = transition(before, JournalState.FREE, outcome.op, now, self.settings.by, reason)
            if reclaimed:
                after = dataclasses.replace(after, last_reclaim=round(now, 3))
            if before.lent_at is not None:
                outcome.loan = {
                    "lent": before.lent_at,
                    # When its reclaim began: the journal's time of entering reclaiming.
                    "reclaim": before.since if before.state == JournalState.RECLAIMING else None,
                    "returned": round(now, 3),
                }
            held = after.admin_drain if reclaimed else ""
            cordon = bool(held) and self.settings.policy.admin_drain == AdminDrainPolicy.CORDON
            return node_patch(
                current, self.markers, journal=after, taint=False, cordon=True if cordon else None
            )

        self._transition(name, free)
        if reason:
            message = f"rolled back: {reason}"
        elif held and self.settings.policy.admin_drain == AdminDrainPolicy.CORDON:
            message = (
                f"given back cordoned: its Slurm node was drained by someone else ({held!r}); "
                "uncordon it once it is fit for applications"
            )
        elif held:
            message = (
                "given back to the applications; its Slurm node had been drained by someone "
                f"else ({held!r})"
            )
        else:
            message = "given back to the applications"
        if held:
            outcome.admin_drain = held
            outcome.message = message
        self._record_step(
            outcome, Step.FREE, "RolledBack" if reason else "Returned", message, warning=bool(held)
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _read_node(self, name: str) -> JSON:
        node = self.kube.node(name)
        if node is None:
            raise Refused("no such Node")
        return node

    def _transition(self, name: str, build: Callable[[JSON], JSON]) -> JSON:
        """Read, build the patch from what was read, write it; again if the Node changed."""
        for _attempt in range(CONFLICT_RETRIES):
            current = self._read_node(name)
            try:
                return self.kube.patch_node(name, build(current))
            except Conflict:
                continue  # e.g. the kubelet's heartbeat; `build` checks the journal again
        raise KubernetesError(f"Node {name} kept changing ({CONFLICT_RETRIES} conflicts)")

    def _wait(self, done: Callable[[], t.Any], timeout_s: float) -> t.Any:
        """done()'s first true value within timeout_s (checked at least once), else False.

        For what only polling can see (Slurm's view of a node). The first looks come sooner
        than poll_s (FIRST_POLL_S, doubling up to it): most waits of an idle handover end
        within a few tenths of a second, and a fixed poll of 0.5 s was most of an idle
        reclaim in the lab."""
        end = time.monotonic() + timeout_s
        interval = min(FIRST_POLL_S, self.settings.poll_s)
        while True:
            value = done()
            if value or time.monotonic() >= end:
                return value
            self.sleep(interval)
            interval = min(interval * 2, self.settings.poll_s)

    def _stop_in_check_mode(self, outcome: Outcome, result: str, steps: t.Sequence[str]) -> bool:
        """In check mode, report the steps left and stop."""
        if not self.settings.check_mode:
            return False
        outcome.result = result
        outcome.steps = [f"would {step}" for step in steps]
        outcome.changed = True
        return True

    def _record_step(
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
        outcome.changed = outcome.changed or step != Step.RECHECK
        if event:
            self._event(outcome, event, message, warning=warning)
        after_step(self.settings.fault, outcome.action, step)  # the tests' crash point

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
