#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: handover_plan
short_description: Plan which interactive nodes to lend to Slurm and which to take back
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Reads the Kubernetes Nodes and Pods and the Slurm nodes and jobs, and returns which pool
    nodes to lend to Slurm, which to reclaim (cheapest first) and which to leave alone, each
    with its reason. Changes nothing.
  - Nodes left in C(lending) or C(reclaiming) by an earlier run come first, as O(policy)'s
    C(max_changes_per_run) allows.
  - The plan is a pure function of what it reads, the policy and the time; the same state
    gives the same plan.
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
options:
  journal_annotation:
    description: The Node annotation that holds the handover journal.
    type: str
    default: hpcops.io/handover
  policy:
    description: What may be lent and what must stay with the applications.
    type: dict
    required: true
    suboptions:
      pool_selector:
        description: Labels of the lendable pool's nodes; no other node is ever planned.
        type: dict
        required: true
      never_touch_selector:
        description: Labels of pool nodes that must never be lent.
        type: dict
        default: {}
      headroom:
        description: Free, idle pool nodes kept for applications beyond the pending demand.
        type: int
        default: 1
      max_lent:
        description: At most this many nodes lent at once (unset, no count limit).
        type: int
      max_lent_fraction:
        description: At most this fraction of the pool lent at once.
        type: float
        default: 1.0
      lend_min_idle_s:
        description: Seconds a node must have run no application pod before it is lent.
        type: int
        default: 600
      relend_cooldown_s:
        description: Seconds after a reclaim before the node may be lent again.
        type: int
        default: 1800
      max_changes_per_run:
        description: Nodes one run may lend, reclaim or resume.
        type: int
        default: 8
      demand_namespaces:
        description: Namespaces whose unschedulable pods count as demand (empty, all but the system ones).
        type: list
        elements: str
        default: []
      demand_selector:
        description: Labels a pending pod must carry to count as demand.
        type: dict
        default: {}
      system_namespaces:
        description: Namespaces whose pods never make a node busy nor count as demand.
        type: list
        elements: str
        default: [kube-system, kube-node-lease, kube-public]
      partitions:
        description:
          - Per Slurm partition, C(grace_s) (seconds jobs get to finish when their node is
            reclaimed) and C(escalation) (V(requeue), V(cancel) or V(wait)).
          - Nodes running jobs of a V(wait) partition are reclaimed last.
        type: dict
        default: {}
      default_escalation:
        description: The escalation of partitions not in C(partitions).
        type: str
        choices: [requeue, cancel, wait]
        default: requeue
      default_grace_s:
        description: The grace of partitions not in C(partitions).
        type: int
        default: 300
requirements:
  - python-hostlist
notes:
  - Reads with the permissions Nodes get/list, Pods list, and a slurmrestd token.
seealso:
  - module: hpcops.slinky.slurm_info
"""

EXAMPLES = r"""
- name: What would a rebalance do now
  hpcops.slinky.handover_plan:
    url: http://slurm-restapi.slurm:6820
    jwt_key_path: /etc/hpcops/jwt_hs256.key
    policy:
      pool_selector: {hpcops.io/pool: interactive}
      never_touch_selector: {hpcops.io/never-touch: "true"}
      headroom: 2
      max_lent_fraction: 0.75
      partitions:
        backfill: {grace_s: 300, escalation: requeue}
  register: plan

- name: Show it
  ansible.builtin.debug:
    msg: "lend {{ plan.lend | map(attribute='node') }}, reclaim {{ plan.reclaim | map(attribute='node') }}"
"""

RETURN = r"""
resume:
  description: Nodes an earlier run left in C(lending) or C(reclaiming), to finish first.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Kubernetes (and Slurm) node name.
      type: str
    reason:
      description: Why.
      type: str
lend:
  description: Nodes to lend now, with why.
  returned: always
  type: list
  elements: dict
reclaim:
  description: Lent nodes to take back now, cheapest first, with why.
  returned: always
  type: list
  elements: dict
left_alone:
  description: Every other node, with why it is not acted on.
  returned: always
  type: list
  elements: dict
idle_marks:
  description: Journal C(idle_since) values to record (node to time first seen idle, or null when busy again).
  returned: always
  type: dict
demand_nodes:
  description: Pool nodes the pending application pods need.
  returned: always
  type: int
free_idle:
  description: Pool nodes that are free, Ready, schedulable and run no application pod.
  returned: always
  type: int
lent:
  description: Pool nodes lent now.
  returned: always
  type: int
"""

import time
import typing as t

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpcops.slinky.plugins.module_utils._handover_plan import (
    PartitionPolicy,
    Policy,
    PolicyError,
    node_view,
    plan,
    pod_view,
    slurm_node_views,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._kubernetes import (
    KubernetesError,
    kubernetes_client,
    list_objects,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm_module import (
    SLURMRESTD_MUTUALLY_EXCLUSIVE,
    failing_cleanly,
    slurm_client,
    slurmrestd_argument_spec,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm_query import job_node_names

POLICY_SPEC: dict[str, dict[str, t.Any]] = {
    "pool_selector": {"type": "dict", "required": True},
    "never_touch_selector": {"type": "dict", "default": {}},
    "headroom": {"type": "int", "default": 1},
    "max_lent": {"type": "int"},
    "max_lent_fraction": {"type": "float", "default": 1.0},
    "lend_min_idle_s": {"type": "int", "default": 600},
    "relend_cooldown_s": {"type": "int", "default": 1800},
    "max_changes_per_run": {"type": "int", "default": 8},
    "demand_namespaces": {"type": "list", "elements": "str", "default": []},
    "demand_selector": {"type": "dict", "default": {}},
    "system_namespaces": {
        "type": "list",
        "elements": "str",
        "default": ["kube-system", "kube-node-lease", "kube-public"],
    },
    "partitions": {"type": "dict", "default": {}},
    "default_escalation": {
        "type": "str",
        "choices": ["requeue", "cancel", "wait"],
        "default": "requeue",
    },
    "default_grace_s": {"type": "int", "default": 300},
}


def policy_from_params(params: dict[str, t.Any]) -> Policy:
    """The planner's policy; PolicyError naming the option at fault."""
    partitions: dict[str, PartitionPolicy] = {}
    for name, raw in (params["partitions"] or {}).items():
        if not isinstance(raw, dict) or set(raw) - {"grace_s", "escalation"}:
            raise PolicyError(
                f"policy.partitions.{name}",
                f"{raw!r} is not a mapping of grace_s and escalation",
                "for example {grace_s: 300, escalation: requeue}",
            )
        try:
            grace = int(raw.get("grace_s", params["default_grace_s"]))
        except (TypeError, ValueError):
            raise PolicyError(
                f"policy.partitions.{name}.grace_s", "is not a number", "give seconds"
            ) from None
        partitions[str(name)] = PartitionPolicy(
            grace, str(raw.get("escalation", params["default_escalation"]))
        )
    return Policy(
        pool_selector={str(k): str(v) for k, v in params["pool_selector"].items()},
        never_touch_selector={str(k): str(v) for k, v in params["never_touch_selector"].items()},
        headroom=params["headroom"],
        max_lent=params["max_lent"],
        max_lent_fraction=params["max_lent_fraction"],
        lend_min_idle_s=params["lend_min_idle_s"],
        relend_cooldown_s=params["relend_cooldown_s"],
        max_changes_per_run=params["max_changes_per_run"],
        demand_namespaces=tuple(params["demand_namespaces"]),
        demand_selector={str(k): str(v) for k, v in params["demand_selector"].items()},
        system_namespaces=tuple(params["system_namespaces"]),
        partitions=partitions,
        default_partition=PartitionPolicy(params["default_grace_s"], params["default_escalation"]),
    )


def main() -> None:
    argument_spec = slurmrestd_argument_spec()
    argument_spec.update(
        kubeconfig={"type": "path"},
        context={"type": "str"},
        journal_annotation={"type": "str", "default": "hpcops.io/handover"},
        policy={"type": "dict", "required": True, "options": POLICY_SPEC},
    )
    module = AnsibleModule(
        argument_spec=argument_spec,
        mutually_exclusive=SLURMRESTD_MUTUALLY_EXCLUSIVE,
        supports_check_mode=True,
    )
    result: dict[str, t.Any] = {"changed": False}
    try:
        policy = policy_from_params(module.params["policy"])
        policy.check()
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    try:
        client = kubernetes_client(module.params["kubeconfig"], module.params["context"])
        nodes = [
            node_view(obj, module.params["journal_annotation"])
            for obj in list_objects(client, "v1", "Node")
        ]
        pods = [pod_view(obj) for obj in list_objects(client, "v1", "Pod")]
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    slurm = slurm_client(module)
    with failing_cleanly(module, result):
        slurm_nodes = slurm_node_views(slurm.nodes(), slurm.jobs(), job_node_names)
    decided = plan(nodes, pods, slurm_nodes, policy, time.time())
    result.update(decided.as_dict())
    module.exit_json(**result)


if __name__ == "__main__":
    main()
