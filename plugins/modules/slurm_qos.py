#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_qos
short_description: Create, change and remove Slurm QoS (priority, preemption, limits) through slurmrestd
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Brings Slurm's quality-of-service records to what O(qos) describes, through slurmrestd's
    C(/slurmdb/) API (slurmdbd must run, and slurmrestd must load C(openapi/slurmdbd)).
  - Settings keep the names of C(sacctmgr) in snake case (C(GrpTRES) is O(qos[].grp_tres)).
    A setting left out is left as it is; a limit of V(-1) removes it, as in C(sacctmgr).
  - All QoS that change are sent in one request; each removal is one request.
extends_documentation_fragment:
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd.ACCOUNTING
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
  qos:
    description: The QoS records.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The QoS name.
        type: str
        required: true
      state:
        description: Whether it exists; unset, the module's O(state).
        type: str
        choices: [present, absent]
      description:
        description: Free text.
        type: str
      priority:
        description: Added to the priority of the jobs that use it (weighted by C(PriorityWeightQOS)).
        type: int
      flags:
        description:
          - Its flags, the whole list (V([]) clears them), in C(sacctmgr)'s names such as
            V(DenyOnLimit), V(NoDecay), V(OverPartQOS), V(UsageFactorSafe), or the API's
            (V(DENY_LIMIT)).
        type: list
        elements: str
      preempt:
        description:
          - The QoS whose jobs its jobs may preempt (C(PreemptType=preempt/qos)), the whole list.
          - slurmrestd cannot empty the list; the module says which C(sacctmgr) command does.
        type: list
        elements: str
      preempt_mode:
        description:
          - How its jobs are preempted (V(REQUEUE), V(CANCEL), V(SUSPEND), V(GANG)), the whole
            list; V([]) takes the cluster's C(PreemptMode).
        type: list
        elements: str
      preempt_exempt_time:
        description: Seconds a job runs before it may be preempted; V(-1) removes it.
        type: int
      usage_factor:
        description: Factor of the usage its jobs are charged (fair share), for example V(0.5).
        type: float
      grace_time:
        description: Seconds a preempted job is given before it is stopped.
        type: int
      grp_jobs:
        description: Jobs of this QoS that may run at once (C(GrpJobs)).
        type: int
      grp_jobs_accrue:
        description: Pending jobs of this QoS that accrue age priority (C(GrpJobsAccrue)).
        type: int
      grp_submit_jobs:
        description: Jobs of this QoS that may be queued or running (C(GrpSubmitJobs)); API v0.0.42 and later.
        type: int
      grp_tres:
        description:
          - Resources all its running jobs may hold together (C(GrpTRES)), as a dict of counts by
            resource (V(cpu), V(mem), V(gres/gpu)) or a string such as V(cpu=64,mem=256G,gres/gpu=4).
          - Only the resources named change; V(-1) removes one.
        type: raw
      grp_tres_mins:
        description: Resource-minutes its jobs may use in all (C(GrpTRESMins)); as O(qos[].grp_tres); API v0.0.42 and later.
        type: raw
      grp_tres_run_mins:
        description: Resource-minutes its running jobs may have left (C(GrpTRESRunMins)); as O(qos[].grp_tres).
        type: raw
      grp_wall:
        description: Minutes, or Slurm's time format, its running jobs may use together (C(GrpWall)).
        type: raw
      max_jobs_per_user:
        description: Jobs a user may run at once in it (C(MaxJobsPerUser)).
        type: int
      max_jobs_per_account:
        description: Jobs an account may run at once in it (C(MaxJobsPerAccount)).
        type: int
      max_submit_jobs_per_user:
        description: Jobs a user may have queued or running in it (C(MaxSubmitJobsPerUser)).
        type: int
      max_submit_jobs_per_account:
        description: Jobs an account may have queued or running in it (C(MaxSubmitJobsPerAccount)).
        type: int
      max_tres_per_job:
        description: Resources one job may ask for (C(MaxTRESPerJob)); as O(qos[].grp_tres).
        type: raw
      max_tres_per_node:
        description: Resources one job may ask for on each node (C(MaxTRESPerNode)); as O(qos[].grp_tres).
        type: raw
      max_tres_per_user:
        description: Resources a user's running jobs may hold (C(MaxTRESPerUser)); as O(qos[].grp_tres).
        type: raw
      max_tres_per_account:
        description: Resources an account's running jobs may hold (C(MaxTRESPerAccount)); as O(qos[].grp_tres).
        type: raw
      max_tres_mins_per_job:
        description: Resource-minutes one job may use (C(MaxTRESMinsPerJob)); as O(qos[].grp_tres).
        type: raw
      max_wall:
        description: Minutes, or Slurm's time format, one job may run (C(MaxWall)).
        type: raw
      min_tres_per_job:
        description: Resources a job must ask for at least (C(MinTRESPerJob)); as O(qos[].grp_tres).
        type: raw
  state:
    description: The state of the entries that do not say their own.
    type: str
    choices: [present, absent]
    default: present
seealso:
  - module: hpcops.slinky.slurm_association
  - name: Slurm's QOS guide
    description: What each limit and flag does.
    link: https://slurm.schedmd.com/qos.html
"""

EXAMPLES = r"""
- name: A preemptible QoS for jobs on lent nodes, and the one that preempts it
  hpcops.slinky.slurm_qos:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    qos:
      - name: lent
        description: jobs on nodes lent by Kubernetes
        priority: 10
        preempt_mode: [REQUEUE]
        max_wall: "04:00:00"
        max_tres_per_user: {cpu: 256, gres/gpu: 8}
      - name: owner
        priority: 1000
        preempt: [lent]

- name: Lift a limit (-1), leave the rest
  hpcops.slinky.slurm_qos:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    qos:
      - name: lent
        max_tres_per_user: {gres/gpu: -1}

- name: Remove a QoS
  hpcops.slinky.slurm_qos:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    state: absent
    qos: [{name: old-debug}]
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
cluster:
  description: The cluster of slurmdbd the records belong to.
  returned: always
  type: str
  sample: slurm
qos:
  description: One entry per QoS, with what was (or in check mode would be) done.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The QoS.
      type: str
    action:
      description: V(none), V(create), V(update) or V(delete).
      type: str
    before:
      description: Its settings before (those named and those set), null when it did not exist.
      type: dict
    after:
      description: Its settings after, null once removed.
      type: dict
  sample:
    - name: lent
      action: update
      before: {"priority": 10, "max_wall": 240}
      after: {"priority": 10, "max_wall": 240, "max_tres_per_user": {"cpu": 256}}
done:
  description:
    - The requests that change something, in the order they were sent; when one fails, those
      sent before it.
  returned: when not in check mode
  type: list
  elements: str
  sample: ["POST qos (2)", "DELETE qos old-debug"]
requests:
  description: The requests sent to slurmrestd, reads included.
  returned: success
  type: int
  sample: 3
"""

from functools import partial

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import QOS_SETTINGS
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    Plan,
    Request,
    accounting_argspec,
    removals,
    run_accounting_module,
    setting_options,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import (
    plan_qos,
    qos_requests,
)


def plan(api: SlurmdbApi, cluster: str, entries: list[JSON]) -> Plan:
    changes = plan_qos(api.qos(), entries, api.client.api_version)
    requests: list[Request] = [
        (f"POST qos ({len(batch)})", partial(api.post_qos, batch))
        for batch in qos_requests(changes)
    ]
    requests += removals(changes, "qos", api.delete_qos)
    return Plan(changes, requests)


def main() -> None:
    module = accounting_argspec(
        "qos", {"name": {"type": "str", "required": True}, **setting_options(QOS_SETTINGS)}
    ).create_ansible_module(supports_check_mode=True)
    run_accounting_module(module, "qos", plan)


if __name__ == "__main__":
    main()
