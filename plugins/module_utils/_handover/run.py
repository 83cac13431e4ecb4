# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One whole handover run in one process: check, Lease, plan, steps, release, record.

PRIVATE to the collection: names here can change without notice. This is the order the
role used to spell out as tasks (README: the handover playbooks), kept in one place so that
a run pays for one module start instead of ten: the settings and named nodes checked
against the cluster (a refused run takes no Lease and records nothing), the Lease taken,
the plan read, the steps done, the Lease released whatever happened, the pool read, the
run summarised and recorded as a ConfigMap and an Event. The files a run writes (summary,
metrics) are the module's; everything here talks to the cluster and to slurmrestd only.
"""

from __future__ import annotations

import json
import time
import typing as t
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.batch import (
    failed_or_refused,
    hand_over,
    pool_journals,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import Settings
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import (
    KubernetesCalls,
    lendable_nodesets_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.loans import (
    loan_patches,
    month_write,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    HandoverAction,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import (
    check_against_cluster,
    read_plan,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.report import (
    RunOutcome,
    in_users_words,
    metrics_text,
    run_summary,
    summary_line,
    unresolved,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    Conflict,
    KubernetesError,
    apply_object,
    get_object,
    patch_object,
    write_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import (
    LeaseRequest,
    acquire_lease,
    lease_attempt,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import SelectionError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import SlurmRestError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.token_renewal import (
    TokenRenewalError,
    fresh_token_secret,
)

JSON = dict[str, t.Any]

REBALANCE = "rebalance"
# The run's handovers in their order, as `handovers` keys them.
HANDOVER_KEYS = (
    "resumed",
    "reconciled_lent",
    "reconciled_returned",
    "reclaimed",
    "lent",
    "orphans_cleaned",
)
RUN_ACTIONS = (HandoverAction.LEND, HandoverAction.RECLAIM, REBALANCE)
# An apiserver that restarts (an upgrade, a control-plane node reboot) is back within a
# minute; a Lease left held would stop every run until it expires.
RELEASE_TRIES = 12
RELEASE_DELAY_S = 5.0
FIELD_MANAGER = "hpcops-slinky-handover"


@dataclass(frozen=True)
class RunRequest:
    """What one run is asked to do, and with which limits."""

    action: str  # one of RUN_ACTIONS
    run_id: str  # the Lease holder, the journals' `by`
    lease: LeaseRequest
    nodes: tuple[str, ...] = ()  # lend or reclaim these; none: as the plan says
    reason: str = ""  # a reclaim's, for its journals
    partitions: tuple[str, ...] | None = None  # the policy's to check; None: all it names
    lease_wait_s: float = 0.0
    lease_poll_s: float = 2.0
    max_parallel: int = 8
    shared_reads_from: int = 4
    lend_label: t.Mapping[str, str] | None = None
    nodeset_namespace: str | None = None
    trigger: t.Any = None
    report_configmap: str = ""  # '' records nothing in the cluster
    metrics_cluster: str = ""
    # A Slinky Token's Secret the run's token comes from, and the Token (default: the
    # Secret's owner), renewed first when its renewal has stopped.
    token_secret: t.Mapping[str, str] | None = None
    token_owner: str = ""
    # How the user wrote the settings the messages name: option -> their name
    # (lease.wait_s -> handover_lease_wait_s, in the role).
    setting_names: t.Mapping[str, str] = field(default_factory=dict)


class HandoverRun:
    """One run of lend, reclaim or rebalance; `execute` returns what handover_run returns."""

    def __init__(
        self,
        kube: KubernetesCalls,
        slurm: t.Any,
        settings: Settings,
        request: RunRequest,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.kube = kube
        self.slurm = slurm
        self.settings = settings
        self.request = request
        self.clock = clock
        self.sleep = sleep
        self.started = clock()
        self.plan: JSON | None = None
        self.handovers: dict[str, JSON] = {}
        self.requested: list[str] = []
        self.warnings: list[str] = []
        self._step = "check"  # the step under way, for the message of its failure
        # The lendable NodeSets: read for the check, used by the plan.
        self.nodesets: list[JSON] | None = None
        # node -> (condition, reason) of the nodes whose evidence disagreed (the plan's).
        self.conditions: dict[str, tuple[str, str]] = {}

    # -- the run -------------------------------------------------------------------------

    def execute(self) -> JSON:
        request = self.request
        result: JSON = {"changed": False, "refusals": [], "lease": {}, "error": ""}
        try:
            self._renew_stalled_token()
            checked = self._check()
        except (KubernetesError, SlurmRestError, TokenRenewalError) as err:
            # Before the Lease: nothing done, the run's failure is recorded.
            return self._finish(result, f"the check against the cluster: {err}", lease=None)
        result["lendable_partitions"] = checked["lendable_partitions"]
        if checked["refusals"]:
            result["refusals"] = checked["refusals"]
            result["outcome"] = "invalid"
            return result
        try:
            lease = acquire_lease(
                self.kube.client,
                request.lease,
                request.lease_wait_s,
                request.lease_poll_s,
                self.settings.check_mode,
            )
        except KubernetesError as err:
            return self._finish(result, f"the Lease: {err}", lease=None)
        result["lease"] = lease
        if not lease["acquired"]:
            error = ""
            if request.action != REBALANCE:
                error = (
                    f"{lease.get('holder', '?')} holds the handover Lease for "
                    f"{lease.get('expires_in', '?')} s more (this run waited "
                    f"{lease.get('waited_s', 0)} s, lease.wait_s); nothing was done: run "
                    "again later, or let the run wait longer with lease.wait_s"
                )
            return self._finish(result, error, lease=lease)
        error = ""
        try:
            error = self._steps()
        except (KubernetesError, SlurmRestError, SelectionError) as err:
            error = f"{self._step}: {err}"
        finally:
            release_error = self._release()
        if release_error and not error:
            error = release_error
        elif release_error:
            self.warnings.append(release_error)
        return self._finish(result, error, lease=lease, acted=True)

    def _renew_stalled_token(self) -> None:
        if self.request.token_secret:
            warning = fresh_token_secret(
                self.kube.client,
                self.request.token_secret,
                self.request.token_owner,
                check_mode=self.settings.check_mode,
                clock=self.clock,
                sleep=self.sleep,
            )
            if warning:
                self.warnings.append(warning)

    def _check(self) -> JSON:
        request = self.request
        self._step = "check"
        self.nodesets = lendable_nodesets_of(
            self.kube.client, self._lend_label(), request.nodeset_namespace
        )
        return check_against_cluster(
            self.kube.client,
            self.slurm,
            self.settings.policy,
            self.settings.markers,
            nodes=list(request.nodes),
            partitions=None if request.partitions is None else list(request.partitions),
            lend_label=self._lend_label(),
            nodeset_namespace=request.nodeset_namespace,
            nodesets=self.nodesets,
        )

    def _lend_label(self) -> t.Mapping[str, str]:
        markers = self.settings.markers
        return self.request.lend_label or {markers.lend_label: markers.lend_label_value}

    def _steps(self) -> str:
        """The run's steps in their order; the first step that fails ends them, and its
        message (the step, then why) is returned; '' when all went through."""
        request = self.request
        action = request.action
        if action == REBALANCE or not request.nodes:
            self._step = "plan"
            self.plan = read_plan(
                self.kube.client,
                self.slurm,
                self.settings.policy,
                journal_annotation=self.settings.markers.journal_annotation,
                lend_label=self._lend_label(),
                nodeset_namespace=request.nodeset_namespace,
                now=self.clock(),
                nodesets=self.nodesets,
                markers=self.settings.markers,
            )
        plan = self.plan or {}
        # Nodes whose evidence disagrees, after the resumes and before new work: the lend
        # the evidence shows finished, or the node given back (reconcile.py).
        mend = plan.get("reconcile") or []
        reconciled: list[tuple[str, str, list[str], str]] = [
            (key, todo, [row["node"] for row in mend if row["action"] == todo], "")
            for key, todo in (
                ("reconciled_lent", HandoverAction.LEND),
                ("reconciled_returned", HandoverAction.RECLAIM),
            )
        ]
        self.conditions = {
            str(row["node"]): (str(row["condition"]), f"{row['condition']}: {row['evidence']}")
            for row in plan.get("conditions") or []
        }
        if action == REBALANCE:
            steps: list[tuple[str, str, list[str], str]] = [
                ("resumed", HandoverAction.RESUME, _names(plan["resume"]), ""),
                *reconciled,
                (
                    "reclaimed",
                    HandoverAction.RECLAIM,
                    _names(plan["reclaim"]),
                    next((row["reason"] for row in plan["reclaim"]), ""),
                ),
                ("orphans_cleaned", HandoverAction.CLEAN_ORPHANS, _names(plan["orphans"]), ""),
                ("lent", HandoverAction.LEND, _names(plan["lend"]), ""),
            ]
            if plan["idle_marks"]:
                self._step = "mark_idle"
                self._hand_over("idle_marked", HandoverAction.MARK_IDLE, [], plan["idle_marks"])
        else:
            self.requested = list(request.nodes) or _names(plan[action])
            steps = [
                ("resumed", HandoverAction.RESUME, _names(plan.get("resume", [])), ""),
                *reconciled,
                (
                    "lent" if action == HandoverAction.LEND else "reclaimed",
                    action,
                    self.requested,
                    request.reason,
                ),
            ]
        for key, step, nodes, reason in steps:
            if not nodes:
                continue
            self._step = step
            failed = failed_or_refused(self._hand_over(key, step, nodes, reason=reason))
            if failed:
                return "; ".join(f"{o.node}: {o.result}: {o.message}" for o in failed)
        return ""

    def _hand_over(
        self,
        key: str,
        action: str,
        nodes: list[str],
        idle_marks: t.Mapping[str, float | None] | None = None,
        reason: str = "",
    ) -> list[t.Any]:
        handed = hand_over(
            self.kube,
            self.slurm,
            self.settings,
            action,
            nodes,
            max_parallel=self.request.max_parallel,
            shared_reads_from=self.request.shared_reads_from,
            reason=reason,
            idle_marks=idle_marks,
            conditions=self.conditions,
        )
        outcomes: list[t.Any] = handed.pop("outcomes")
        self.handovers[key] = handed
        return outcomes

    def _release(self) -> str:
        """Give the Lease back, riding out an apiserver restart; '' or why it stayed held."""
        if self.settings.check_mode:
            return ""
        last = ""
        for attempt in range(RELEASE_TRIES):
            try:
                lease_attempt(self.kube.client, self.request.lease, "released")
                return ""
            except Conflict:
                return ""  # somebody else holds it now: not ours to give back
            except KubernetesError as err:
                last = str(err)
            if attempt + 1 < RELEASE_TRIES:
                self.sleep(RELEASE_DELAY_S)
        return (
            f"the Lease could not be released ({last}); it expires after "
            f"{self.request.lease.duration_s} s, until then other runs wait"
        )

    # -- the record ----------------------------------------------------------------------

    def _pool_after(self) -> list[dict[str, str]] | None:
        """The pool as the run left it: read again when a node was handed over, else the
        plan's read (None: it could not be read, and the summary says unknown)."""
        handed = any(result.get("nodes") for result in self.handovers.values())
        if self.plan is not None and not handed:
            # Nodes that left the pool with our marks are shown by status, not counted.
            return [row for row in self.plan["status"] if row.get("in_pool", True)]
        try:
            return pool_journals(self.kube, self.settings.policy, self.settings.markers)
        except KubernetesError as err:
            self.warnings.append(f"the pool could not be read after the run: {err}")
            return None

    def _finish(self, result: JSON, error: str, *, lease: JSON | None, acted: bool = False) -> JSON:
        request = self.request
        pool = self._pool_after() if acted else None
        # Messages name settings as the user wrote them (the role's variables).
        names = request.setting_names
        error = in_users_words(error, names)
        self.warnings = [in_users_words(warning, names) for warning in self.warnings]
        for handed in self.handovers.values():
            for entry in handed.get("nodes") or []:
                entry["message"] = in_users_words(entry.get("message", ""), names)
                entry["warnings"] = [in_users_words(w, names) for w in entry.get("warnings") or []]
        handovers = [self.handovers.get(key) for key in HANDOVER_KEYS]
        # What still needs a clean-up or a person once this run acted: never advice the run
        # already followed.
        attention = unresolved(
            (self.plan or {}).get("attention_items") or [], [h for h in handovers if h]
        )
        summary = run_summary(
            run_id=request.run_id,
            started=self.started,
            finished=self.clock(),
            handovers=handovers,
            lease=lease if lease is not None else {},
            pool=pool,
            errors=[error],
            action=request.action,
            requested=self.requested,
            warnings=self.warnings,
            attention=attention,
            trigger=request.trigger,
            conditions=(self.plan or {}).get("conditions") or [],
        )
        line = summary_line(summary)
        result.update(
            changed=any(result.get("changed") for result in self.handovers.values()),
            outcome=summary["outcome"],
            summary=summary,
            summary_line=line,
            metrics=metrics_text(summary, request.metrics_cluster),
            requested=self.requested,
            handovers=self.handovers,
            error=error,
            recorded=self.records(summary),
            attention=attention,
        )
        if self.plan is not None:
            result["plan"] = self.plan
        if not result["recorded"]:
            return result
        try:
            self._record(summary, line, result["metrics"])
        except KubernetesError as err:
            result["record_error"] = f"the run's record in the cluster: {err}"
        return result

    def _record_loans(self, base: str, namespace: str) -> None:
        """The loans this run began or ended, merged into their months' ConfigMaps."""
        patches = loan_patches(self.handovers.values(), base, _loan_partition(self.settings.policy))
        for (name, month), records in sorted(patches.items()):
            existing = get_object(self.kube.client, "v1", "ConfigMap", name, namespace)
            write = month_write(existing, name, namespace, base, month, records)
            if write is None:
                self.warnings.append(f"loans of {month} not recorded: {name} holds a later month")
            elif write[0] == "create":
                write_object(self.kube.client, write[1], create=True)
            else:
                patch_object(self.kube.client, "v1", "ConfigMap", name, write[1], namespace)

    def records(self, summary: t.Mapping[str, t.Any]) -> bool:
        """Whether the run is recorded: not in check mode, and not a run that found the
        Lease held (the holder records what happened; a second writer would hide it)."""
        return not self.settings.check_mode and summary["outcome"] != RunOutcome.LEASE_HELD

    def _record(self, summary: t.Mapping[str, t.Any], line: str, metrics: str) -> None:
        """The summary in the status ConfigMap (server-side apply, one field manager) and
        an Event on it."""
        name = self.request.report_configmap
        if not name:
            return
        namespace = self.request.lease.namespace
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {
                    "app.kubernetes.io/name": FIELD_MANAGER,
                    "app.kubernetes.io/managed-by": "hpcops.slinky",
                },
            },
            "data": {
                "summary.json": json_text(summary),
                "summary": line,
                "metrics.prom": metrics,
            },
        }
        configmap = apply_object(self.kube.client, body, FIELD_MANAGER)
        self._record_loans(name, namespace)
        finished = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(summary["finished"])))
        success = bool(summary["success"])
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            # A new name each run, made by the apiserver: no read first, so the runs need no
            # right to read Events.
            "metadata": {"generateName": f"{name}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": name,
                "namespace": namespace,
                "uid": configmap["metadata"]["uid"],
            },
            "type": "Normal" if success and not summary["blocked"] else "Warning",
            "reason": "HandoverRun" if success else "HandoverRunFailed",
            "message": _truncated(f"{self.request.run_id}: {line}", 1000),
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": "hpcops.io/handover",
            "reportingInstance": self.request.run_id,
            "firstTimestamp": finished,
            "lastTimestamp": finished,
            "count": 1,
        }
        write_object(self.kube.client, event, create=True)


def _loan_partition(policy: t.Any) -> str:
    """The partition the lent nodes serve: the first the policy names, '' when none."""
    return next(iter(sorted(policy.partitions)), "")


def json_text(value: t.Any) -> str:
    """As Ansible's to_nice_json writes it, so readers of the old files see the same."""
    return json.dumps(value, indent=4, sort_keys=True, ensure_ascii=False)


def _truncated(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _names(rows: Sequence[t.Mapping[str, t.Any]]) -> list[str]:
    return [str(row["node"]) for row in rows]
