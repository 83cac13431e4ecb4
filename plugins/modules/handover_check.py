#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: handover_check
short_description: Check a handover run's policy and nodes against the cluster, before it starts
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - What a lend, reclaim or rebalance run checks before it takes the handover Lease, against
    what the cluster has (the settings themselves are checked by the handover role without
    it).
  - Every partition of O(policy) named in O(partitions) must be a Slurm partition of the
    lendable NodeSets (the NodeSets that select O(lend_label)). A name that is not, a typo
    such as C(backfil), would otherwise go unnoticed, and the reclaim would give that
    partition's jobs the default grace and escalation. When no partition is known to hold
    the lendable NodeSets, every Slurm partition counts.
  - Every node in O(nodes) must be a Kubernetes Node of the pool (O(policy)'s
    C(pool_selector)) and not a never-touch node, unless a handover of ours is under way
    there.
  - Changes nothing. Each problem is returned in RV(refusals), with its fix; the module
    fails only when it cannot read the cluster.
options:
  nodes:
    description: The nodes a lend or reclaim is asked for; none, no node is checked.
    type: list
    elements: str
    default: []
  partitions:
    description:
      - The partitions of O(policy) to check. The handover role gives those of
        C(handover_policy), the site's own, and leaves out the defaults' C(backfill), which
        a site without such a partition never asked for.
      - Left out, every partition of O(policy).
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
notes:
  - Reads with the permissions Nodes get, NodeSets list, and a slurmrestd token.
seealso:
  - module: hpcops.slinky.handover_plan
  - module: hpcops.slinky.node_handover
"""

EXAMPLES = r"""
- name: Check the policy and the nodes to lend
  hpcops.slinky.handover_check:
    url: http://slurm-restapi.slurm:6820
    jwt_key_secret: {namespace: slurm, name: slurm-jwt-key, key: jwt_hs256.key}
    nodes: [int01, int02]
    policy:
      pool_selector: {hpcops.io/pool: interactive}
      partitions:
        backfill: {grace_s: 300, escalation: requeue}
  register: check

- name: Refuse the run
  ansible.builtin.assert:
    that: check.refusals | length == 0
    fail_msg: "{{ check.refusals | join('; ') }}"
"""

RETURN = r"""
refusals:
  description:
    - Each problem, as the setting, the problem and the fix; empty when the run may go on.
  returned: always
  type: list
  elements: str
  sample:
    - "handover_policy.partitions.backfil: is not a Slurm partition of the lendable NodeSets
      (burst; theirs: all, backfill); did you mean backfill?"
lendable_partitions:
  description: The Slurm partitions of the lendable NodeSets.
  returned: always
  type: list
  elements: str
  sample: [all, backfill]
"""

from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import PolicyError
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_module_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.reads import (
    check_against_cluster,
)
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
    spec = handover_module_argspec().update_argspec(
        nodes={"type": "list", "elements": "str", "default": []},
        partitions={"type": "list", "elements": "str"},
    )
    module = spec.create_ansible_module(supports_check_mode=True)
    result = {"changed": False, "refusals": [], "lendable_partitions": []}
    params = module.params
    try:
        policy = policy_from_params(params["policy"])
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    if len(params["lend_label"]) != 1:
        module.fail_json(
            msg=f"lend_label: {params['lend_label']!r} is not one label; give the one key and "
            "value the lendable NodeSets select",
            **result,
        )
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    slurm = slurm_client(module, cluster_token_source(client, params))
    with failing_cleanly(module, result):
        try:
            result.update(
                check_against_cluster(
                    client,
                    slurm,
                    policy,
                    HandoverMarkers(journal_annotation=params["journal_annotation"]),
                    nodes=params["nodes"],
                    partitions=params["partitions"],
                    lend_label=params["lend_label"],
                    nodeset_namespace=params["nodeset_namespace"],
                )
            )
        except KubernetesError as err:
            module.fail_json(msg=str(err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
