#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_job
short_description: Cancel or signal Slurm jobs by id, node, partition, user or name
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Selects jobs through slurmrestd and cancels them or sends them a signal.
  - Every given selector must match (they narrow each other); at least one is required,
    so a task can never hit every job of the cluster by omission.
  - Only jobs in O(job_states) are hit, by default the ones that are pending, running or
    suspended. Cancelled jobs no longer match, so a second run changes nothing.
  - In check mode the jobs that would be hit are returned and nothing is sent.
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
    support: none
  idempotent:
    support: partial
    details: O(action=cancel) is idempotent; O(action=signal) sends the signal on every run.
options:
  action:
    description:
      - V(cancel) ends the jobs (like C(scancel)); V(signal) sends O(signal) and leaves
        the job to handle it.
    type: str
    choices: [cancel, signal]
    default: cancel
  signal:
    description:
      - The signal, by name or number (V(SIGTERM), V(TERM), V(15)).
      - Defaults to V(SIGKILL) for O(action=cancel) and V(SIGTERM) for O(action=signal).
    type: str
  batch_only:
    description: Signal only the batch script of each job, not its steps.
    type: bool
    default: false
  job_ids:
    description: Jobs by id (V(123), V(123_4) for an array task).
    type: list
    elements: str
  nodes:
    description: Jobs that run on any of these nodes (names or host lists such as V(node[01-04])).
    type: list
    elements: str
  partitions:
    description: Jobs of these partitions.
    type: list
    elements: str
  users:
    description: Jobs of these users.
    type: list
    elements: str
  names:
    description: Jobs with these names.
    type: list
    elements: str
  job_states:
    description: Only jobs in any of these states.
    type: list
    elements: str
    default: [PENDING, RUNNING, SUSPENDED]
requirements:
  - python-hostlist (to select by node)
seealso:
  - module: hpcops.slinky.slurm_info
  - module: hpcops.slinky.slurm_node
"""

EXAMPLES = r"""
- name: What would be cancelled on a node we reclaim?
  hpcops.slinky.slurm_job:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    nodes: [node07]
    partitions: [backfill]
  check_mode: true
  register: would_cancel

- name: Cancel the backfill jobs on that node
  hpcops.slinky.slurm_job:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    nodes: [node07]
    partitions: [backfill]

- name: Ask a user's running jobs to checkpoint
  hpcops.slinky.slurm_job:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    users: [alice]
    job_states: [RUNNING]
    action: signal
    signal: SIGUSR1
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
jobs:
  description: The jobs that were (or in check mode would be) cancelled or signalled.
  returned: always
  type: list
  elements: dict
  sample:
    - job_id: 42
      name: sim
      state: RUNNING
      partition: backfill
      user_name: alice
      nodes: node07
signal:
  description: The signal sent.
  returned: always
  type: str
  sample: SIGKILL
"""

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    failing_cleanly,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import select_jobs
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import JOB_ACTIVE_STATES

SELECTORS = ("job_ids", "nodes", "partitions", "users", "names")


def main() -> None:
    module = (
        slurmrestd_from_cluster_argspec()
        .update_argspec(
            action={"type": "str", "choices": ["cancel", "signal"], "default": "cancel"},
            signal={"type": "str"},
            batch_only={"type": "bool", "default": False},
            job_ids={"type": "list", "elements": "str"},
            nodes={"type": "list", "elements": "str"},
            partitions={"type": "list", "elements": "str"},
            users={"type": "list", "elements": "str"},
            names={"type": "list", "elements": "str"},
            job_states={"type": "list", "elements": "str", "default": list(JOB_ACTIVE_STATES)},
        )
        .create_ansible_module(required_one_of=[SELECTORS], supports_check_mode=True)
    )
    params = module.params
    signal = params["signal"] or ("SIGKILL" if params["action"] == "cancel" else "SIGTERM")
    client = slurm_client(module, token_source_from_params(module))
    result: dict[str, object] = {"changed": False, "jobs": [], "signal": signal}
    with failing_cleanly(module, result):
        result["api_version"] = client.api_version
        jobs = select_jobs(
            client.jobs(),
            job_ids=params["job_ids"],
            nodes=params["nodes"],
            partitions=params["partitions"],
            states=params["job_states"],
            users=params["users"],
            names=params["names"],
        )
        result["jobs"] = jobs
        result["changed"] = bool(jobs)
        if not module.check_mode:
            for job in jobs:
                client.signal_job(job["job_id"], signal, batch_only=params["batch_only"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
