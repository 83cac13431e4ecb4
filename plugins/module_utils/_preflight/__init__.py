# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the bare-metal preflight of the nodes Slinky lands on.

`host_facts` reads a host (it runs there, standard library only); `checks` judges what it
read against the inventory (pure, on the controller); `inventory` checks the inventory's
pools of hosts; `report` renders the results. Nothing here is a public API.
"""
