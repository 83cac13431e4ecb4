#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: lending_report
short_description: What lending idle Kubernetes nodes gave Slurm over a period
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Sums, per partition and account, over a period, the node-hours lent to Slurm, the
    node-hours jobs used on lent nodes, and the jobs a reclaim requeued or cancelled with
    the node-hours they lost.
  - The loans come from the ConfigMaps the handover runs record beside their status
    ConfigMap (O(report_configmap)C(-loans-01) to C(-12), one per calendar month, a year
    kept; a loan is recorded by the run that lends the node and again by the one that gives
    it back). The jobs come from slurmdbd through slurmrestd, every attempt of a requeued
    job included, read as a stream and summed as they come, so a year of jobs never sits in
    memory.
  - A job counts for a loan when it ran on the node while the node was lent; it was ended by
    a reclaim when it ended (requeued, preempted, failed with its node or cancelled) after
    the node's reclaim began and before the node came back.
  - Reads only; O(textfile) writes the figures for node_exporter's textfile collector.
extends_documentation_fragment:
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd.ACCOUNTING
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
options:
  namespace:
    description: The namespace of the handover's Lease and status ConfigMap, where the loans are.
    type: str
    default: slurm
  report_configmap:
    description: The handover runs' status ConfigMap (C(handover_report_configmap)); the loans are beside it.
    type: str
    default: hpcops-slinky-handover-status
  start:
    description:
      - The start of the period, as Unix seconds or an ISO 8601 date or time in UTC
        (V(2026-11-01), V(2026-11-01T08:00:00)).
      - Default O(end) less 30 days.
    type: str
  end:
    description: The end of the period, in the same forms; default now.
    type: str
  textfile:
    description:
      - A file to write the figures to as Prometheus text (node_exporter's textfile
        collector), whole or not at all. Not written in check mode.
    type: path
seealso:
  - module: hpcops.slinky.handover_run
  - module: hpcops.slinky.slurm_accounting_info
"""

EXAMPLES = r"""
- name: What lending gave Slurm in November
  hpcops.slinky.lending_report:
    url: "{{ slurmrestd_url }}"
    jwt_key_secret: {namespace: slurm, name: slurm-jwt-key, key: jwt_hs256.key}
    start: "2026-11-01"
    end: "2026-12-01"
    textfile: /var/lib/node_exporter/textfile/hpcops_lending.prom
  register: lending
"""

RETURN = r"""
start:
  description: The period's start (Unix seconds).
  returned: success
  type: float
end:
  description: The period's end (Unix seconds).
  returned: success
  type: float
rows:
  description:
    - One row per partition and account. C(lent_node_hours) is on the partition's row of
      account C(*) (a loan belongs to no account); the other figures on the accounts' rows.
  returned: success
  type: list
  elements: dict
  contains:
    partition:
      description: The partition.
      type: str
    account:
      description: The account, C(*) for the partition's loans.
      type: str
    lent_node_hours:
      description: Node-hours lent in the period.
      type: float
    used_node_hours:
      description: Node-hours jobs ran on lent nodes in the period.
      type: float
    jobs_on_lent_nodes:
      description: Jobs that ran on lent nodes.
      type: int
    requeued_by_reclaim:
      description: Jobs requeued (or preempted, or failed with their node) by a reclaim.
      type: int
    cancelled_by_reclaim:
      description: Jobs cancelled by a reclaim.
      type: int
    lost_node_hours:
      description: Node-hours of work the jobs ended by a reclaim lost.
      type: float
table:
  description: The rows as aligned text lines under a header (node-hours as NH).
  returned: success
  type: list
  elements: str
prometheus:
  description: The rows as Prometheus text.
  returned: success
  type: str
loans:
  description: How many loans overlap the period.
  returned: success
  type: int
jobs_read:
  description: How many job records slurmdbd sent for the period.
  returned: success
  type: int
requests:
  description: The requests sent to slurmrestd.
  returned: success
  type: int
"""

import dataclasses
import time
from datetime import UTC, datetime

from ansible_collections.hpcops.slinky.plugins.module_utils._files import write_whole
from ansible_collections.hpcops.slinky.plugins.module_utils._handover.loans import (
    LOANS_LABEL,
    loans_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._k8s.client import (
    KubernetesError,
    kubernetes_client,
    list_objects,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    fail_with,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmRestError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.lending import (
    LendingReport,
    job_from_api,
    prometheus_text,
    table_lines,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    accounting_error,
)

PERIOD_DAYS = 30


def moment(value: str, option: str) -> float:
    """Unix seconds from Unix seconds or an ISO 8601 date or time (UTC unless it says)."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"{option}: {value!r} is neither Unix seconds nor an ISO 8601 date or time; "
            "give one such as 2026-11-01 or 2026-11-01T08:00:00"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def main() -> None:
    module = (
        slurmrestd_from_cluster_argspec()
        .update_argspec(
            cluster={"type": "str"},
            namespace={"type": "str", "default": "slurm"},
            report_configmap={"type": "str", "default": "hpcops-slinky-handover-status"},
            start={"type": "str"},
            end={"type": "str"},
            textfile={"type": "path"},
        )
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    now = time.time()
    try:
        end = moment(params["end"], "end") if params["end"] else now
        start = moment(params["start"], "start") if params["start"] else end - PERIOD_DAYS * 86400
    except ValueError as err:
        module.fail_json(msg=str(err))
    if end <= start:
        module.fail_json(
            msg=f"start: the period must end after it starts (start {start}, end {end})"
        )
    try:
        kube = kubernetes_client(params.get("kubeconfig"), params.get("context"))
        configmaps = list_objects(
            kube, "v1", "ConfigMap", params["namespace"],
            label_selector=f"{LOANS_LABEL}={params['report_configmap']}",
        )  # fmt: skip
    except KubernetesError as err:
        module.fail_json(msg=f"the loans in {params['namespace']}: {err}")
    loans, unreadable = loans_of(configmaps)
    for problem in unreadable:
        module.warn(f"a loan record that cannot be read: {problem}")
    during = [
        loan
        for loan in loans
        if loan.lent < end and (loan.returned is None or loan.returned > start)
    ]
    client = slurm_client(module, token_source_from_params(module))
    api = SlurmdbApi(client)
    result: JSON = {"changed": False, "start": start, "end": end, "loans": len(during)}
    report, jobs_read = LendingReport(start, end, during), 0
    try:
        if during:  # no loan: nothing to sum, slurmdbd need not send a job
            report, jobs_read = api.fold_jobs(
                start,
                end,
                now,
                lambda: LendingReport(start, end, during),
                lambda sums, raw: sums.add_job(job_from_api(raw)),
            )
    except SlurmRestError as err:
        fail_with(module, accounting_error(err), **result)
    rows = report.table()
    result.update(
        rows=[dataclasses.asdict(row) for row in rows],
        prometheus=prometheus_text(rows),
        table=table_lines(rows),
        jobs_read=jobs_read,
        requests=api.requests,
    )
    if params["textfile"] and not module.check_mode:
        write_whole(module, params["textfile"], result["prometheus"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
