# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters for Slurm host lists (``node[01-04,07]``), built on python-hostlist.

The documentation of each filter is in the YAML file of the same name beside this one.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterable, Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    HOSTLIST_IMPORT_ERROR,
    hostlist_library,
)


def _require_hostlist(filter_name: str) -> t.Any:
    hostlist = hostlist_library()
    if hostlist is None:
        raise AnsibleFilterError(
            f"{filter_name}: the Python library python-hostlist is not installed on the "
            "controller; install it with 'pip install python-hostlist' (see the collection's "
            "requirements.txt)"
        ) from HOSTLIST_IMPORT_ERROR
    return hostlist


def hostlist_expand(value: t.Any, sort: bool = False, allow_duplicates: bool = False) -> list[str]:
    """Expand a Slurm host list expression into the list of host names it stands for."""
    hostlist = _require_hostlist("hostlist_expand")
    if not isinstance(value, str):
        raise AnsibleFilterError(
            f"hostlist_expand: expected a host list string such as 'node[01-04,07]', got "
            f"{type(value).__name__}; to compress a list of names use hostlist_compress"
        )
    try:
        return list(hostlist.expand_hostlist(value, allow_duplicates=allow_duplicates, sort=sort))
    except hostlist.BadHostlist as exc:
        raise AnsibleFilterError(
            f"hostlist_expand: {value!r} is not a valid host list ({exc}); write ranges as "
            "'prefix[01-04,07]' with balanced brackets and start <= end"
        ) from None


def hostlist_compress(value: t.Any) -> str:
    """Compress host names into the shortest Slurm host list expression."""
    hostlist = _require_hostlist("hostlist_compress")
    if isinstance(value, str):
        # A single expression or comma-separated names: normalise them.
        value = hostlist_expand(value)
    if not isinstance(value, Iterable) or isinstance(value, Mapping):
        raise AnsibleFilterError(
            f"hostlist_compress: expected a list of host names, got {type(value).__name__}"
        )
    names = list(value)
    not_strings = [name for name in names if not isinstance(name, str)]
    if not_strings:
        raise AnsibleFilterError(
            f"hostlist_compress: every host name must be a string; {not_strings[0]!r} is "
            f"{type(not_strings[0]).__name__}"
        )
    try:
        return str(hostlist.collect_hostlist(names))
    except hostlist.BadHostlist as exc:
        bad = [name for name in names if any(c in name for c in "[],")]
        hint = f" (for example {bad[0]!r})" if bad else ""
        raise AnsibleFilterError(
            f"hostlist_compress: a host name is not valid{hint}: {exc}; pass plain names such "
            "as 'node01', or expand expressions first with hostlist_expand"
        ) from None


class FilterModule:
    """Slurm host list filters."""

    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "hostlist_expand": hostlist_expand,
            "hostlist_compress": hostlist_compress,
        }
