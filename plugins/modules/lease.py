#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: lease
short_description: Take or give back a Kubernetes Lease, so that runs never act at once
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Takes the Lease O(name) in O(namespace) for O(holder) when nobody holds it, when its
    holder let it expire, or when O(holder) holds it already (then it is renewed).
  - When another holder's Lease is live, waits up to O(wait_s) for it to be given back or to
    expire; if it is still held then, changes nothing and returns RV(acquired=false), so the
    play can end cleanly (M(ansible.builtin.meta) C(end_play)) or fail as it must.
  - Every write carries the resourceVersion it read, so of two runs that race exactly one
    gets the Lease.
  - O(state=released) gives the Lease back if O(holder) has it.
options:
  name:
    description: The Lease.
    type: str
    default: hpcops-slinky-handover
  namespace:
    description: Its namespace.
    type: str
    required: true
  holder:
    description: Who takes it; unique per run (for example the host name and the process id).
    type: str
    required: true
  duration_s:
    description: Seconds the Lease stays live without a renewal; longer than a run takes.
    type: int
    default: 900
  state:
    description: Whether O(holder) should hold the Lease or give it back.
    type: str
    choices: [acquired, released]
    default: acquired
  wait_s:
    description:
      - Seconds to wait for a Lease another holder has, looking again every
        O(poll_interval_s). V(0) looks once.
      - Not used in check mode, which reports at once.
    type: float
    default: 0
  poll_interval_s:
    description: Seconds between two looks while waiting.
    type: float
    default: 2
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether the Lease would be taken or given back; writes nothing.
  diff_mode:
    support: none
  idempotent:
    support: partial
    details: Taking a Lease one holds renews it (a new renewTime) and reports a change.
notes:
  - Needs get, create, update and delete on C(leases) in O(namespace).
"""

EXAMPLES = r"""
- name: Take the handover lease
  hpcops.slinky.lease:
    namespace: slurm
    holder: "{{ inventory_hostname }}-{{ lookup('ansible.builtin.pipe', 'echo $PPID') }}"
  register: handover_lease

- name: Another run holds it; nothing to do
  ansible.builtin.meta: end_play
  when: not handover_lease.acquired

- name: Give the lease back
  hpcops.slinky.lease:
    namespace: slurm
    holder: "{{ handover_lease.holder }}"
    state: released
"""

RETURN = r"""
acquired:
  description: Whether O(holder) holds the Lease after the call (V(false) after a release).
  returned: always
  type: bool
holder:
  description: Who holds the Lease after the call (empty when nobody does).
  returned: always
  type: str
decision:
  description:
    - V(create), V(renew), V(take_over) (the previous holder let it expire), V(keep) (another
      holder's Lease is live), V(release) or V(none).
  returned: always
  type: str
expires_in:
  description: Seconds left on another holder's live Lease.
  returned: when another holder has it
  type: float
waited_s:
  description: Seconds spent waiting for another holder's Lease.
  returned: always
  type: float
"""

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_argspec,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import (
    LeaseRequest,
    acquire_lease,
    lease_attempt,
)


def main() -> None:
    module = (
        ArgumentSpec(
            {
                "name": {"type": "str", "default": "hpcops-slinky-handover"},
                "namespace": {"type": "str", "required": True},
                "holder": {"type": "str", "required": True},
                "duration_s": {"type": "int", "default": 900},
                "state": {
                    "type": "str",
                    "choices": ["acquired", "released"],
                    "default": "acquired",
                },
                "wait_s": {"type": "float", "default": 0.0},
                "poll_interval_s": {"type": "float", "default": 2.0},
            }
        )
        .merge(kubernetes_argspec())
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    if params["duration_s"] < 1:
        module.fail_json(msg="duration_s: must be 1 or more; give seconds longer than a run takes")
    if params["wait_s"] < 0:
        module.fail_json(msg=f"wait_s: {params['wait_s']:g} is negative; give 0 or more seconds")
    if params["poll_interval_s"] <= 0:
        module.fail_json(msg="poll_interval_s: must be above 0; give seconds, for example 2")
    request = LeaseRequest(
        params["name"], params["namespace"], params["holder"], params["duration_s"]
    )
    result: dict[str, t.Any] = {"changed": False, "acquired": False}
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
        if params["state"] == "released":
            result = lease_attempt(client, request, "released", module.check_mode)
            result["waited_s"] = 0.0
        else:
            result = acquire_lease(
                client, request, params["wait_s"], params["poll_interval_s"], module.check_mode
            )
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
