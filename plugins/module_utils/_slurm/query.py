# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Selecting Slurm nodes and jobs (normalised by ``rest``) by the modules' filters.

PRIVATE to the collection. Pure functions, no I/O.
"""

from __future__ import annotations

import typing as t
from collections.abc import Iterable

try:
    import hostlist as _hostlist
except ImportError as _import_error:
    _hostlist = None
    HOSTLIST_IMPORT_ERROR: ImportError | None = _import_error
else:
    HOSTLIST_IMPORT_ERROR = None

try:
    import jmespath as _jmespath
except ImportError:
    _jmespath = None

JSON = dict[str, t.Any]


def hostlist_library() -> t.Any:
    """python-hostlist, or None where it is not installed (HOSTLIST_IMPORT_ERROR says why)."""
    return _hostlist


class SelectionError(ValueError):
    """A filter value cannot be understood; the message names the option and the fix."""


def expand_hostlists(values: Iterable[str], option: str) -> list[str]:
    """Host names from host list expressions (node[01-04,07]), in order, each once."""
    if _hostlist is None:
        raise SelectionError(
            f"{option}: the Python library python-hostlist is needed to read host lists; "
            "install it on the controller (pip install python-hostlist)"
        )
    names: list[str] = []
    for value in values:
        try:
            expanded = _hostlist.expand_hostlist(value)
        except _hostlist.BadHostlist as err:
            raise SelectionError(
                f"{option}: {value!r} is not a valid host list ({err}); write it as "
                "'node[01-04,07]' or list the names"
            ) from None
        names.extend(name for name in expanded if name not in names)
    return names


def node_matches_state(node: JSON, wanted: Iterable[str]) -> bool:
    """True when any wanted state names the node's base state, a flag or its drain state.

    So 'idle', 'drain', 'drained', 'draining', 'down' and 'not_responding' all work, in
    any case.
    """
    have = {node["state"], *node["state_flags"]}
    if node.get("drain_state"):
        have.add(node["drain_state"].upper())
    return any(state.upper() in have for state in wanted)


def select_nodes(
    nodes: list[JSON],
    names: Iterable[str] | None = None,
    states: Iterable[str] | None = None,
    partitions: Iterable[str] | None = None,
) -> list[JSON]:
    """Nodes that pass every given filter (host lists, states, partitions)."""
    wanted_names = set(expand_hostlists(names, "nodes")) if names else None
    wanted_states = list(states or [])
    wanted_partitions = set(partitions or [])
    return [
        node
        for node in nodes
        if (wanted_names is None or node["name"] in wanted_names)
        and (not wanted_states or node_matches_state(node, wanted_states))
        and (not wanted_partitions or wanted_partitions.intersection(node["partitions"]))
    ]


def job_node_names(job: JSON) -> list[str]:
    """The host names a job runs on, from its host list."""
    return expand_hostlists([job["nodes"]], "job nodes") if job.get("nodes") else []


def job_filter(
    job_ids: Iterable[int | str] | None = None,
    nodes: Iterable[str] | None = None,
    partitions: Iterable[str] | None = None,
    states: Iterable[str] | None = None,
    users: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
) -> t.Callable[[JSON], bool]:
    """True for the jobs that pass every given filter (host lists expanded once, here)."""
    wanted_ids = {str(job_id) for job_id in job_ids} if job_ids else None
    wanted_nodes = set(expand_hostlists(nodes, "nodes")) if nodes else None
    wanted_partitions = set(partitions or [])
    wanted_states = {state.upper() for state in states or []}
    wanted_users = set(users or [])
    wanted_names = set(names or [])

    def passes(job: JSON) -> bool:
        return (
            (wanted_ids is None or str(job["job_id"]) in wanted_ids)
            # A pending job may name several partitions ("batch,backfill").
            and (
                not wanted_partitions
                or bool(wanted_partitions.intersection(job["partition"].split(",")))
            )
            and (
                not wanted_states
                or bool(wanted_states.intersection({job["state"], *job["state_flags"]}))
            )
            and (not wanted_users or job["user_name"] in wanted_users)
            and (not wanted_names or job["name"] in wanted_names)
            and (wanted_nodes is None or bool(wanted_nodes.intersection(job_node_names(job))))
        )

    return passes


def select_jobs(
    jobs: list[JSON],
    job_ids: Iterable[int | str] | None = None,
    nodes: Iterable[str] | None = None,
    partitions: Iterable[str] | None = None,
    states: Iterable[str] | None = None,
    users: Iterable[str] | None = None,
    names: Iterable[str] | None = None,
) -> list[JSON]:
    """Jobs that pass every given filter."""
    passes = job_filter(job_ids, nodes, partitions, states, users, names)
    return [job for job in jobs if passes(job)]


def item_query(expression: str, option: str) -> t.Callable[[JSON], t.Any]:
    """What a JMESPath expression makes of one item (a job, a node...); None or False:
    leave the item out. So ``state == 'PENDING' && {id: job_id}`` both filters and picks."""
    if _jmespath is None:
        raise SelectionError(
            f"{option}: the Python library jmespath is needed for queries; install it on "
            "the controller (pip install jmespath)"
        )
    try:
        compiled = _jmespath.compile(expression)
    except _jmespath.exceptions.JMESPathError as err:
        raise SelectionError(
            f"{option}: {expression!r} is not a JMESPath expression ({err}); for example "
            "\"state == 'PENDING' && {id: job_id, partition: partition}\""
        ) from None

    def search(item: JSON) -> t.Any:
        try:
            found = compiled.search(item)
        except _jmespath.exceptions.JMESPathError as err:
            raise SelectionError(f"{option}: {expression!r} fails on an item: {err}") from None
        return None if found is False else found

    return search
