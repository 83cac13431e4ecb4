# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Descriptions of the module attributes; each module states its support."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and report what it would change without changing it.
  diff_mode:
    description: Returns what changed, or would change in check mode, in diff mode.
  idempotent:
    description: Running it again with the same options after a success reports no change.
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module only reads, so check mode changes nothing in what it does.
  diff_mode:
    support: N/A
    details: This module changes nothing.
  idempotent:
    support: full
"""
