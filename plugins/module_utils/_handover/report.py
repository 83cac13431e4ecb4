# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one handover run did, as a summary and as Prometheus metrics (pure: no I/O).

PRIVATE to the collection: names here can change without notice.

A scheduled run ends by recording its summary where operators look: a status ConfigMap
and an Event in the cluster, and the metrics below for a node_exporter textfile collector
or a Pushgateway. Every metric is a gauge about the newest run or the pool after it, so
a scrape at any time reads the current truth and a missed run shows as an old timestamp.
"""

from __future__ import annotations

import math
import re
import typing as t
from collections.abc import Iterable, Mapping, Sequence

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    CONDITIONS,
    STATES,
    HandoverAction,
    HandoverResult,
    JournalState,
    Step,
)

# What the summary counts a node as, each a list of nodes in it: a node_handover result,
# except `returned` (free again by this run, where `free` may also mean "was free").
RETURNED = "returned"
RESULTS = (
    HandoverResult.LENT,
    RETURNED,
    HandoverResult.BLOCKED,
    HandoverResult.ROLLED_BACK,
    HandoverResult.FAILED,
    HandoverResult.REFUSED,
    HandoverResult.SKIPPED,
    # The Slurm records of deleted lent Nodes (orphans) a rebalance cleans.
    HandoverResult.DRAINING,
    HandoverResult.REMOVED,
)
PREFIX = "hpcops_slinky_handover_"


class RunOutcome:
    """How a run ended, for scripts (the summary's outcome)."""

    DONE: t.Final = "done"  # all it was asked, or all the plan said
    BLOCKED: t.Final = "blocked"  # jobs of a `wait` partition keep nodes
    # a node did not end where it was asked to, for example a lend an application pod
    # rolled back
    INCOMPLETE: t.Final = "incomplete"
    FAILED: t.Final = "failed"  # a step or a node failed, or was refused
    LEASE_HELD: t.Final = "lease_held"  # another run held the Lease: nothing was done


OUTCOMES = (
    RunOutcome.DONE,
    RunOutcome.BLOCKED,
    RunOutcome.INCOMPLETE,
    RunOutcome.FAILED,
    RunOutcome.LEASE_HELD,
)


class RunTrigger:
    """What started a run (the summary's ``trigger.by``, the metric's ``trigger`` label)."""

    MANUAL: t.Final = "manual"  # someone ran the playbook
    TIMER: t.Final = "timer"  # the CronJob or the systemd timer
    DEMAND: t.Final = "demand"  # the event source: application pods wait
    SLURM_DEMAND: t.Final = "slurm_demand"  # the event source: jobs an idle node would start
    IDLE: t.Final = "idle"  # the event source: pool nodes are idle


TRIGGERS = (
    RunTrigger.MANUAL,
    RunTrigger.TIMER,
    RunTrigger.DEMAND,
    RunTrigger.SLURM_DEMAND,
    RunTrigger.IDLE,
)
# The triggers of the event source, whose runs name their event in the summary's line.
EVENT_TRIGGERS = (RunTrigger.DEMAND, RunTrigger.SLURM_DEMAND, RunTrigger.IDLE)


def run_trigger(trigger: t.Any) -> dict[str, t.Any]:
    """The summary's trigger from the role's handover_trigger: a name, or the event source's
    event (``ansible_eda.event.handover``); anything else counts as manual."""
    if isinstance(trigger, Mapping):
        by = str(trigger.get("trigger", ""))
        return {
            "by": by if by in TRIGGERS else RunTrigger.MANUAL,
            "reason": str(trigger.get("reason", "")),
            "pods": [str(pod) for pod in trigger.get("pods") or ()],
            "nodes": [str(node) for node in trigger.get("nodes") or ()],
            "jobs": [_job_id(job) for job in trigger.get("jobs") or ()],
            "at": str(trigger.get("at", "")),
        }
    by = str(trigger or "")
    return {
        "by": by if by in TRIGGERS else RunTrigger.MANUAL,
        "reason": "",
        "pods": [],
        "nodes": [],
        "jobs": [],
        "at": "",
    }


def _job_id(job: t.Any) -> t.Any:
    """A Slurm job id of an event: a number, or its text when it is none."""
    try:
        return int(job)
    except (TypeError, ValueError):
        return str(job)


# Where a node asked for must end for the run to be done.
TARGETS = {HandoverAction.LEND: HandoverResult.LENT, HandoverAction.RECLAIM: HandoverResult.FREE}


def run_summary(
    *,
    run_id: str,
    started: float,
    finished: float,
    handovers: Iterable[Mapping[str, t.Any] | None],
    lease: Mapping[str, t.Any] | None,
    pool: Iterable[Mapping[str, t.Any]] | None,
    errors: Iterable[str] = (),
    action: str = "",
    requested: Iterable[str] = (),
    warnings: Iterable[str] = (),
    attention: Iterable[str] = (),
    trigger: t.Any = None,
    conditions: Iterable[Mapping[str, t.Any]] = (),
) -> dict[str, t.Any]:
    """The summary of one run from what its tasks returned.

    handovers are the results of node_handover (resume, reclaim, lend; None or {} when a
    task did not run); lease is the lease module's result (None for a run without one);
    pool is handover_plan's `status` rows read after the run (None: the read failed, and
    the pool is unknown, not empty); action is lend, reclaim or rebalance, and requested
    the nodes a lend or reclaim was asked for (named, or as its plan said); warnings are the
    run's own (what the report could not do), which come after each node's warnings and
    never make the run fail; attention the plan's lines of what needs a clean-up or a
    person (orphans, application pods on lent nodes), recorded with them; trigger is what
    started the run (`run_trigger`); conditions the plan's nodes whose evidence disagreed
    (reconcile: ``node``, ``condition``, ``emergency``), recorded with where this run left
    each.
    """
    nodes: dict[str, list[str]] = {result: [] for result in RESULTS}
    final: dict[str, str] = {}  # node -> where it ended, as its last handover said
    messages: dict[str, str] = {}
    reclaim_seconds: dict[str, float] = {}
    reclaim_timelines: dict[str, dict[str, float]] = {}
    node_seconds: dict[str, float] = {}
    node_warnings: list[str] = []
    admin_drains: dict[str, str] = {}
    for result in handovers:
        for entry in (result or {}).get("nodes") or []:
            node = str(entry.get("node", ""))
            outcome = str(entry.get("result", ""))
            steps = entry.get("steps") or []
            final[node] = outcome
            node_warnings += [f"{node}: {warning}" for warning in entry.get("warnings") or []]
            if entry.get("admin_drain"):
                admin_drains[node] = str(entry["admin_drain"])
            # Count what this run did, not nodes that already were where they ended.
            if outcome == HandoverResult.FREE and Step.FREE in steps:
                outcome = RETURNED
            elif outcome == HandoverResult.LENT and Step.REGISTERED not in steps:
                continue
            if outcome not in nodes:
                continue
            nodes[outcome].append(node)
            if entry.get("message") and outcome in (
                HandoverResult.BLOCKED,
                HandoverResult.FAILED,
                HandoverResult.REFUSED,
            ):
                messages[node] = str(entry["message"])
            if entry.get("seconds") is not None:
                node_seconds[node] = float(entry["seconds"])
            if outcome == RETURNED and entry.get("seconds") is not None:
                reclaim_seconds[node] = float(entry["seconds"])
                reclaim_timelines[node] = dict(entry.get("timeline") or {})
    errors = [str(error) for error in errors if error]
    errors += [
        f"{node}: {messages.get(node) or 'failed without a message'}"
        for node in nodes["failed"] + nodes["refused"]
    ]
    acted = lease is None or bool(lease.get("acquired"))
    states: dict[str, int] | None = None
    pool_rows = None if pool is None else list(pool)
    if pool_rows is not None:
        states = {state: 0 for state in STATES}
        for row in pool_rows:
            state = str(row.get("journal") or JournalState.FREE)
            states[state] = states.get(state, 0) + 1
    requested = list(dict.fromkeys(str(node) for node in requested))
    target = TARGETS.get(action)
    short = [node for node in requested if target and final.get(node) != target]
    holder = "" if acted else str((lease or {}).get("holder", ""))
    outcome = run_outcome(
        lease_holder=holder, errors=bool(errors), blocked=bool(nodes["blocked"]), short=short
    )
    found = {str(c.get("node")): c for c in conditions if c.get("condition")}
    return {
        "run": run_id,
        "action": action,
        "trigger": run_trigger(trigger),
        "outcome": outcome,
        "requested": requested,
        "nodes": dict(sorted(final.items())),
        "short": {node: final.get(node, "untouched") for node in short},
        "started": round(started, 3),
        "finished": round(finished, 3),
        "duration_s": round(max(finished - started, 0.0), 3),
        "acted": acted,
        "lease_holder": holder,
        "success": not errors,
        "errors": errors,
        "warnings": list(
            dict.fromkeys(
                [
                    *node_warnings,
                    *(str(line) for line in attention if line),
                    *(str(warning) for warning in warnings if warning),
                ]
            )
        ),
        # Nodes somebody else drained in Slurm while lent: node -> the reason they gave.
        "admin_drains": dict(sorted(admin_drains.items())),
        # Nodes whose evidence disagreed when the run planned: node -> condition; the
        # emergencies among them (a Slurm job beside an application pod).
        "conditions": {node: str(c["condition"]) for node, c in sorted(found.items())},
        "emergencies": sorted(node for node, c in found.items() if c.get("emergency")),
        **{result: sorted(found) for result, found in nodes.items()},
        "blocked_reasons": {node: messages[node] for node in nodes["blocked"] if node in messages},
        "reclaim_seconds": dict(sorted(reclaim_seconds.items())),
        # How long each node's handover in this run took, as node_handover measured it.
        "node_seconds": dict(sorted(node_seconds.items())),
        # Per returned node, when each step ended (seconds after its reclaim began).
        "reclaim_timelines": dict(sorted(reclaim_timelines.items())),
        "pool_nodes": len(pool_rows) if pool_rows is not None else None,
        "pool": states,
    }


def run_outcome(*, lease_holder: str, errors: bool, blocked: bool, short: list[str]) -> str:
    """One of RunOutcome; the first that applies wins."""
    if lease_holder:
        return RunOutcome.LEASE_HELD
    if errors:
        return RunOutcome.FAILED
    if blocked:
        return RunOutcome.BLOCKED
    return RunOutcome.INCOMPLETE if short else RunOutcome.DONE


def summary_line(summary: Mapping[str, t.Any]) -> str:
    """One line for an Event message or a log."""
    errors = f"; errors: {'; '.join(summary['errors'])}" if summary["errors"] else ""
    if not summary["acted"]:
        holder = summary["lease_holder"]
        return ("changed nothing" + (f": {holder} holds the Lease" if holder else "")) + errors
    parts = [
        f"{len(summary[result])} {result.replace('_', ' ')}"
        for result in ("lent", "returned", "blocked", "rolled_back", "failed", "refused")
        if summary[result]
    ]
    parts += [
        f"{len(summary[result])} orphaned Slurm node(s) {result}"
        for result in (HandoverResult.DRAINING, HandoverResult.REMOVED)
        if summary.get(result)
    ]
    parts = _condition_parts(summary) + parts
    if summary["reclaim_seconds"]:
        parts.append(f"slowest reclaim {max(summary['reclaim_seconds'].values()):.1f} s")
    if summary["pool"] is None:
        pool = "unknown"  # the read after the run failed; the errors say why
    else:
        pool = ", ".join(f"{n} {state}" for state, n in summary["pool"].items() if n) or "empty"
    text = "; ".join(parts) if parts else "no change"
    text += f" in {summary['duration_s']:.1f} s (pool: {pool})"
    warnings = summary.get("warnings") or []
    return (
        text
        + _trigger_text(summary)
        + errors
        + (f"; warnings: {'; '.join(warnings)}" if warnings else "")
    )


# Where a node whose evidence disagreed ended, in the run's line.
_ENDED = {
    HandoverResult.FREE: "given back",
    RETURNED: "given back",
    HandoverResult.LENT: "lent",
    HandoverResult.BLOCKED: "being given back, blocked by jobs of a wait partition",
    HandoverResult.FAILED: "its handover failed, the next run goes on",
    HandoverResult.REFUSED: "refused",
    HandoverResult.SKIPPED: "another run acted first",
}


def _condition_parts(summary: Mapping[str, t.Any]) -> list[str]:
    """The emergencies first, then the other conditions, each with where the run left it."""
    conditions = summary.get("conditions") or {}
    nodes = summary.get("nodes") or {}
    emergencies = summary.get("emergencies") or []

    def ended(node: str) -> str:
        return _ENDED.get(nodes.get(node, ""), "left for a person or a later run")

    parts = [
        f"EMERGENCY {conditions[node]} on {node} ({ended(node)})"
        for node in emergencies
        if node in conditions
    ]
    others = [
        f"{node} {condition} ({ended(node)})"
        for node, condition in conditions.items()
        if node not in emergencies
    ]
    if others:
        parts.append(f"{len(others)} disagreement(s): {', '.join(others)}")
    return parts


def in_users_words(text: str, names: Mapping[str, str]) -> str:
    """`text` with each setting named as the user wrote it (names: as the modules call it
    -> as the user does, e.g. lease.wait_s -> handover_lease_wait_s); a name inside a
    longer one is left alone."""
    if not text or not names:
        return text
    pattern = re.compile(
        r"(?<![\w.])("
        + "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
        + r")(?![\w])"
    )
    return pattern.sub(lambda match: names[match.group(1)], text)


# What the run did to a node that settles a line of attention about it.
_SETTLED = (
    HandoverResult.LENT,
    HandoverResult.FREE,
    HandoverResult.BLOCKED,
    HandoverResult.DRAINING,
    HandoverResult.REMOVED,
)


def unresolved(
    items: Iterable[Mapping[str, t.Any]], handovers: Sequence[Mapping[str, t.Any]]
) -> list[str]:
    """The plan's lines of attention (``node``, ``condition``, ``line``) that still hold
    once the run acted: a line about a node the run handed over (lent, given back, an
    orphan drained or removed) is dropped, since the run's summary says what it did; an
    application's toleration stays, as no run can fix a workload."""
    acted = {
        str(entry.get("node"))
        for handed in handovers
        for entry in handed.get("nodes") or []
        if entry.get("result") in _SETTLED and (entry.get("changed") or entry.get("steps"))
    }
    return [
        str(item["line"])
        for item in items
        if item.get("node") not in acted or item.get("condition") == "apps_on_lent_node"
    ]


def _trigger_text(summary: Mapping[str, t.Any]) -> str:
    """What started an event's run, for the line (timer and manual runs say nothing)."""
    trigger = summary.get("trigger") or {}
    if trigger.get("by") not in EVENT_TRIGGERS:
        return ""
    return f"; on {trigger['by']}: {trigger.get('reason') or 'an event'}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN"
    return repr(float(value)) if isinstance(value, float) else str(value)


def metrics_text(summary: Mapping[str, t.Any], cluster: str = "") -> str:
    """The summary in the Prometheus text exposition format (version 0.0.4).

    cluster, when given, labels every sample so that one Prometheus can tell several
    sites apart.
    """
    base = {"cluster": cluster} if cluster else {}
    families: list[tuple[str, str, list[tuple[dict[str, str], float]]]] = [
        (
            "last_run_timestamp_seconds",
            "When the newest handover run ended (Unix time).",
            [({}, summary["finished"])],
        ),
        (
            "last_run_duration_seconds",
            "How long the newest handover run took.",
            [({}, summary["duration_s"])],
        ),
        (
            "last_run_success",
            "1 when the newest run ended without errors.",
            [({}, bool(summary["success"]))],
        ),
        (
            "last_run_acted",
            "1 when the newest run held the handover Lease (0: another run had it).",
            [({}, bool(summary["acted"]))],
        ),
        (
            "last_run_trigger",
            "What started the newest run: 1 for its trigger (manual, timer, demand, "
            "slurm_demand or idle).",
            [
                ({"trigger": name}, name == (summary.get("trigger") or {}).get("by", ""))
                for name in TRIGGERS
            ],
        ),
        (
            "last_run_errors",
            "Errors of the newest run.",
            [({}, len(summary["errors"]))],
        ),
        (
            "last_run_nodes",
            "Nodes of the newest run by result.",
            [({"result": result}, len(summary[result])) for result in RESULTS],
        ),
        (
            "reclaim_seconds",
            "Seconds each node reclaimed by the newest run took, from start to free.",
            [({"node": node}, seconds) for node, seconds in summary["reclaim_seconds"].items()],
        ),
        (
            "last_run_reclaim_max_seconds",
            "The slowest reclaim of the newest run (0 when it reclaimed nothing).",
            [({}, max(summary["reclaim_seconds"].values(), default=0.0))],
        ),
        (
            "pool_nodes",
            "Pool nodes by journal state after the newest run (lent: Slurm's).",
            # Unknown after a failed read: no sample, rather than a pool of zeros.
            [({"state": state}, count) for state, count in (summary["pool"] or {}).items()],
        ),
        (
            "blocked_nodes",
            "Nodes the newest run left reclaiming because jobs of a wait partition run.",
            [({}, len(summary["blocked"]))],
        ),
        (
            "conditions",
            "Nodes whose evidence disagreed (journal, label, taint, slurmd, Slurm, "
            "application pods) when the newest run planned, by condition.",
            [
                (
                    {"condition": name},
                    sum(1 for found in (summary.get("conditions") or {}).values() if found == name),
                )
                for name in CONDITIONS
            ],
        ),
        (
            "emergency_nodes",
            "Nodes with a Slurm job beside an application pod when the newest run planned "
            "(that run re-taints each and gives it back under its partition's grace).",
            [({}, len(summary.get("emergencies") or []))],
        ),
    ]
    lines: list[str] = []
    for name, help_text, samples in families:
        full = PREFIX + name
        lines.append(f"# HELP {full} {help_text}")
        lines.append(f"# TYPE {full} gauge")
        for labels, value in samples:
            merged = {**base, **labels}
            label_text = ",".join(f'{key}="{_escape(str(val))}"' for key, val in merged.items())
            selector = f"{{{label_text}}}" if label_text else ""
            lines.append(f"{full}{selector} {_number(value)}")
    return "\n".join(lines) + "\n"
