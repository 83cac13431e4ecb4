#!/usr/bin/python
# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: show_table
short_description: Show the lines of a table on the terminal, as they are
version_added: 0.1.0
author: hpcops.slinky developers (@hpcops)
description:
  - Writes O(title) and O(lines) to the terminal one line each, with their spacing kept, so a
    table made by M(hpcops.slinky.handover_plan)'s status or by the preflight report reads
    as a table, not as a JSON list of strings inside a debug result.
  - The lines go to standard error, so that a JSON stdout callback (for example
    C(ansible.posix.json)) still writes valid JSON; they are also returned as RV(lines).
  - Runs on the controller only; changes nothing.
options:
  lines:
    description:
      - The lines, aligned already (for example by the P(hpcops.slinky.handover_status_table#filter)
        filter).
    type: list
    elements: str
    required: true
  title:
    description: A line written before O(lines); none when empty.
    type: str
    default: ""
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: all
notes:
  - Use C(run_once) for a table that covers every host.
"""

EXAMPLES = r"""
- name: Read the handover state of the pool
  hpcops.slinky.handover_plan:
  register: pool

- name: Show it as a table
  hpcops.slinky.show_table:
    title: Handover state of each pool node
    lines: "{{ pool.status | hpcops.slinky.handover_status_table }}"
"""

RETURN = r"""
lines:
  description: The lines as written, O(title) first when set.
  returned: always
  type: list
  elements: str
  sample:
    - "NODE   READY  APP PODS  JOURNAL"
    - "int01  Ready  0         lent"
"""
