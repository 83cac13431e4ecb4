# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Values built as defaults combined with overrides, as the deploy roles build them (pure).

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations

import copy
import typing as t
from collections.abc import Mapping


def merged(base: Mapping[str, t.Any], override: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Recursive merge, as Ansible's combine(recursive=True): override wins, lists replace."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
