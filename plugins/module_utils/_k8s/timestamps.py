# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubernetes times: MicroTime to write (Leases, Events), RFC 3339 to read (pure; no I/O).

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations

import datetime
import typing as t

MICROTIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def microtime(when: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    # timezone.utc, not datetime.UTC: modules may run on a Python older than 3.11.
    return datetime.datetime.fromtimestamp(when, tz=datetime.timezone.utc).strftime(MICROTIME)  # noqa: UP017


def parse_time(value: t.Any) -> float | None:
    if not value:
        return None
    text = str(value).replace("Z", "+00:00")
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
