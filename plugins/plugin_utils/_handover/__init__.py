# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: the handover's controller-side logic that is not a module's: `triggers` decides
when the Event-Driven Ansible source announces a run (pure, over module_utils/_handover's
views and planner rules)."""
