# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Values built as defaults combined with overrides, as the deploy roles build them (pure).

PRIVATE to the collection: names here can change without notice.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping


def plain(value: t.Any) -> t.Any:
    """A deep copy of `value` made of plain dicts and lists. Not copy.deepcopy: Ansible hands
    filters lazy containers whose deep copy copies their templating state too (seconds of
    CPU for one site's chart values, measured)."""
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def merged(base: Mapping[str, t.Any], override: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Recursive merge, as Ansible's combine(recursive=True): override wins, lists replace."""
    out: dict[str, t.Any] = plain(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = plain(value)
    return out
