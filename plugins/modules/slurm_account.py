#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: slurm_account
short_description: Create, change and remove Slurm accounts and their place in the account tree through slurmrestd
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Brings Slurm's accounts to what O(accounts) describes, through slurmrestd's C(/slurmdb/)
    API, with their description, organization and parent account on O(cluster).
  - Limits and fair-share shares of an account are set with M(hpcops.slinky.slurm_association).
  - New and changed accounts are sent in one request, their place in the tree in one more;
    each removal is one request. Slurm refuses to remove an account that has running jobs
    or sub-accounts; the module reports its answer.
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
  accounts:
    description: The accounts.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The account name.
        type: str
        required: true
      state:
        description: Whether it exists; unset, the module's O(state).
        type: str
        choices: [present, absent]
      description:
        description: Free text; Slurm uses the name when a new account has none.
        type: str
      organization:
        description: Free text; Slurm uses the parent's name when a new account has none.
        type: str
      parent:
        description: The parent account; a new account without one goes under V(root).
        type: str
  state:
    description: The state of the entries that do not say their own.
    type: str
    choices: [present, absent]
    default: present
seealso:
  - module: hpcops.slinky.slurm_user
  - module: hpcops.slinky.slurm_association
"""

EXAMPLES = r"""
- name: A department and its groups
  hpcops.slinky.slurm_account:
    url: "{{ slurmrestd_url }}"
    jwt_key_path: /etc/slurm/jwt_hs256.key
    accounts:
      - {name: physics, description: Physics department, organization: science}
      - {name: astro, parent: physics, description: Astrophysics}
      - {name: hep, parent: physics}
"""

RETURN = r"""
api_version:
  description: The slurmrestd API version used.
  returned: always
  type: str
  sample: v0.0.44
cluster:
  description: The cluster of slurmdbd the accounts' associations belong to.
  returned: always
  type: str
  sample: slurm
accounts:
  description: One entry per account, with what was (or in check mode would be) done.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The account.
      type: str
    action:
      description: V(none), V(create), V(update) or V(delete).
      type: str
    before:
      description: Description, organization and parent before; null when it did not exist.
      type: dict
    after:
      description: The same after; null once removed.
      type: dict
  sample:
    - name: astro
      action: create
      before: null
      after: {"description": "Astrophysics", "organization": "physics", "parent": "physics"}
done:
  description:
    - The requests that change something, in the order they were sent; when one fails, those
      sent before it.
  returned: when not in check mode
  type: list
  elements: str
  sample: ["POST accounts (1)", "POST accounts_association under physics (1)"]
requests:
  description: The requests sent to slurmrestd, reads included.
  returned: success
  type: int
  sample: 4
"""

from functools import partial

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import SlurmdbApi
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    JSON,
    Plan,
    accounting_argspec,
    posted,
    removals,
    run_accounting_module,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import plan_accounts


def plan(api: SlurmdbApi, cluster: str, entries: list[JSON]) -> Plan:
    accounts = plan_accounts(api.accounts(), api.associations(cluster), entries, cluster)
    requests = posted("accounts", accounts.records, api.post_accounts)
    requests += [
        (
            f"POST accounts_association under {parent} ({len(names)})",
            partial(api.place_accounts, names, cluster, parent),
        )
        for parent, names in accounts.placements()
    ]
    requests += removals(accounts.changes, "account", api.delete_account)
    return Plan(accounts.changes, requests)


def main() -> None:
    module = accounting_argspec(
        "accounts",
        {
            "name": {"type": "str", "required": True},
            "description": {"type": "str"},
            "organization": {"type": "str"},
            "parent": {"type": "str"},
        },
    ).create_ansible_module(supports_check_mode=True)
    run_accounting_module(module, "accounts", plan)


if __name__ == "__main__":
    main()
