# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one seam where tests stop a handover on purpose, as a crash would.

PRIVATE to the collection: names here can change without notice.

Inert unless a test turns it on. A test sets the environment variable ``HPCOPS_HANDOVER_FAULT``
to ``<action>:<step>`` (``lend:label``, ``reclaim:drain``, ...) for the node_handover module;
the module reads it once with :func:`armed_fault` and hands it to the executor in its
settings, and the executor calls :func:`after_step` at each step it records. At the named
step the process exits at once with :data:`FAULT_EXIT` (75): no clean-up and no result, as a
crash would leave things, so the test can show that the next run finishes the handover.
Unset or empty, :func:`after_step` does nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

FAULT_ENV = "HPCOPS_HANDOVER_FAULT"
FAULT_EXIT = 75  # the exit status the integration and molecule tests look for


def armed_fault(environ: Mapping[str, str] | None = None) -> str:
    """The fault point a test asked for (``<action>:<step>``), or '' for none."""
    return (os.environ if environ is None else environ).get(FAULT_ENV, "")


def after_step(fault: str, action: str, step: str) -> None:
    """Exit the process here, without clean-up, if `fault` names this action's step."""
    if fault and fault == f"{action}:{step}":
        os._exit(FAULT_EXIT)  # a crash, on purpose: no clean-up, no result
