# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the bare-metal preflight's judgement, on the controller.

`checks` judges what module_utils/_preflight/host_facts read on each host against the
inventory (pure); `inventory` checks the inventory's pools of hosts; `report` renders the
results. The filters of plugins/filter/preflight.py are their only users.
"""
