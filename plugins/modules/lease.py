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

import time
import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    Conflict,
    KubernetesError,
    delete_object,
    get_object,
    kubernetes_argspec,
    kubernetes_client,
    write_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import (
    LeaseAction,
    decide,
    lease_body,
)

API_VERSION = "coordination.k8s.io/v1"


def attempt(client: t.Any, params: dict[str, t.Any], check_mode: bool) -> dict[str, t.Any]:
    """One look at the Lease and the one write it calls for; KubernetesError on failure."""
    result: dict[str, t.Any] = {"changed": False, "acquired": False}
    try:
        lease = get_object(client, API_VERSION, "Lease", params["name"], params["namespace"])
        now = time.time()
        decision = decide(lease, params["holder"], now, params["state"])
        result.update(decision=decision.action, holder=decision.holder)
        if decision.expires_in is not None:
            result["expires_in"] = round(decision.expires_in, 1)
        if decision.action in (LeaseAction.KEEP, LeaseAction.NONE):
            result["acquired"] = decision.holder == params["holder"] != ""
            return result
        result["changed"] = True
        result["acquired"] = decision.action != LeaseAction.RELEASE
        if check_mode:
            return result
        if decision.action == LeaseAction.RELEASE and lease is not None:
            delete_object(
                client,
                API_VERSION,
                "Lease",
                params["name"],
                params["namespace"],
                lease["metadata"]["resourceVersion"],
            )
        else:
            body = lease_body(
                params["name"],
                params["namespace"],
                params["holder"],
                params["duration_s"],
                now,
                lease,
            )
            write_object(client, body, create=decision.action == LeaseAction.CREATE)
    except Conflict as err:
        # Another run wrote first: it holds the Lease, this one does nothing.
        result.update(changed=False, acquired=False, decision=LeaseAction.KEEP, conflict=str(err))
    return result


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
    started = time.monotonic()
    waiting = params["state"] == "acquired" and not module.check_mode
    result: dict[str, t.Any] = {"changed": False, "acquired": False}
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
        while True:
            result = attempt(client, params, module.check_mode)
            left = params["wait_s"] - (time.monotonic() - started)
            if result["acquired"] or not waiting or left <= 0:
                break
            time.sleep(min(params["poll_interval_s"], left))
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    result["waited_s"] = round(time.monotonic() - started, 1) if waiting else 0.0
    module.exit_json(**result)


if __name__ == "__main__":
    main()
