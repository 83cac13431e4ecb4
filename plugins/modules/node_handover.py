#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: node_handover
short_description: Lend interactive Kubernetes nodes to Slurm, or take them back
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Moves the named pool nodes between the applications and Slurm with the handover
    protocol, in its fixed order, recording each transition in a journal annotation on the
    Node and as a Kubernetes Event.
  - "V(lend): journal C(lending) and the lent taint in one patch; if an application pod was
    bound meanwhile, roll back; add the lend label (the Slinky operator starts slurmd); wait
    until the Slurm node is registered and not DOWN; journal C(lent)."
  - "V(reclaim): journal C(reclaiming) with a deadline (the longest grace of the node's
    partitions); drain the Slurm node with O(reason_prefix); wait until it is drained and
    idle or the deadline passes, then apply the partition's escalation (V(requeue) marks the
    node DOWN so Slurm requeues its batch jobs, and ends those that cannot be requeued,
    listed in C(jobs.ended_not_requeueable); V(cancel) cancels them; V(wait) touches no job
    and reports the node C(blocked)); remove the lend label; delete the drained slurmd pod
    (after an escalation, once the operator has had O(pod_timeout_s) to do it) and wait
    until it is gone; delete the Slurm node record; remove the taint and journal C(free)."
  - V(resume) finishes what an earlier run left in C(lending) or C(reclaiming); lend and
    reclaim resume such nodes too.
  - "V(clean_orphans) takes Slurm node names (M(hpcops.slinky.handover_plan)'s C(orphans)):
    Slurm nodes of the lendable NodeSets whose Kubernetes Node is gone. Each is drained
    (running jobs finish, none start) and its record removed once no job runs there; a node
    that has a Kubernetes Node again is skipped."
  - Every Node write carries the resourceVersion it was computed from, so of two runs only
    one makes each transition; the other reports the node C(skipped).
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.handover
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
options:
  nodes:
    description: The Kubernetes names of the nodes.
    type: list
    elements: str
    default: []
  action:
    description:
      - What to do with them.
      - V(mark_idle) writes O(idle_marks) (the planner's C(idle_marks)) into the journals of
        free nodes; O(nodes) is not used.
    type: str
    choices: [lend, reclaim, resume, mark_idle, clean_orphans]
    required: true
  idle_marks:
    description: Node name to the time it was first seen idle (or null, busy again), for O(action=mark_idle).
    type: dict
    default: {}
  holder:
    description: Who acts, as written in the journal and the Events (the Lease holder in a scheduled run).
    type: str
    default: hpcops.slinky
  reason:
    description: Why, for the journal of a reclaim.
    type: str
    default: ""
  lend_label:
    description: The label (one key and value) the lendable NodeSet selects.
    type: dict
    default: {hpcops.io/slurm-lent: "true"}
  lent_taint:
    description: The taint that keeps application pods off a lent node (the slurmd pods tolerate it).
    type: dict
    default: {}
    suboptions:
      key:
        description: Taint key.
        type: str
        default: hpcops.io/lent
      value:
        description: Taint value.
        type: str
        default: slurm
      effect:
        description: Taint effect.
        type: str
        choices: [NoSchedule, NoExecute]
        default: NoSchedule
  reason_prefix:
    description:
      - Slurm drain reasons that start with it are ours. A drain set by somebody else is kept
        and reported, never cleared.
    type: str
    default: "hpcops:"
  lend_timeout_s:
    description: Seconds to wait for slurmd to register before the lend is given up and rolled back.
    type: float
    default: 120
  pod_timeout_s:
    description:
      - Seconds to wait for the slurmd pod to go once it is deleted, beyond its own
        termination grace; for the operator to remove it first after an escalation; and for
        jobs to leave after the escalation.
    type: float
    default: 30
  poll_interval_s:
    description: Seconds between two looks at Slurm or the pods while waiting.
    type: float
    default: 0.5
  max_parallel:
    description: Nodes handed over at once.
    type: int
    default: 8
  shared_reads_from:
    description:
      - From this many nodes handed over at once, the workers share one read of all Slurm
        nodes per O(poll_interval_s) instead of each reading its own node while it waits,
        which keeps slurmrestd's load flat however many nodes move.
      - Below it, each worker reads its own node (cheaper at a site of thousands of nodes).
        V(0) never shares.
    type: int
    default: 4
  event_namespace:
    description: Namespace of the Events written on the Nodes.
    type: str
    default: default
  nodeset_namespace:
    description:
      - Namespace of the Slinky NodeSets that run slurmd on lent nodes. A lend touches those
        that select the lend label, so that the operator starts slurmd at once.
      - By default NodeSets are looked for in every namespace; naming it lets the run's
        ServiceAccount list and patch NodeSets in that namespace only.
    type: str
attributes:
  check_mode:
    support: full
    details: Reads the Nodes and reports the steps each would take; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A node already lent (or free) is left as it is; a node half handed over is finished.
requirements:
  - python-hostlist
notes:
  - Needs Nodes get/patch, Pods list/delete (slurmd pods only), Events create, and a
    slurmrestd token that may update and delete nodes and signal jobs.
  - Fails when a node was refused (not in the pool, never-touch, running applications, not
    Ready) or a step failed; nodes that were handed over are listed all the same. A failed
    node keeps its journal state, and the next run with O(action=resume) finishes it.
seealso:
  - module: hpcops.slinky.handover_plan
  - module: hpcops.slinky.lease
"""

EXAMPLES = r"""
- name: Lend two idle notebook nodes to Slurm
  hpcops.slinky.node_handover:
    nodes: [int01, int02]
    action: lend
    url: http://slurm-restapi.slurm:6820
    jwt_key_path: /etc/hpcops/jwt_hs256.key
    policy:
      pool_selector: {hpcops.io/pool: interactive}

- name: Take them back, giving backfill jobs five minutes before they are requeued
  hpcops.slinky.node_handover:
    nodes: [int01, int02]
    action: reclaim
    reason: JupyterHub needs the nodes
    url: http://slurm-restapi.slurm:6820
    jwt_key_path: /etc/hpcops/jwt_hs256.key
    policy:
      pool_selector: {hpcops.io/pool: interactive}
      partitions:
        backfill: {grace_s: 300, escalation: requeue}
  register: reclaimed
"""

RETURN = r"""
nodes:
  description: One entry per node, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Kubernetes node name.
      type: str
    result:
      description:
        - Where the node ended; V(lent), V(free), V(rolled_back) (an application pod came
          first), V(blocked) (jobs of a V(wait) partition), V(failed), V(refused),
          V(skipped) (another run acted first) or V(unchanged); for V(clean_orphans),
          V(draining) (jobs still run) or V(removed).
      type: str
    op:
      description: The operation id written in the journal and the Events.
      type: str
    slurm_node:
      description: The Slurm node name of the node's slurmd.
      type: str
    steps:
      description: The steps taken (in check mode, C(would <step>)).
      type: list
      elements: str
    message:
      description: Why the node ended where it did.
      type: str
    jobs:
      description: Job ids cancelled, requeued, ended (not requeueable), waiting, left running.
      type: dict
    seconds:
      description: How long the node's handover took.
      type: float
    timeline:
      description: Seconds from the start of the node's handover to the end of each step.
      type: dict
    warnings:
      description: What the node's handover warned about (also printed as warnings).
      type: list
      elements: str
    admin_drain:
      description: >-
        The reason of a drain somebody else set on the node's Slurm node while it was lent
        (kept in its journal); empty when none.
      type: str
pool:
  description:
    - Each node of the pool (O(policy)'s C(pool_selector)) and its journal state, read after
      the handover; what a run reports without reading the cluster again.
    - Left out when no node was given, or when the Nodes could not be read.
  returned: when nodes were handed over
  type: list
  elements: dict
  sample: [{node: int01, journal: lent}, {node: int02, journal: free}]
lent:
  description: Nodes lent (now or already).
  returned: always
  type: list
  elements: str
returned:
  description: Nodes given back to the applications.
  returned: always
  type: list
  elements: str
blocked:
  description: Nodes kept in C(reclaiming) by jobs of a V(wait) partition.
  returned: always
  type: list
  elements: str
"""

import contextlib
import typing as t
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.executor import (
    Handover,
    Outcome,
    Settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.faults import armed_fault
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import KubernetesCalls
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ACTIONS,
    HandoverAction,
    HandoverResult,
    Policy,
    PolicyError,
    matches,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_module_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import (
    HandoverMarkers,
    journal_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    cluster_token_source,
    slurm_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.shared_reads import (
    slurm_for_workers,
)

TAINT_SPEC: dict[str, dict[str, t.Any]] = {
    "key": {"type": "str", "default": "hpcops.io/lent", "no_log": False},
    "value": {"type": "str", "default": "slurm"},
    "effect": {"type": "str", "choices": ["NoSchedule", "NoExecute"], "default": "NoSchedule"},
}


def markers_from_params(params: dict[str, t.Any]) -> HandoverMarkers:
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


def check_numbers(params: dict[str, t.Any]) -> None:
    """Raise PolicyError for the first timing, count or idle mark that cannot be."""
    for name in ("lend_timeout_s", "pod_timeout_s", "poll_interval_s", "max_parallel"):
        if params[name] <= 0:
            raise PolicyError(name, f"{params[name]} is not above 0", "give a positive number")
    if params["shared_reads_from"] < 0:
        raise PolicyError(
            "shared_reads_from",
            f"{params['shared_reads_from']} is below 0",
            "give a number of nodes, or 0 to never share",
        )
    for index, name in enumerate(params["nodes"]):
        if not name.strip():
            raise PolicyError(
                f"nodes[{index}]", f"{name!r} is empty", "give the Kubernetes name of a pool node"
            )
    for name, mark in params["idle_marks"].items():
        if mark is not None and not isinstance(mark, (int, float)):
            raise PolicyError(
                f"idle_marks.{name}",
                f"{mark!r} is not a time",
                "give seconds since the epoch, or null (pass handover_plan's idle_marks)",
            )


def main() -> None:
    module = (
        handover_module_argspec()
        .update_argspec(
            nodes={"type": "list", "elements": "str", "default": []},
            action={
                "type": "str",
                "choices": list(ACTIONS),
                "required": True,
            },
            idle_marks={"type": "dict", "default": {}},
            holder={"type": "str", "default": "hpcops.slinky"},
            reason={"type": "str", "default": ""},
            lent_taint={"type": "dict", "default": {}, "options": TAINT_SPEC},
            reason_prefix={"type": "str", "default": "hpcops:"},
            lend_timeout_s={"type": "float", "default": 120.0},
            pod_timeout_s={"type": "float", "default": 30.0},
            poll_interval_s={"type": "float", "default": 0.5},
            max_parallel={"type": "int", "default": 8},
            shared_reads_from={"type": "int", "default": 4},
            event_namespace={"type": "str", "default": "default"},
        )
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    result: dict[str, t.Any] = {
        "changed": False,
        "nodes": [],
        "lent": [],
        "returned": [],
        "blocked": [],
    }
    try:
        policy = policy_from_params(params["policy"])
        policy.check()
        markers = markers_from_params(params)
        check_numbers(params)
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    marking = params["action"] == HandoverAction.MARK_IDLE
    # each node once, in the order given
    nodes = list(params["idle_marks"] if marking else dict.fromkeys(params["nodes"]))
    if not nodes:
        module.exit_json(**result)
    workers = min(params["max_parallel"], len(nodes))
    try:
        kube = KubernetesCalls(
            kubernetes_client(params["kubeconfig"], params["context"]), connections=workers
        )
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    settings = Settings(
        markers=markers,
        policy=policy,
        by=params["holder"],
        lend_timeout_s=params["lend_timeout_s"],
        pod_timeout_s=params["pod_timeout_s"],
        poll_s=params["poll_interval_s"],
        event_namespace=params["event_namespace"],
        nodeset_namespace=params["nodeset_namespace"],
        check_mode=module.check_mode,
        fault=armed_fault(),
    )
    slurm = slurm_client(module, cluster_token_source(kube.client, module.params))
    handover = Handover(
        kube,
        slurm_for_workers(slurm, workers, params["poll_interval_s"], params["shared_reads_from"]),
        settings,
    )
    handover.slurm.attach(slurm)

    def handle_node(name: str) -> Outcome:
        if marking:
            mark = params["idle_marks"][name]
            return handover.mark_idle(name, float(mark) if mark is not None else None)
        if params["action"] == HandoverAction.CLEAN_ORPHANS:
            return handover.clean_orphan(name)
        return handover.run(name, params["action"])

    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(handle_node, nodes))
    with contextlib.suppress(KubernetesError):  # the run's report then reads it itself
        result["pool"] = pool_journals(kube, policy, markers)

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
    for outcome in outcomes:
        for warning in outcome.warnings:
            module.warn(f"{outcome.node}: {warning}")
        if outcome.result == HandoverResult.BLOCKED:
            module.warn(f"{outcome.node}: {outcome.message}")
    failed_or_refused = [
        o for o in outcomes if o.result in (HandoverResult.FAILED, HandoverResult.REFUSED)
    ]
    if failed_or_refused:
        module.fail_json(
            msg="; ".join(f"{o.node}: {o.result}: {o.message}" for o in failed_or_refused), **result
        )
    module.exit_json(**result)


def pool_journals(
    kube: KubernetesCalls, policy: Policy, markers: HandoverMarkers
) -> list[dict[str, str]]:
    """Each pool node and its journal state, as handover_plan's status rows name them."""
    return [
        {"node": node["metadata"]["name"], "journal": journal_of(node, markers).state}
        for node in sorted(kube.nodes(), key=lambda node: node["metadata"]["name"])
        if matches(node["metadata"].get("labels") or {}, policy.pool_selector)
    ]


if __name__ == "__main__":
    main()
