#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_accounting_info
short_description: Read Slurm's accounting through slurmrestd, as sacct, sshare and sacctmgr show it
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Reads what O(gather) asks for through slurmrestd and changes nothing.
  - V(jobs) are slurmdbd's job records of a period (C(sacct)), each attempt of a requeued
    job a record of its own; they are read as a stream, so a long period never sits in
    memory whole. V(shares) is the fair-share tree slurmctld computes (C(sshare)), with each
    account's and user's shares, raw usage and fair-share factor. V(associations),
    V(accounts), V(users) and V(qos) are slurmdbd's records as the API gives them.
  - O(users) and O(accounts) keep only the jobs and shares of those users and accounts.
extends_documentation_fragment:
  - hpcops.slinky.slurmrestd
  - hpcops.slinky.slurmrestd.FROM_CLUSTER
  - hpcops.slinky.kubernetes
  - hpcops.slinky.slurmrestd.ACCOUNTING
  - hpcops.slinky.slurmrestd.ACTIONGROUP
  - hpcops.slinky.attributes
  - hpcops.slinky.attributes.INFO_MODULE
options:
  gather:
    description: What to read.
    type: list
    elements: str
    choices: [jobs, shares, associations, accounts, users, qos]
    default: [jobs]
  jobs_since_s:
    description: V(jobs) that ran (or were submitted) in the last this many seconds.
    type: int
    default: 86400
  users:
    description: Only the jobs and shares of these users.
    type: list
    elements: str
    default: []
  accounts:
    description: Only the jobs and shares of these accounts.
    type: list
    elements: str
    default: []
seealso:
  - module: hpcops.slinky.slurm_association
  - module: hpcops.slinky.slurm_info
"""

EXAMPLES = r"""
- name: The last day's jobs of the physics account, as sacct shows them
  hpcops.slinky.slurm_accounting_info:
    url: "{{ slurmrestd_url }}"
    jwt_key_secret: {namespace: slurm, name: slurm-jwt-key, key: jwt_hs256.key}
    accounts: [physics]
  register: physics

- name: Fair-share usage of every account and user, as sshare shows it
  hpcops.slinky.slurm_accounting_info:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    gather: [shares]
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
jobs:
  description: The jobs of the period, oldest submission first.
  returned: when O(gather) has V(jobs)
  type: list
  elements: dict
  contains:
    job_id:
      description: The job ID.
      type: int
    name:
      description: The job's name.
      type: str
    user:
      description: Who ran it.
      type: str
    account:
      description: Its account.
      type: str
    partition:
      description: Its partition.
      type: str
    qos:
      description: Its QoS.
      type: str
    state:
      description: Its state (C(COMPLETED), C(REQUEUED), ...).
      type: str
    reason:
      description: Why it waited or ended as it did, as slurmdbd recorded.
      type: str
    nodes:
      description: Its nodes (a hostlist), empty when it never ran.
      type: str
    submit:
      description: Submission time (Unix seconds).
      type: int
    start:
      description: Start time, null when it never started.
      type: int
    end:
      description: End time, null while it runs.
      type: int
    elapsed_s:
      description: Seconds it ran.
      type: int
    exit_code:
      description: Its return code, null when unknown.
      type: int
  sample:
    - {job_id: 12, name: sim, user: alice, account: physics, partition: batch, qos: normal,
       state: COMPLETED, reason: None, nodes: slurm-0, submit: 1795838517,
       start: 1795838517, end: 1795838519, elapsed_s: 2, exit_code: 0}
shares:
  description: The fair-share tree, one entry per account and per user under an account.
  returned: when O(gather) has V(shares)
  type: list
  elements: dict
  contains:
    account:
      description: The account (of a user's entry, the user's account).
      type: str
    user:
      description: The user, empty for an account's own entry.
      type: str
    parent:
      description: The parent account.
      type: str
    partition:
      description: The partition of a partition association, else empty.
      type: str
    raw_shares:
      description: Its shares, null when unset.
      type: float
    norm_shares:
      description: Its shares over its siblings'.
      type: float
    raw_usage:
      description: Its decayed usage in TRES-seconds (C(RawUsage)).
      type: int
    effective_usage:
      description: Its usage with its parent's.
      type: float
    fairshare:
      description: Its fair-share factor (0 to 1).
      type: float
associations:
  description: slurmdbd's associations, as the API gives them.
  returned: when O(gather) has V(associations)
  type: list
  elements: dict
accounts:
  description: slurmdbd's accounts, as the API gives them.
  returned: when O(gather) has V(accounts)
  type: list
  elements: dict
users:
  description: slurmdbd's users, as the API gives them.
  returned: when O(gather) has V(users)
  type: list
  elements: dict
qos:
  description: slurmdbd's QoS, as the API gives them.
  returned: when O(gather) has V(qos)
  type: list
  elements: dict
requests:
  description: The requests sent to slurmrestd.
  returned: success
  type: int
  sample: 2
"""

import time

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    fail_with,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmRestError,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import (
    SlurmdbApi,
    cluster_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    accounting_error,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.reads import (
    job_record,
    share_record,
    wanted,
)

GATHER = ["jobs", "shares", "associations", "accounts", "users", "qos"]


def read_jobs(api: SlurmdbApi, since_s: int, users: list[str], accounts: list[str]) -> list[JSON]:
    def add(jobs: list[JSON], raw: JSON) -> None:
        record = job_record(raw)
        if wanted(record, users, accounts):
            jobs.append(record)

    now = time.time()
    jobs, _count = api.fold_jobs(now - since_s, now, now, list, add)
    return sorted(jobs, key=lambda job: (job["submit"] or 0, job["job_id"]))


def main() -> None:
    module = (
        slurmrestd_from_cluster_argspec()
        .update_argspec(
            cluster={"type": "str"},
            gather={"type": "list", "elements": "str", "choices": GATHER, "default": ["jobs"]},
            jobs_since_s={"type": "int", "default": 86400},
            users={"type": "list", "elements": "str", "default": []},
            accounts={"type": "list", "elements": "str", "default": []},
        )
        .create_ansible_module(supports_check_mode=True)
    )
    params = module.params
    if params["jobs_since_s"] <= 0:
        module.fail_json(msg="jobs_since_s: give a number of seconds above 0")
    client = slurm_client(module, token_source_from_params(module))
    api = SlurmdbApi(client)
    result: JSON = {"changed": False, "api_version": client.api_version}
    gather = set(params["gather"])
    try:
        result["cluster"] = cluster_of(api, params["cluster"])
        if "jobs" in gather:
            result["jobs"] = read_jobs(
                api, params["jobs_since_s"], params["users"], params["accounts"]
            )
        if "shares" in gather:
            shares = [share_record(raw) for raw in api.shares()]
            result["shares"] = [s for s in shares if wanted(s, params["users"], params["accounts"])]
        if "associations" in gather:
            result["associations"] = api.associations(result["cluster"])
        for kind, read in (("accounts", api.accounts), ("users", api.users), ("qos", api.qos)):
            if kind in gather:
                result[kind] = read()
    except SlurmRestError as err:
        fail_with(module, accounting_error(err), **result)
    result["requests"] = api.requests
    module.exit_json(**result)


if __name__ == "__main__":
    main()
