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
  - Also reports what needs a clean-up or a person, in RV(orphans) (Slurm nodes of the
    lendable NodeSets whose Kubernetes Node is gone) and RV(apps_on_lent_nodes).
  - "Each node's state comes from all the evidence, not from its journal alone: the journal,
    the lend label, the lent taint, slurmd pods on the node, Slurm's record of the node and
    its jobs, and application pods. Where they disagree, the node has a condition and one
    resolution (RV(conditions), RV(reconcile)); a run resolves them before new work."
options:
  lent_taint:
    description: The taint that keeps application pods off lent nodes, as the runs write it.
    type: dict
    default: {}
    suboptions:
      key:
        description: Its key.
        type: str
        default: hpcops.io/lent
      value:
        description: Its value.
        type: str
        default: slurm
      effect:
        description: Its effect.
        type: str
        choices: [NoSchedule, NoExecute]
        default: NoSchedule
  partitions:
    description:
      - Partitions of O(policy) to check against the cluster, as a run checks them (each must
        be a Slurm partition of a lendable NodeSet); each one that is not is in
        RV(refusals), with the partition it most resembles. Unset, none is checked.
    type: list
    elements: str
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.handover
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
requirements:
  - python-hostlist
notes:
  - Reads with the permissions Nodes get/list, Pods list, NodeSets list, and a slurmrestd token.
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
slurm_demand:
  description:
    - "Slurm's side of the plan with O(policy.lend_when=demand): the pending jobs of the
      lendable partitions and what lending would do for them. Null with V(idle), and when
      the applications need nodes back first."
  returned: always
  type: dict
  contains:
    pending_jobs:
      description: Pending jobs of the lendable partitions.
      type: int
    fitting_jobs:
      description: Those a lent node would start (see O(policy.lend_when)).
      type: int
    nodes:
      description: Free nodes the fitting jobs need lent, within the policy's limits.
      type: int
    lent_nodes_used:
      description: Lent nodes idle in Slurm that waiting jobs will start on.
      type: list
      elements: str
    unplaced_count:
      description: Fitting jobs that did not get all their nodes within the limits.
      type: int
    unplaced_jobs:
      description: The first few of them.
      type: list
      elements: int
    skipped:
      description:
        - Pending jobs lending would not start, counted per reason, with a few job ids each.
        - A job no pool node holds, in the CPUs, memory and GPUs Slurm has of a lent node
          (its record) or will have (the lendable NodeSet's slurmd limits, within the
          Node's allocatable), and a job Slurm holds as C(BadConstraints), have the reason
          C(asks more than a pool node has) with what it exceeds (C(CPUs 64 > 32)).
      type: list
      elements: dict
  sample:
    pending_jobs: 3
    fitting_jobs: 1
    nodes: 1
    lent_nodes_used: []
    unplaced_count: 0
    unplaced_jobs: []
    skipped:
      - {reason: held, jobs: 2, examples: [41, 42]}
      - {reason: "asks more than a pool node has: CPUs 64 > 32", jobs: 1, examples: [43]}
orphans:
  description:
    - Slurm nodes of the lendable NodeSets with no Kubernetes Node (it was deleted while lent),
      and what a rebalance does about each; M(hpcops.slinky.node_handover) with
      O(hpcops.slinky.node_handover#module:action=clean_orphans) does it.
  returned: always
  type: list
  elements: dict
  contains:
    node:
      description: The Slurm node name.
      type: str
    action:
      description: V(drain) (jobs may finish, none start), V(wait) (drained, jobs still run) or V(remove) (idle; its record goes).
      type: str
    reason:
      description: What was found.
      type: str
apps_on_lent_nodes:
  description:
    - Application pods running on a node lent to Slurm (they tolerate the lent taint), with
      C(pod), C(node), C(journal) and C(advice).
  returned: always
  type: list
  elements: dict
attention:
  description:
    - Everything that needs a clean-up or a person, one line each, with what to do or what a
      run does. RV(orphans), nodes whose evidence disagrees (RV(conditions)), nodes that left
      the pool with the handover's marks on them, lent nodes drained in Slurm by someone
      else, nodes given back cordoned for such a drain, and RV(apps_on_lent_nodes).
  returned: always
  type: list
  elements: str
attention_items:
  description: RV(attention) with the C(node) and the C(condition) (a condition, C(admin_drain) or C(apps_on_lent_node)) of each line.
  returned: always
  type: list
  elements: dict
conditions:
  description:
    - Nodes whose evidence disagrees, with C(node), C(condition) (for example
      C(slurm_and_apps), C(journal_lent_no_label), C(slurmd_without_journal),
      C(left_the_pool)), C(resolution) (C(resume), C(lend), C(reclaim), C(clean_orphan) or
      C(person)), C(emergency) (a Slurm job beside an application pod) and C(evidence).
  returned: always
  type: list
  elements: dict
reconcile:
  description:
    - The conditions the next run resolves, after RV(resume) and before anything else, with
      C(node), C(condition), C(action) (C(lend) or C(reclaim)), C(reason) and C(emergency).
      Emergencies come first and go beyond O(policy)'s C(max_changes_per_run).
  returned: always
  type: list
  elements: dict
refusals:
  description: The O(partitions) that are not partitions of the lendable NodeSets, each with the fix.
  returned: always
  type: list
  elements: str
status:
  description:
    - One row per pool node, by name, for status reports. C(kubernetes) (Ready or NotReady),
      C(schedulable), C(never_touch), C(app_pods), C(journal) (free, lending, lent,
      reclaiming or corrupt), C(op), C(by), C(reason), C(in_state_s), C(lent_for_s),
      C(deadline_in_s), C(slurm) (the Slurm node's states, empty when not in Slurm), C(jobs)
      (ids of the jobs running on it), C(admin_drain), C(in_pool) (false for a node that left
      the pool with the handover's marks on it), C(condition), C(resolution), C(emergency),
      C(lend_label), C(taint), C(slurmd) and C(operator_drain) (the reason of the Slinky
      operator's drain).
  returned: always
  type: list
  elements: dict
"""

import time
import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.batch import (
    TAINT_SPEC,
    markers_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import PolicyError
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_module_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import read_plan
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.steps import HandoverMarkers
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    cluster_token_source,
    failing_cleanly,
    slurm_client,
)


def main() -> None:
    module = (
        handover_module_argspec()
        .update_argspec(
            lent_taint={"type": "dict", "default": {}, "options": TAINT_SPEC},
            partitions={"type": "list", "elements": "str"},
        )
        .create_ansible_module(supports_check_mode=True)
    )
    result: dict[str, t.Any] = {"changed": False}
    params = module.params
    try:
        policy = policy_from_params(params["policy"])
        policy.check()
        # The drain reasons of the runs are the defaults': this module writes none.
        markers = markers_from_params({**params, "reason_prefix": HandoverMarkers.reason_prefix})
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    slurm = slurm_client(module, cluster_token_source(client, params))
    with failing_cleanly(module, result):
        try:
            result.update(
                read_plan(
                    client,
                    slurm,
                    policy,
                    journal_annotation=params["journal_annotation"],
                    lend_label=params["lend_label"],
                    nodeset_namespace=params["nodeset_namespace"],
                    now=time.time(),
                    markers=markers,
                    check_partitions=params["partitions"],
                )
            )
        except KubernetesError as err:
            module.fail_json(msg=str(err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
