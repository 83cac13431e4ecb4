#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: admission_check
short_description: Wait until a validating admission webhook answers, creating nothing
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Sends O(definition), an object the webhook O(webhook) must refuse, to the apiserver as a
    server-side dry run (C(dryRun=All)) and succeeds once that webhook refuses it, which
    shows it is running, reachable and trusted by the apiserver. Nothing is ever created.
  - Any other answer is asked again every O(poll_interval_s) until O(timeout_s) has passed,
    since a webhook installed a moment ago fails its calls until its certificate and the
    caBundle the apiserver trusts it by are in place (with cert-manager a few seconds after
    its pod).
  - O(definition) must pass the resource's schema, which the apiserver checks before it calls
    validating webhooks; otherwise the schema refuses it and the webhook is never asked.
options:
  definition:
    description: The object, with C(apiVersion), C(kind) and C(metadata.name) (and C(namespace)).
    type: dict
    required: true
  webhook:
    description:
      - The name of the webhook that must refuse it, as in its
        C(ValidatingWebhookConfiguration) (C(webhooks[].name)), for example
        C(controller-v1beta1.kb.io).
    type: str
    required: true
  timeout_s:
    description: Seconds to keep asking; the object is sent once at least.
    type: float
    default: 120
  poll_interval_s:
    description: Seconds between two dry runs.
    type: float
    default: 2
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
    details: It only sends dry runs, in check mode as in a normal run.
  diff_mode:
    support: N/A
    details: This module changes nothing.
  idempotent:
    support: full
notes:
  - Needs C(create) on the object's resource in its namespace (a dry run is authorized as a
    create).
  - Only webhooks declared with C(sideEffects) V(None) or V(NoneOnDryRun) are called on a dry
    run; a webhook with side effects makes the apiserver refuse the dry run instead.
"""

EXAMPLES = r"""
# Both Slinky lines' webhooks refuse a ClusterName over 40 characters; the CRD schema does not.
- name: Wait until the Slinky operator's webhook answers
  hpcops.slinky.admission_check:
    webhook: controller-v1beta1.kb.io
    timeout_s: 120
    definition:
      apiVersion: slinky.slurm.net/v1beta1
      kind: Controller
      metadata:
        name: hpcops-slinky-check
        namespace: slinky
      spec:
        clusterName: hpcops-slinky-check-must-be-refused-by-the-webhook
        slurmKeyRef: {name: hpcops-slinky-check, key: slurm.key}
        jwtKeyRef: {name: hpcops-slinky-check, key: jwt_hs256.key}
"""

RETURN = r"""
denied_by:
  description: The webhook that refused the last dry run; empty when none did.
  returned: always
  type: str
  sample: controller-v1beta1.kb.io
message:
  description: What the apiserver answered to the last dry run.
  returned: always
  type: str
  sample: >-
    admission webhook "controller-v1beta1.kb.io" denied the request: ClusterName exceeds
    40 characters (50): hpcops-slinky-check-must-be-refused-by-the-webhook
status:
  description: The HTTP status of that answer (V(201) when the object would have been created).
  returned: when the apiserver answered with one
  type: int
attempts:
  description: How many dry runs were sent.
  returned: always
  type: int
waited_s:
  description: Seconds from the first dry run to the last answer.
  returned: always
  type: float
"""

import typing as t

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.admission import (
    ask,
    wait_for_denial,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_argspec,
    kubernetes_client,
)


def _definition_problem(definition: dict[str, t.Any]) -> str:
    meta = definition.get("metadata")
    if not definition.get("apiVersion") or not definition.get("kind"):
        return "definition: needs apiVersion and kind"
    if not isinstance(meta, dict) or not meta.get("name"):
        return "definition: needs metadata.name"
    return ""


def main() -> None:
    module = (
        ArgumentSpec(
            {
                "definition": {"type": "dict", "required": True},
                "webhook": {"type": "str", "required": True},
                "timeout_s": {"type": "float", "default": 120.0},
                "poll_interval_s": {"type": "float", "default": 2.0},
            }
        )
        .merge(kubernetes_argspec())
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    problem = _definition_problem(params["definition"])
    if problem:
        module.fail_json(msg=problem)
    if params["timeout_s"] < 0:
        module.fail_json(msg=f"timeout_s: {params['timeout_s']:g} is negative; give 0 or more")
    if params["poll_interval_s"] <= 0:
        module.fail_json(msg="poll_interval_s: must be above 0; give seconds, for example 2")
    try:
        client = kubernetes_client(params["kubeconfig"], params["context"])
    except KubernetesError as err:
        module.fail_json(msg=str(err))
    definition = params["definition"]
    probe = wait_for_denial(
        lambda: ask(client, definition),
        params["webhook"],
        params["timeout_s"],
        params["poll_interval_s"],
    )
    result: dict[str, t.Any] = {
        "changed": False,
        "denied_by": probe.answer.webhook,
        "message": probe.answer.message,
        "attempts": probe.attempts,
        "waited_s": probe.waited_s,
    }
    if probe.answer.status is not None:
        result["status"] = probe.answer.status
    if not probe.denied:
        meta = definition["metadata"]
        where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
        module.fail_json(
            msg=(
                f"webhook {params['webhook']} did not refuse the dry run of {definition['kind']} "
                f"{where} within {params['timeout_s']:g} s ({probe.attempts} tries); the last "
                f"answer: {probe.answer.describe()}"
            ),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
