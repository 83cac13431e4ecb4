#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: handover_run
short_description: One whole handover run (lend, reclaim or rebalance), from the checks to its record
version_added: 0.3.0
author: hpcops.slinky developers (@hpcops)
description:
  - Does in one module what M(hpcops.slinky.handover_check), M(hpcops.slinky.lease),
    M(hpcops.slinky.handover_plan) and M(hpcops.slinky.node_handover) do as steps, in the
    protocol's order, and records the run. The handover role's C(lend), C(reclaim) and
    C(rebalance) entry points use it, so that a run costs one module start.
  - "Before anything is taken: the named O(nodes) and the partitions of O(policy) are checked
    against the cluster. A run refused there returns RV(outcome=invalid) and RV(refusals)
    (each names the setting and the fix), takes no Lease and records nothing."
  - "Then the Lease O(lease.name) is taken for O(holder), waiting up to O(lease.wait_s) for
    another run's. A run that finds it held does nothing and returns RV(outcome=lease_held)."
  - "V(lend) and V(reclaim) hand over the named O(nodes), or none named, first finish what an
    earlier run left half done and then the nodes the plan names. V(rebalance) records the
    idle marks, finishes half-done handovers, reclaims what the applications need, cleans
    orphaned Slurm records, and lends what they do not, as the plan says."
  - "The Lease is released whatever happened (riding out an apiserver restart of up to a
    minute), the pool read again, and the run summarised: RV(summary), written also to
    O(report.summary_path). Unless in check mode or the Lease was held, the summary goes to
    the status ConfigMap O(report.configmap) with an Event on it, and its metrics to
    O(report.metrics_textfile_path) and O(report.pushgateway_url)."
options:
  action:
    description: The run.
    type: str
    choices: [lend, reclaim, rebalance]
    required: true
  nodes:
    description:
      - For V(lend) and V(reclaim), the Kubernetes names of the nodes; none, as the plan
        says. Not used by V(rebalance).
    type: list
    elements: str
    default: []
  reason:
    description: Why, for the journals of the nodes a reclaim takes back.
    type: str
    default: ""
  partitions:
    description:
      - The partitions of O(policy) to check against the cluster (each must be a Slurm
        partition of a lendable NodeSet). By default all O(policy) names; the handover role
        passes only the site's own, since a default partition the cluster lacks was never
        asked for.
    type: list
    elements: str
  lease:
    description: The Lease that keeps runs from acting at once.
    type: dict
    required: true
    suboptions:
      name:
        description: The Lease.
        type: str
        default: hpcops-slinky-handover
      namespace:
        description: Its namespace; also that of the status ConfigMap and its Events.
        type: str
        required: true
      duration_s:
        description: Seconds the Lease stays live; longer than a run can take.
        type: int
        default: 900
      wait_s:
        description: Seconds to wait for another run's Lease to end.
        type: float
        default: 0
      poll_interval_s:
        description: Seconds between two looks at a held Lease.
        type: float
        default: 2
  trigger:
    description:
      - What started the run, for the summary; V(manual), V(timer), or the event source's
        event (C(ansible_eda.event.handover)).
    type: raw
    default: manual
  setting_names:
    description:
      - How the user wrote the settings the run's messages name, by the option's name
        (C(lease.wait_s), C(lend_timeout_s), C(pod_timeout_s)); each message, error and
        warning the run returns or records names them so. The handover role maps them to its
        variables (C(lease.wait_s) to C(handover_lease_wait_s)).
    type: dict
    default: {}
  token_owner:
    description:
      - The Slinky Token that keeps O(token_secret) fresh; by default the Secret's owner.
      - When its JWT is past the time the operator renews it, or expired, the run updates the
        Token (annotation C(hpcops.io/renewal-requested)), which makes the operator write a
        new one, and waits up to 30 s for it before anything else; the run's warnings say so.
        Not in check mode.
    type: str
  report:
    description: Where the run is recorded.
    type: dict
    default: {}
    suboptions:
      configmap:
        description: The status ConfigMap in O(lease.namespace); empty, none.
        type: str
        default: hpcops-slinky-handover-status
      metrics_cluster:
        description: The C(cluster) label of every metric; empty, none.
        type: str
        default: ""
      summary_path:
        description: A JSON file for scripts, written for every run, a refused one too (not in check mode).
        type: path
      metrics_textfile_path:
        description: The metrics for node_exporter's textfile collector.
        type: path
      pushgateway_url:
        description: A Prometheus Pushgateway the metrics are pushed to (job C(hpcops_slinky_handover)).
        type: str
extends_documentation_fragment:
  - hpcops.slinky.kubernetes
  - hpcops.slinky.handover
  - hpcops.slinky.handover.WORK
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
attributes:
  check_mode:
    support: full
    details: Takes no Lease, reports the steps each node would take, writes and records nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A run finds each node where the last one left it and goes on from there.
requirements:
  - python-hostlist
notes:
  - Needs what its parts need (see M(hpcops.slinky.node_handover)), Leases get/create/update/delete,
    and ConfigMaps patch and Events create in O(lease.namespace).
  - "Fails when the run did not do what it was asked: for V(lend) and V(reclaim) any outcome
    but V(done) (its message says which node ended where, or who holds the Lease); for
    V(rebalance) V(failed) only. RV(summary) is returned, and recorded, either way."
seealso:
  - module: hpcops.slinky.handover_plan
  - module: hpcops.slinky.node_handover
  - module: hpcops.slinky.lease
  - ref: hpcops.slinky.handover_run_summary filter <ansible_collections.hpcops.slinky.handover_run_summary_filter>
    description: The summary's fields.
"""

EXAMPLES = r"""
- name: Rebalance the pool, as the handover role's scheduled runs do
  hpcops.slinky.handover_run:
    action: rebalance
    holder: "cron-{{ 999999 | random }}"
    url: http://slurm-restapi.slurm:6820
    jwt_key_secret: {namespace: slurm, name: slurm-jwt-key, key: jwt_hs256.key}
    policy:
      pool_selector: {hpcops.io/pool: interactive}
      partitions:
        backfill: {grace_s: 300, escalation: requeue}
    lease: {namespace: hpcops-handover}
    report:
      summary_path: /var/lib/hpcops/handover-summary.json
  register: handover

- name: Take two nodes back now, waiting up to a minute for a run in progress
  hpcops.slinky.handover_run:
    action: reclaim
    nodes: [int01, int02]
    reason: JupyterHub needs the nodes
    holder: "{{ inventory_hostname }}-{{ 999999 | random }}"
    url: http://slurm-restapi.slurm:6820
    jwt_key_path: /etc/hpcops/jwt_hs256.key
    policy:
      pool_selector: {hpcops.io/pool: interactive}
    lease: {namespace: hpcops-handover, wait_s: 60}
"""

RETURN = r"""
outcome:
  description:
    - How the run ended; V(done), V(blocked) (jobs of a V(wait) partition keep nodes),
      V(incomplete) (a node asked for ended elsewhere), V(failed), V(lease_held) or
      V(invalid) (refused before it started).
  returned: always
  type: str
  sample: done
summary:
  description:
    - What the run did, as P(hpcops.slinky.handover_run_summary#filter) describes it; also in
      the status ConfigMap and the file O(report.summary_path).
  returned: unless refused
  type: dict
summary_line:
  description: The summary in one line, as the Event says it.
  returned: unless refused
  type: str
  sample: 1 lent in 3.2 s (pool 3 free, 1 lent)
refusals:
  description: Why the run was refused, each naming the setting and the fix.
  returned: always
  type: list
  elements: str
lendable_partitions:
  description: The Slurm partitions of the lendable NodeSets.
  returned: unless the check failed
  type: list
  elements: str
lease:
  description: The Lease as M(hpcops.slinky.lease) returns it (acquired, holder, expires_in, waited_s).
  returned: always
  type: dict
plan:
  description: M(hpcops.slinky.handover_plan)'s result, when the run read a plan.
  returned: when planned
  type: dict
handovers:
  description:
    - Per step that ran (C(idle_marked), C(resumed), C(reconciled_lent) and
      C(reconciled_returned) (nodes whose evidence disagreed, the lend it showed finished, or
      given back), C(reclaimed), C(orphans_cleaned), C(lent)), its nodes as
      M(hpcops.slinky.node_handover) returns them.
  returned: unless refused
  type: dict
requested:
  description: The nodes a lend or reclaim was asked for, named or as its plan said.
  returned: unless refused
  type: list
  elements: str
metrics:
  description: The summary as Prometheus metrics (text exposition format 0.0.4).
  returned: unless refused
  type: str
recorded:
  description: Whether the run was recorded (not in check mode, and the Lease not held).
  returned: unless refused
  type: bool
error:
  description: What failed, the step first; empty when nothing did.
  returned: always
  type: str
attention:
  description:
    - What still needs a clean-up or a person once the run acted (the plan's attention
      without the nodes this run handed over), each line with what to do; also in the
      summary's warnings.
  returned: unless refused
  type: list
  elements: str
"""

import os
import socket
import typing as t
from urllib.parse import quote

from ansible.module_utils.urls import open_url

from ansible_collections.hpcops.slinky.plugins.module_utils._files import write_whole
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.batch import (
    HANDOVER_WORK_SPEC,
    check_numbers,
    markers_from_params,
    work_settings,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.faults import armed_fault
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.kube import KubernetesCalls
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.model import (
    HandoverResult,
    PolicyError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.options import (
    handover_module_argspec,
    policy_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.report import (
    RunOutcome,
    metrics_text,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.run import (
    REBALANCE,
    RUN_ACTIONS,
    HandoverRun,
    RunRequest,
    json_text,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.lease import LeaseRequest
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    cluster_token_source,
    slurm_client,
)

LEASE_SPEC = {
    "name": {"type": "str", "default": "hpcops-slinky-handover"},
    "namespace": {"type": "str", "required": True},
    "duration_s": {"type": "int", "default": 900},
    "wait_s": {"type": "float", "default": 0.0},
    "poll_interval_s": {"type": "float", "default": 2.0},
}
REPORT_SPEC = {
    "configmap": {"type": "str", "default": "hpcops-slinky-handover-status"},
    "metrics_cluster": {"type": "str", "default": ""},
    "summary_path": {"type": "path"},
    "metrics_textfile_path": {"type": "path"},
    "pushgateway_url": {"type": "str"},
}
PUSH_JOB = "hpcops_slinky_handover"


def push_metrics(url: str, cluster: str, metrics: str) -> None:
    """PUT the metrics to a Pushgateway, grouped by job (and cluster)."""
    target = f"{url.rstrip('/')}/metrics/job/{PUSH_JOB}"
    if cluster:
        target += f"/cluster/{quote(cluster, safe='')}"
    open_url(
        target,
        data=metrics.encode("utf-8"),
        method="PUT",
        headers={"Content-Type": "text/plain; version=0.0.4"},
        timeout=10,
    )


def failure_message(action: str, result: dict[str, t.Any]) -> str:
    """Why the run did not do what it was asked ('' when it did)."""
    outcome = result["outcome"]
    if outcome == "invalid":
        return "invalid: " + "; ".join(result["refusals"])
    summary = result["summary"]
    if result["error"] and (action != REBALANCE or outcome == RunOutcome.FAILED):
        return f"{outcome}: {result['error']}"
    if action == REBALANCE or outcome == RunOutcome.DONE:
        return ""
    if outcome == RunOutcome.BLOCKED:
        shortfall = "; ".join(f"{node}: {why}" for node, why in summary["blocked_reasons"].items())
    else:
        shortfall = "; ".join(f"{node} ended {where}" for node, where in summary["short"].items())
    return (
        f"{outcome}: {shortfall} (asked to {action} {', '.join(summary['requested'])}); each "
        "node stays where it ended, and the next run goes on from there"
    )


def checked_settings(params: dict[str, t.Any]) -> tuple[t.Any, t.Any]:
    """The policy and the markers; PolicyError naming the first option that cannot be."""
    policy = policy_from_params(params["policy"])
    policy.check()
    markers = markers_from_params(params)
    check_numbers(params)
    for index, name in enumerate(params["nodes"]):
        if not name.strip():
            raise PolicyError(
                f"nodes[{index}]", f"{name!r} is empty", "give the Kubernetes name of a pool node"
            )
    lease = params["lease"]
    if lease["duration_s"] < 1 or lease["wait_s"] < 0:
        raise PolicyError(
            "lease",
            "duration_s must be 1 or more and wait_s 0 or more",
            "give seconds longer than a run takes, and how long to wait for another run",
        )
    return policy, markers


def run_request(params: dict[str, t.Any], report: dict[str, t.Any]) -> RunRequest:
    holder = params["holder"]
    if holder == HANDOVER_WORK_SPEC["holder"]["default"]:
        # Unique per run: the Lease tells runs apart by it.
        holder = f"{socket.gethostname()}-{os.getpid()}"
    lease = params["lease"]
    return RunRequest(
        action=params["action"],
        run_id=holder,
        lease=LeaseRequest(lease["name"], lease["namespace"], holder, lease["duration_s"]),
        nodes=tuple(dict.fromkeys(params["nodes"])) if params["action"] != REBALANCE else (),
        reason=params["reason"],
        partitions=None if params["partitions"] is None else tuple(params["partitions"]),
        lease_wait_s=lease["wait_s"],
        lease_poll_s=lease["poll_interval_s"],
        max_parallel=params["max_parallel"],
        shared_reads_from=params["shared_reads_from"],
        lend_label=params["lend_label"],
        nodeset_namespace=params["nodeset_namespace"],
        trigger=params["trigger"],
        report_configmap=report["configmap"] or "",
        metrics_cluster=report["metrics_cluster"] or "",
        token_secret=params["token_secret"],
        token_owner=params["token_owner"] or "",
        setting_names={str(k): str(v) for k, v in (params["setting_names"] or {}).items()},
    )


def warn_of_nodes(module: t.Any, result: dict[str, t.Any]) -> None:
    """Each node's warnings, and why a node is blocked, as Ansible warnings."""
    for handed in (result.get("handovers") or {}).values():
        for node in handed["nodes"]:
            for warning in node["warnings"]:
                module.warn(f"{node['node']}: {warning}")
            if node["result"] == HandoverResult.BLOCKED:
                module.warn(f"{node['node']}: {node['message']}")


def write_outputs(
    module: t.Any, action: str, report: dict[str, t.Any], result: dict[str, t.Any]
) -> str:
    """The summary file (a refused run's too) and, for a recorded run, the metrics file and
    the Pushgateway; '' or what could not be written."""
    if result["outcome"] == "invalid":
        written = {
            "action": action,
            "outcome": "invalid",
            "success": False,
            "errors": ["; ".join(result["refusals"])],
        }
    else:
        written = result["summary"]
    try:
        if report.get("summary_path") and not module.check_mode:
            write_whole(module, report["summary_path"], json_text(written) + "\n")
        if result.get("recorded"):
            if report.get("metrics_textfile_path"):
                write_whole(module, report["metrics_textfile_path"], result["metrics"])
            if report.get("pushgateway_url"):
                # Grouped by cluster in the URL, not by a label in each sample.
                push_metrics(
                    report["pushgateway_url"],
                    report["metrics_cluster"] or "",
                    metrics_text(result["summary"]),
                )
    except (OSError, ValueError) as err:
        return f"the run's record outside the cluster: {err}"
    return ""


def main() -> None:
    module = (
        handover_module_argspec()
        .update_argspec(
            action={"type": "str", "choices": list(RUN_ACTIONS), "required": True},
            nodes={"type": "list", "elements": "str", "default": []},
            reason={"type": "str", "default": ""},
            partitions={"type": "list", "elements": "str"},
            lease={"type": "dict", "required": True, "options": LEASE_SPEC},
            trigger={"type": "raw", "default": "manual"},
            report={"type": "dict", "default": {}, "options": REPORT_SPEC},
            token_owner={"type": "str", "no_log": False},
            setting_names={"type": "dict", "default": {}},
            **HANDOVER_WORK_SPEC,
        )
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    report = params["report"] or {name: spec.get("default") for name, spec in REPORT_SPEC.items()}
    result: dict[str, t.Any] = {"changed": False, "refusals": [], "lease": {}, "error": ""}
    try:
        policy, markers = checked_settings(params)
    except PolicyError as err:
        module.fail_json(msg=str(err), **result)
    try:
        kube = KubernetesCalls(
            kubernetes_client(params["kubeconfig"], params["context"]),
            connections=params["max_parallel"],
        )
    except KubernetesError as err:
        module.fail_json(msg=str(err), **result)
    settings = work_settings(
        params, policy, markers, check_mode=module.check_mode, fault=armed_fault()
    )
    slurm = slurm_client(module, cluster_token_source(kube.client, params))
    result = HandoverRun(kube, slurm, settings, run_request(params, report)).execute()
    warn_of_nodes(module, result)
    # The files are written even when the cluster's record failed: scripts read them.
    outside = write_outputs(module, params["action"], report, result)
    record_error = result.pop("record_error", "") or outside
    message = failure_message(params["action"], result)
    if record_error:
        message = message or f"{result['outcome']}: {record_error}"
        result["record_error"] = record_error
    if message:
        module.fail_json(msg=message, **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
