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
  - hpcops.slinky.handover.WORK
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
  reason:
    description: Why, for the journal of a reclaim.
    type: str
    default: ""
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
    condition:
      description: >-
        What the node's evidence disagreed on, when a run resolves that (for example
        C(slurm_and_apps)); empty otherwise. Always empty from this module.
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

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.batch import (
    HANDOVER_WORK_SPEC,
    check_numbers,
    failed_or_refused,
    hand_over,
    markers_from_params,
    pool_journals,
    work_settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.faults import armed_fault
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import KubernetesCalls
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    ACTIONS,
    HandoverAction,
    HandoverResult,
    PolicyError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_module_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    cluster_token_source,
    slurm_client,
)


def check_nodes_and_marks(params: dict[str, t.Any]) -> None:
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
            reason={"type": "str", "default": ""},
            **HANDOVER_WORK_SPEC,
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
        check_nodes_and_marks(params)
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    marking = params["action"] == HandoverAction.MARK_IDLE
    if not (params["idle_marks"] if marking else params["nodes"]):
        module.exit_json(**result)
    try:
        kube = KubernetesCalls(
            kubernetes_client(params["kubeconfig"], params["context"]),
            connections=min(params["max_parallel"], len(params["nodes"]) or 1),
        )
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    settings = work_settings(
        params, policy, markers, check_mode=module.check_mode, fault=armed_fault()
    )
    slurm = slurm_client(module, cluster_token_source(kube.client, module.params))
    handed = hand_over(
        kube,
        slurm,
        settings,
        params["action"],
        params["nodes"],
        max_parallel=params["max_parallel"],
        shared_reads_from=params["shared_reads_from"],
        reason=params["reason"],
        idle_marks=params["idle_marks"],
    )
    outcomes = handed.pop("outcomes")
    result.update(handed)
    with contextlib.suppress(KubernetesError):  # the run's report then reads it itself
        result["pool"] = pool_journals(kube, policy, markers)
    for outcome in outcomes:
        for warning in outcome.warnings:
            module.warn(f"{outcome.node}: {warning}")
        if outcome.result == HandoverResult.BLOCKED:
            module.warn(f"{outcome.node}: {outcome.message}")
    failed = failed_or_refused(outcomes)
    if failed:
        module.fail_json(
            msg="; ".join(f"{o.node}: {o.result}: {o.message}" for o in failed), **result
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
