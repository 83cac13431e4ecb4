# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kubernetes resource quantities ('500m', '32', '256Gi') as numbers (pure; no I/O).

PRIVATE to the collection: names here can change without notice. The handover planner reads
what Nodes and Pods offer and ask with it, the deploy roles what a node pool offers.
"""

from __future__ import annotations

import typing as t

_QUANTITY_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}


def quantity(value: t.Any, unit: float = 1.0) -> int:
    """A Kubernetes quantity ('500m', '32', '256Gi') in `unit`s (1/1000 for millicores)."""
    text = str(value or "0").strip()
    scale = 1.0
    if text.endswith("m"):
        text, scale = text[:-1], 1e-3
    else:
        for suffix, factor in _QUANTITY_SUFFIXES.items():
            if text.endswith(suffix):
                text, scale = text[: -len(suffix)], float(factor)
                break
    try:
        return round(float(text) * scale / unit)
    except ValueError:
        return 0
