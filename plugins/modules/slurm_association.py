#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_association
short_description: Set fair-share shares, QoS and limits of Slurm associations through slurmrestd
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Brings Slurm's associations (an account, or a user in an account, on a cluster and
    optionally a partition) to what O(associations) describes, through slurmrestd's
    C(/slurmdb/) API, creating those that do not exist.
  - Settings keep the names of C(sacctmgr) in snake case (C(GrpTRES) is
    O(associations[].grp_tres), C(Fairshare) is O(associations[].fairshare)). A setting
    left out is left as it is; a limit of V(-1) removes it, as in C(sacctmgr).
  - Limits hold only where slurm.conf says so (C(AccountingStorageEnforce=limits)), and
    shares count only with C(PriorityType=priority/multifactor).
  - All associations that change are sent in one request; each removal is one request.
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
  associations:
    description: The associations.
    type: list
    elements: dict
    required: true
    suboptions:
      account:
        description: The account; it must exist (M(hpcops.slinky.slurm_account)).
        type: str
        required: true
      user:
        description: The user; unset, the association of the account itself.
        type: str
      partition:
        description: The partition the association is limited to; unset, all of them.
        type: str
      cluster:
        description: The cluster; unset, the module's O(cluster).
        type: str
      state:
        description:
          - Whether it exists; unset, the module's O(state).
          - Removing the association of an account (no O(associations[].user)) removes its
            users' associations with it on that cluster too, as C(sacctmgr) does.
        type: str
        choices: [present, absent]
      fairshare:
        description: Its fair-share shares (C(Fairshare)), relative to its siblings'.
        type: int
      priority:
        description: Added to its jobs' priority (C(Priority)).
        type: int
      qos:
        description: The QoS its jobs may use; the whole list.
        type: list
        elements: str
      default_qos:
        description: The QoS of its jobs that name none; must be in O(associations[].qos).
        type: str
      grp_jobs:
        description: Jobs of it and its children that may run at once (C(GrpJobs)).
        type: int
      grp_jobs_accrue:
        description: Pending jobs of it and its children that accrue age priority (C(GrpJobsAccrue)).
        type: int
      grp_submit_jobs:
        description: Jobs of it and its children that may be queued or running (C(GrpSubmitJobs)).
        type: int
      grp_tres:
        description:
          - Resources its running jobs and its children's may hold together (C(GrpTRES)), as
            a dict of counts by resource (V(cpu), V(mem), V(gres/gpu)) or a string such as
            V(cpu=64,mem=256G,gres/gpu=4).
          - Only the resources named change; V(-1) removes one.
        type: raw
      grp_tres_mins:
        description: Resource-minutes its jobs may use in all (C(GrpTRESMins)); as O(associations[].grp_tres).
        type: raw
      grp_tres_run_mins:
        description: Resource-minutes its running jobs may have left (C(GrpTRESRunMins)); as O(associations[].grp_tres).
        type: raw
      grp_wall:
        description: Minutes, or Slurm's time format, its running jobs may use together (C(GrpWall)).
        type: raw
      max_jobs:
        description: Jobs of it that may run at once (C(MaxJobs)).
        type: int
      max_jobs_accrue:
        description: Pending jobs of it that accrue age priority (C(MaxJobsAccrue)).
        type: int
      max_submit_jobs:
        description: Jobs of it that may be queued or running (C(MaxSubmitJobs)).
        type: int
      max_tres_run_mins:
        description: Resource-minutes its running jobs may have left (C(MaxTRESRunMins)); as O(associations[].grp_tres).
        type: raw
      max_tres_per_job:
        description: Resources one job may ask for (C(MaxTRES)); as O(associations[].grp_tres).
        type: raw
      max_tres_per_node:
        description: Resources one job may ask for on each node (C(MaxTRESPerNode)); as O(associations[].grp_tres).
        type: raw
      max_tres_mins_per_job:
        description: Resource-minutes one job may use (C(MaxTRESMins)); as O(associations[].grp_tres).
        type: raw
      max_wall:
        description: Minutes, or Slurm's time format, one job may run (C(MaxWall)).
        type: raw
  state:
    description: The state of the entries that do not say their own.
    type: str
    choices: [present, absent]
    default: present
seealso:
  - module: hpcops.slinky.slurm_account
  - module: hpcops.slinky.slurm_user
  - module: hpcops.slinky.slurm_qos
  - name: Slurm's resource limits
    description: What each limit does and where it is enforced.
    link: https://slurm.schedmd.com/resource_limits.html
"""

EXAMPLES = r"""
- name: Shares of two groups, and a cap on what the visitors' group may hold
  hpcops.slinky.slurm_association:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    associations:
      - {account: astro, fairshare: 60}
      - {account: hep, fairshare: 40}
      - account: visitors
        fairshare: 5
        grp_tres: {cpu: 64, gres/gpu: 2}
        max_wall: 1-00:00:00
        qos: [normal, lent]
        default_qos: normal

- name: One user may run two jobs at a time in astro
  hpcops.slinky.slurm_association:
    url: "{{ slurmrestd_url }}"
    token: "{{ slurm_token }}"
    associations:
      - {account: astro, user: alice, max_jobs: 2}
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
cluster:
  description: The module's cluster.
  returned: always
  type: str
  sample: slurm
associations:
  description: One entry per association, with what was (or in check mode would be) done.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The association as C(cluster/account[/user][@partition]).
      type: str
    action:
      description: V(none), V(create), V(update) or V(delete).
      type: str
    before:
      description: Its settings before (those named and the limits set); null when it did not exist.
      type: dict
    after:
      description: Its settings after; null once removed.
      type: dict
  sample:
    - name: slurm/astro/alice
      action: update
      before: {"max_jobs": -1}
      after: {"max_jobs": 2}
done:
  description:
    - The requests that change something, in the order they were sent; when one fails, those
      sent before it.
  returned: when not in check mode
  type: list
  elements: str
  sample: ["POST associations (2)"]
requests:
  description: The requests sent to slurmrestd, reads included.
  returned: success
  type: int
  sample: 3
"""

from functools import partial

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import (
    ASSOCIATION_SETTINGS,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    Plan,
    accounting_argspec,
    posted,
    run_accounting_module,
    setting_options,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import (
    plan_associations,
)


def plan(api: SlurmdbApi, cluster: str, entries: list[JSON]) -> Plan:
    changes = plan_associations(api.associations(), entries, cluster)
    posts = [change.body for change in changes if change.action in ("create", "update")]
    requests = posted("associations", posts, api.post_associations)
    requests += [
        (f"DELETE association {change.key}", partial(api.delete_association, change.body))
        for change in changes
        if change.action == "delete"
    ]
    return Plan(changes, requests)


def main() -> None:
    module = accounting_argspec(
        "associations",
        {
            "account": {"type": "str", "required": True},
            "user": {"type": "str"},
            "partition": {"type": "str"},
            "cluster": {"type": "str"},
            **setting_options(ASSOCIATION_SETTINGS),
        },
    ).create_ansible_module(supports_check_mode=True)
    run_accounting_module(module, "associations", plan)


if __name__ == "__main__":
    main()
