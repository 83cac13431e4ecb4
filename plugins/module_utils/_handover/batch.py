# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One handover action on many nodes at once, as node_handover and handover_run do it.

PRIVATE to the collection: names here can change without notice. The nodes are handed over
by worker threads, each with its own Node; the Slurm reads are shared from a few workers
on; the result is the one node_handover returns.
"""

from __future__ import annotations

import typing as t
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import (
    Handover,
    Outcome,
    Settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import KubernetesCalls
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    HandoverAction,
    HandoverResult,
    Policy,
    PolicyError,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
    journal_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.shared_reads import (
    slurm_for_workers,
)

JSON = dict[str, t.Any]

TAINT_SPEC: dict[str, dict[str, t.Any]] = {
    "key": {"type": "str", "default": "hpcops.io/lent", "no_log": False},
    "value": {"type": "str", "default": "slurm"},
    "effect": {"type": "str", "choices": ["NoSchedule", "NoExecute"], "default": "NoSchedule"},
}

# The options of the handover's node work, shared by node_handover and handover_run.
HANDOVER_WORK_SPEC: dict[str, dict[str, t.Any]] = {
    "holder": {"type": "str", "default": "hpcops.slinky"},
    "lent_taint": {"type": "dict", "default": {}, "options": TAINT_SPEC},
    "reason_prefix": {"type": "str", "default": "hpcops:"},
    "lend_timeout_s": {"type": "float", "default": 120.0},
    "pod_timeout_s": {"type": "float", "default": 30.0},
    "poll_interval_s": {"type": "float", "default": 0.5},
    "max_parallel": {"type": "int", "default": 8},
    "shared_reads_from": {"type": "int", "default": 4},
    "event_namespace": {"type": "str", "default": "default"},
}


def markers_from_params(params: t.Mapping[str, t.Any]) -> HandoverMarkers:
    label = params["lend_label"]
    if len(label) != 1:
        raise PolicyError(
            "lend_label",
            f"{label!r} is not one label",
            "give the one key and value the lendable NodeSet selects, "
            "for example {hpcops.io/slurm-lent: 'true'}",
        )
    ((key, value),) = label.items()
    taint = params["lent_taint"] or {name: spec["default"] for name, spec in TAINT_SPEC.items()}
    return HandoverMarkers(
        journal_annotation=params["journal_annotation"],
        lend_label=str(key),
        lend_label_value=str(value),
        taint_key=taint["key"],
        taint_value=taint["value"],
        taint_effect=taint["effect"],
        reason_prefix=params["reason_prefix"],
    )


def check_numbers(params: t.Mapping[str, t.Any]) -> None:
    """Raise PolicyError for the first timing or count that cannot be."""
    for name in ("lend_timeout_s", "pod_timeout_s", "poll_interval_s", "max_parallel"):
        if params[name] <= 0:
            raise PolicyError(name, f"{params[name]} is not above 0", "give a positive number")
    if params["shared_reads_from"] < 0:
        raise PolicyError(
            "shared_reads_from",
            f"{params['shared_reads_from']} is below 0",
            "give a number of nodes, or 0 to never share",
        )


def work_settings(
    params: t.Mapping[str, t.Any],
    policy: Policy,
    markers: HandoverMarkers,
    *,
    check_mode: bool,
    fault: str = "",
) -> Settings:
    """The executor's settings from the options of HANDOVER_WORK_SPEC."""
    return Settings(
        markers=markers,
        policy=policy,
        by=params["holder"],
        lend_timeout_s=params["lend_timeout_s"],
        pod_timeout_s=params["pod_timeout_s"],
        poll_s=params["poll_interval_s"],
        event_namespace=params["event_namespace"],
        nodeset_namespace=params.get("nodeset_namespace"),
        check_mode=check_mode,
        fault=fault,
    )


def hand_over(
    kube: KubernetesCalls,
    slurm: t.Any,
    settings: Settings,
    action: str,
    nodes: t.Sequence[str],
    *,
    max_parallel: int,
    shared_reads_from: int,
    reason: str = "",
    idle_marks: t.Mapping[str, float | None] | None = None,
    conditions: t.Mapping[str, tuple[str, str]] | None = None,
) -> JSON:
    """Do `action` on each node (each once, in the order given; for mark_idle the nodes
    of idle_marks), at most max_parallel at a time. `conditions` maps a node whose evidence
    disagreed (reconcile) to its condition and the reason its journal and Event give. The result is node_handover's without
    its pool: nodes (each Outcome as a dict), changed, lent, returned, blocked, and
    `outcomes`, the Outcome objects."""
    marking = action == HandoverAction.MARK_IDLE
    marks = dict(idle_marks or {})
    names = list(marks if marking else dict.fromkeys(nodes))
    result: JSON = {"changed": False, "nodes": [], "lent": [], "returned": [], "blocked": []}
    if not names:
        result["outcomes"] = []
        return result
    workers = min(max_parallel, len(names))
    handover = Handover(
        kube,
        slurm_for_workers(slurm, workers, settings.poll_s, shared_reads_from),
        settings,
    )
    handover.slurm.attach(slurm)

    def handle_node(name: str) -> Outcome:
        if marking:
            mark = marks[name]
            return handover.mark_idle(name, float(mark) if mark is not None else None)
        if action == HandoverAction.CLEAN_ORPHANS:
            return handover.clean_orphan(name)
        condition, why = (conditions or {}).get(name, ("", reason))
        return handover.run(name, action, why, condition)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(handle_node, names))
    result["outcomes"] = outcomes
    result["nodes"] = [outcome.as_dict() for outcome in outcomes]
    result["changed"] = any(outcome.changed for outcome in outcomes)
    for key, wanted in (
        ("lent", HandoverResult.LENT),
        ("returned", HandoverResult.FREE),
        ("blocked", HandoverResult.BLOCKED),
    ):
        result[key] = [
            o.node for o in outcomes if o.result == wanted and (key != "returned" or o.changed)
        ]
    return result


def failed_or_refused(outcomes: t.Iterable[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.result in (HandoverResult.FAILED, HandoverResult.REFUSED)]


def pool_journals(
    kube: KubernetesCalls, policy: Policy, markers: HandoverMarkers
) -> list[dict[str, str]]:
    """Each pool node and its journal state, as handover_plan's status rows name them."""
    return [
        {"node": node["metadata"]["name"], "journal": journal_of(node, markers).state}
        for node in sorted(kube.nodes(), key=lambda node: node["metadata"]["name"])
        if matches(node["metadata"].get("labels") or {}, policy.pool_selector)
    ]
