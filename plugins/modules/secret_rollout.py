#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: secret_rollout
short_description: Roll out the workloads that read a Secret only at their start, when it changed
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Some programs read a Secret once, when their pod starts (slurm-bridge 1.2.1 its slurmrestd
    token, from an environment variable). When the Secret changes (a Slinky C(Token) renewed,
    a password rotated) their pods keep the old value until they are replaced.
  - Compares a digest of the Secret's data with the annotation
    C(hpcops.io/secret-<name>) of each workload's pod template, and patches the template of
    each that differs with the new digest, which makes its controller replace its pods as in
    any rollout. A workload with no such annotation yet gets it, and so is rolled out once.
  - The digest is a SHA-256 prefix of the data; the data itself is never returned or logged.
  - Run it on a schedule (the P(hpcops.slinky.slurm_bridge#role) role runs it in a CronJob)
    more often than the time between the Secret's change and the old value's end (a Slinky
    Token's JWT stays valid for a fifth of its lifetime after the operator renews it).
options:
  secret:
    description: The Secret's name.
    type: str
    required: true
  namespace:
    description: The namespace of the Secret and the workloads.
    type: str
    required: true
  workloads:
    description: The workloads whose pods read the Secret at their start.
    type: list
    elements: dict
    required: true
    suboptions:
      kind:
        description: Their kind.
        type: str
        choices: [Deployment, StatefulSet, DaemonSet]
        default: Deployment
      name:
        description: Their name.
        type: str
        required: true
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
    details: Reads the Secret and the workloads and reports what it would roll out.
  diff_mode:
    support: full
    details: The digest each workload's pods started with, and the Secret's.
  idempotent:
    support: full
notes:
  - Needs C(get) on the Secret and C(get) and C(patch) on the workloads.
"""

EXAMPLES = r"""
- name: Restart slurm-bridge when the operator has renewed its token
  hpcops.slinky.secret_rollout:
    secret: slurm-bridge-token
    namespace: slurm
    workloads:
      - name: slurm-bridge-scheduler
      - name: slurm-bridge-admission
      - name: slurm-bridge-controllers
"""

RETURN = r"""
digest:
  description: The digest of the Secret's data (a SHA-256 prefix, not the data).
  returned: always
  type: str
  sample: 3f9a0c1d2e4b5a69
rolled_out:
  description: The workloads whose pods started with other data, as C(<kind>/<name>).
  returned: always
  type: list
  elements: str
  sample: [Deployment/slurm-bridge-scheduler]
"""

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    get_object,
    kubernetes_argspec,
    kubernetes_client,
    patch_object,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.secret_rollout import (
    plan_rollouts,
    secret_digest,
)


def main() -> None:
    module = (
        ArgumentSpec(
            {
                "secret": {"type": "str", "required": True, "no_log": False},
                "namespace": {"type": "str", "required": True},
                "workloads": {
                    "type": "list",
                    "elements": "dict",
                    "required": True,
                    "options": {
                        "kind": {
                            "type": "str",
                            "choices": ["Deployment", "StatefulSet", "DaemonSet"],
                            "default": "Deployment",
                        },
                        "name": {"type": "str", "required": True},
                    },
                },
            }
        )
        .merge(kubernetes_argspec())
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    namespace = params["namespace"]
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
        secret = get_object(client, "v1", "Secret", params["secret"], namespace)
        if secret is None:
            module.fail_json(
                msg=f"secret: there is no Secret {namespace}/{params['secret']}; name the one "
                "the workloads read (a Slinky Token writes its Secret a few seconds after it is made)"
            )
            return
        workloads: list[dict[str, t.Any]] = []
        for entry in params["workloads"]:
            obj = get_object(client, "apps/v1", entry["kind"], entry["name"], namespace)
            if obj is None:
                module.fail_json(
                    msg=f"workloads: there is no {entry['kind']} {namespace}/{entry['name']}"
                )
                return
            workloads.append(obj)
        digest = secret_digest(secret.get("data"))
        plans = plan_rollouts(params["secret"], digest, workloads)
        if not module.check_mode:
            for plan in plans:
                patch_object(client, "apps/v1", plan.kind, plan.name, plan.patch, namespace)
    except KubernetesError as err:
        module.fail_json(msg=str(err))
    result: dict[str, t.Any] = {
        "changed": bool(plans),
        "digest": digest,
        "rolled_out": [f"{plan.kind}/{plan.name}" for plan in plans],
    }
    if module._diff:
        result["diff"] = {
            "before": {f"{p.kind}/{p.name}": p.was for p in plans},
            "after": {f"{p.kind}/{p.name}": digest for p in plans},
        }
    module.exit_json(**result)


if __name__ == "__main__":
    main()
