#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_node
short_description: Drain, resume, down or remove Slurm nodes, and set their features, weight and comment
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Brings Slurm nodes to the wanted state through slurmrestd, and reports no change when
    they are already there.
  - Drains and DOWNs carry a reason that starts with O(reason_prefix). A drain or DOWN
    whose reason does not start with it belongs to somebody else (an administrator, the
    Slinky operator's C(slurm-operator:) drains, slurmctld's own C(Not responding)).
    O(state=drain) keeps such a drain as it is and reports it in RV(foreign_drains), and
    O(state=resume) or O(state=undrain) refuses to clear it unless O(force=true).
  - All nodes are checked before any is changed, so a refusal changes nothing.
extends_documentation_fragment:
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
  idempotent:
    support: full
options:
  names:
    description:
      - The nodes, as names or host list expressions such as V(node[01-04,07]).
    type: list
    elements: str
    required: true
    aliases: [name, nodes]
  state:
    description:
      - V(drain) lets running jobs finish and starts no new ones.
      - V(resume) clears our drain or DOWN; the node takes jobs again.
      - V(undrain) clears our drain and keeps the base state (a DOWN node stays DOWN).
      - V(down) marks the node DOWN at once. B(Running jobs are stopped:) batch jobs that
        may be requeued go back to the queue, the others are killed. Check mode returns
        them in RV(jobs_affected).
      - V(absent) deletes the node record (dynamic nodes only), so no DOWN ghost stays in
        C(sinfo). A node that still runs jobs is refused unless O(force=true).
      - Unset, only O(features), O(weight) and O(comment) are managed.
    type: str
    choices: [drain, resume, undrain, down, absent]
  reason:
    description:
      - Why, for O(state=drain) and O(state=down), where it is required. O(reason_prefix)
        is put in front unless the reason already starts with it.
    type: str
  reason_prefix:
    description:
      - Marks the drains and DOWNs this collection owns. Must not be empty.
    type: str
    default: "hpcops:"
  force:
    description:
      - Clear drains and DOWNs that are not ours, and remove nodes that still run jobs.
    type: bool
    default: false
  features:
    description:
      - The node's features, as a whole list (the order does not matter). They become both
        the available and the active features; an empty list clears them.
    type: list
    elements: str
  weight:
    description: Scheduling weight; nodes with a lower weight are used first.
    type: int
  comment:
    description: The node's comment.
    type: str
requirements:
  - python-hostlist
seealso:
  - module: hpcops.slinky.slurm_info
  - module: hpcops.slinky.slurm_job
"""

EXAMPLES = r"""
- name: Drain two nodes before maintenance (jobs finish first)
  hpcops.slinky.slurm_node:
    url: https://slurmrestd.slurm.svc:6820
    jwt_key_path: /etc/slurm/jwt_hs256.key
    names: ["node[01-02]"]
    state: drain
    reason: firmware update CHG-1234

- name: Give them back; drains that are not ours stay
  hpcops.slinky.slurm_node:
    url: https://slurmrestd.slurm.svc:6820
    jwt_key_path: /etc/slurm/jwt_hs256.key
    names: ["node[01-02]"]
    state: resume

- name: Remove the record of a dynamic node that has left
  hpcops.slinky.slurm_node:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    names: [gpu-node-7]
    state: absent

- name: Prefer the small nodes, and tag them
  hpcops.slinky.slurm_node:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    names: ["cpu[001-032]"]
    weight: 10
    features: [avx512, ib]
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
nodes:
  description: One entry per node with what was (or, in check mode, would be) done.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The node.
      type: str
    action:
      description: V(none), V(update) or V(delete).
      type: str
    changes:
      description: The fields sent to slurmrestd.
      type: dict
    before:
      description: State, reason, features, weight and comment before.
      type: dict
    after:
      description: The same after the change (predicted in check mode).
      type: dict
  sample:
    - name: node01
      action: update
      changes: {"state": ["DRAIN"], "reason": "hpcops: firmware update CHG-1234"}
      before: {"present": true, "state": "IDLE", "reason": "", "features": [], "weight": 1, "comment": ""}
      after: {"present": true, "state": "IDLE+DRAIN", "reason": "hpcops: firmware update CHG-1234",
              "features": [], "weight": 1, "comment": ""}
foreign_drains:
  description: Nodes drained or down for a reason that is not ours, left as they were.
  returned: always
  type: list
  elements: dict
  sample: [{"name": "node02", "reason": "bad DIMM", "set_by": "admin"}]
jobs_affected:
  description: Jobs running on the nodes that O(state=down) stops (requeued or killed).
  returned: when O(state=down)
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    failing_cleanly,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.node_change import (
    NODE_STATE_CHOICES,
    NodeRequest,
    plan_node_change,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    expand_hostlists,
    select_jobs,
)


def request_from_params(module: AnsibleModule) -> NodeRequest:
    params = module.params
    if not params["reason_prefix"].strip():
        module.fail_json(msg="reason_prefix must not be empty: it is how our drains are told apart")
    if params["state"] in ("drain", "down") and not params["reason"]:
        module.fail_json(
            msg=f"reason is required with state={params['state']}: say why, for example "
            "'reason: firmware update CHG-1234'"
        )
    features = params["features"]
    return NodeRequest(
        state=params["state"],
        reason=params["reason"],
        reason_prefix=params["reason_prefix"],
        force=params["force"],
        features=tuple(features) if features is not None else None,
        weight=params["weight"],
        comment=params["comment"],
    )


def main() -> None:
    module = (
        slurmrestd_from_cluster_argspec()
        .update_argspec(
            names={
                "type": "list",
                "elements": "str",
                "required": True,
                "aliases": ["name", "nodes"],
            },
            state={"type": "str", "choices": list(NODE_STATE_CHOICES)},
            reason={"type": "str"},
            reason_prefix={"type": "str", "default": "hpcops:"},
            force={"type": "bool", "default": False},
            features={"type": "list", "elements": "str"},
            weight={"type": "int"},
            comment={"type": "str"},
        )
        .create_ansible_module(
            required_one_of=[("state", "features", "weight", "comment")], supports_check_mode=True
        )
    )
    request = request_from_params(module)
    with failing_cleanly(module, {}):
        names = expand_hostlists(module.params["names"], "names")
    if not names:
        module.fail_json(msg="names is empty: give at least one node name or host list")

    client = slurm_client(module, token_source_from_params(module))
    result: dict[str, object] = {"changed": False, "nodes": [], "foreign_drains": []}
    with failing_cleanly(module, result):
        result["api_version"] = client.api_version
        current = {node["name"]: node for node in client.nodes()}
        changes = [plan_node_change(name, current.get(name), request) for name in names]
        refusals = [change.message for change in changes if change.action == "refuse"]
        if refusals:
            # Nothing is changed when any node cannot be: the task is all or nothing.
            module.fail_json(msg="; ".join(refusals), **result)

        if request.state == "down":
            downed = [change.name for change in changes if change.body.get("state") == ["DOWN"]]
            result["jobs_affected"] = (
                select_jobs(client.jobs(), nodes=downed, states=["RUNNING", "SUSPENDED"])
                if downed
                else []
            )

        result["foreign_drains"] = [
            {
                "name": change.name,
                "reason": change.foreign_reason,
                "set_by": current[change.name]["reason_set_by_user"],
            }
            for change in changes
            if change.foreign_reason is not None
        ]
        for change in changes:
            if module.check_mode or not change.changed:
                continue
            if change.action == "delete":
                client.delete_node(change.name)
            else:
                client.update_node(change.name, change.body)

        result["nodes"] = [
            {
                "name": change.name,
                "action": change.action,
                "changes": change.body,
                "before": change.before,
                "after": change.after,
            }
            for change in changes
        ]
        changed = [change for change in changes if change.changed]
        result["changed"] = bool(changed)
        if module._diff:
            result["diff"] = {
                "before": {change.name: change.before for change in changed},
                "after": {change.name: change.after for change in changed},
            }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
