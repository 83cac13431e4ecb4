#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_user
short_description: Create, change and remove Slurm users, their accounts and admin level through slurmrestd
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Brings Slurm's users to what O(users) describes, through slurmrestd's C(/slurmdb/) API,
    with the accounts each may submit under on O(cluster), the default one and the admin level.
  - Accounts are added to a user, never taken away (a user's association holds its usage and
    limits); remove one with M(hpcops.slinky.slurm_association) and O(state=absent) there.
  - Limits and shares of a user in an account are set with M(hpcops.slinky.slurm_association).
  - The users' new associations are sent in one request and the users in one more; each
    removal is one request.
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
  users:
    description: The users.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The user's login name.
        type: str
        required: true
      state:
        description: Whether the user exists; unset, the module's O(state).
        type: str
        choices: [present, absent]
      accounts:
        description: Accounts the user may submit under; a new user needs one (or O(users[].default_account)).
        type: list
        elements: str
      default_account:
        description: The account of the user's jobs that name none; unset, the first of O(users[].accounts) for a new user.
        type: str
      admin_level:
        description: What the user may do in accounting.
        type: str
        choices: [None, Operator, Administrator]
  state:
    description: The state of the entries that do not say their own.
    type: str
    choices: [present, absent]
    default: present
seealso:
  - module: hpcops.slinky.slurm_account
  - module: hpcops.slinky.slurm_association
"""

EXAMPLES = r"""
- name: Users of the astro group, one of them an operator
  hpcops.slinky.slurm_user:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    users:
      - {name: alice, accounts: [astro]}
      - {name: bob, accounts: [astro, hep], default_account: hep, admin_level: Operator}

- name: On a Slinky site, with a token minted from the JWT key in slurmctld's Secret
  hpcops.slinky.slurm_user:
    url: http://slurm-restapi.slurm.svc:6820
    jwt_key_secret: {namespace: slurm, name: slurm-jwt-key, key: jwt_hs256.key}
    users:
      - {name: carol, accounts: [hep]}
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
cluster:
  description: The cluster of slurmdbd the users' associations belong to.
  returned: always
  type: str
  sample: slurm
users:
  description: One entry per user, with what was (or in check mode would be) done.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The user.
      type: str
    action:
      description: V(none), V(create), V(update) or V(delete).
      type: str
    before:
      description: Default account, admin level and accounts before; null when unknown to Slurm.
      type: dict
    after:
      description: The same after; null once removed.
      type: dict
  sample:
    - name: bob
      action: update
      before: {"default_account": "astro", "admin_level": "None", "accounts": ["astro"]}
      after: {"default_account": "hep", "admin_level": "Operator", "accounts": ["astro", "hep"]}
done:
  description:
    - The requests that change something, in the order they were sent; when one fails, those
      sent before it.
  returned: when not in check mode
  type: list
  elements: str
  sample: ["POST associations (1)", "POST users (1)"]
requests:
  description: The requests sent to slurmrestd, reads included.
  returned: success
  type: int
  sample: 5
"""

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    Plan,
    accounting_argspec,
    posted,
    removals,
    run_accounting_module,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import plan_users


def plan(api: SlurmdbApi, cluster: str, entries: list[JSON]) -> Plan:
    users = plan_users(api.users(), api.associations(cluster), entries, cluster)
    requests = [
        # A new user comes with its first association.
        *posted("associations", users.associations, api.post_associations),
        *posted("users", users.records, api.post_users),
    ]
    requests += removals(users.changes, "user", api.delete_user)
    return Plan(users.changes, requests)


def main() -> None:
    module = accounting_argspec(
        "users",
        {
            "name": {"type": "str", "required": True},
            "accounts": {"type": "list", "elements": "str"},
            "default_account": {"type": "str"},
            "admin_level": {"type": "str", "choices": ["None", "Operator", "Administrator"]},
        },
    ).create_ansible_module(supports_check_mode=True)
    run_accounting_module(module, "users", plan)


if __name__ == "__main__":
    main()
