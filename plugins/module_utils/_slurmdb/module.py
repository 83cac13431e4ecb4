# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The glue the accounting modules share: options, the run, the result.

PRIVATE to the collection. A module gives its entries' options and a planner; this reads
the cluster, plans, sends the requests (not in check mode) and builds the result.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field
from functools import partial

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.hpcops.slinky.plugins.module_utils._argspec import ArgumentSpec
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.module import (
    fail_with,
    slurm_client,
    slurmrestd_from_cluster_argspec,
    token_source_from_params,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    SlurmRestError,
    describe_errors,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import (
    SlurmdbApi,
    cluster_of,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import FieldError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import Change

JSON = dict[str, t.Any]


# What a request does, for the result, and the call that sends it.
Request = tuple[str, t.Callable[[], None]]


@dataclass
class Plan:
    """The changes of a run, and the requests that make them, in order."""

    changes: list[Change]
    requests: list[Request] = field(default_factory=list)


Planner = t.Callable[[SlurmdbApi, str, list[JSON]], Plan]


def posted(what: str, records: list[JSON], post: t.Callable[[list[JSON]], None]) -> list[Request]:
    """One POST request for all the records of a kind, none when there are none."""
    return [(f"POST {what} ({len(records)})", partial(post, records))] if records else []


def removals(
    changes: t.Sequence[Change], what: str, delete: t.Callable[[str], None]
) -> list[Request]:
    """One DELETE request per change that removes a record named by its key."""
    return [
        (f"DELETE {what} {change.key}", partial(delete, change.key))
        for change in changes
        if change.action == "delete"
    ]


# The option type of each kind of setting (fields.py): TRES limits and durations take a
# dict or a string, so they are checked there, with messages that name the setting.
OPTION_OF_KIND: dict[str, dict[str, t.Any]] = {
    "tres": {"type": "raw"},
    "minutes": {"type": "raw"},
    "count": {"type": "int"},
    "shares": {"type": "int"},
    "seconds": {"type": "int"},
    "float": {"type": "float"},
    "text": {"type": "str"},
    "list": {"type": "list", "elements": "str"},
    "flags": {"type": "list", "elements": "str"},
    "preempt_mode": {"type": "list", "elements": "str"},
}


def setting_options(table: t.Mapping[str, tuple[str, str]]) -> dict[str, dict[str, t.Any]]:
    """The options of a table of settings (fields.ASSOCIATION_SETTINGS, QOS_SETTINGS)."""
    return {name: dict(OPTION_OF_KIND[kind]) for name, (_path, kind) in table.items()}


def accounting_argspec(entries: str, options: dict[str, dict[str, t.Any]]) -> ArgumentSpec:
    """The slurmrestd options (a token or JWT key from a Secret too), O(cluster), O(state)
    and the list of entries."""
    return slurmrestd_from_cluster_argspec().update_argspec(
        cluster={"type": "str"},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
        **{
            entries: {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    **options,
                    "state": {"type": "str", "choices": ["present", "absent"]},
                },
            }
        },
    )


def entries_of(module: AnsibleModule, option: str) -> list[JSON]:
    """The entries with each one's state (the module's O(state) unless it names its own)."""
    return [
        {**entry, "state": entry.get("state") or module.params["state"]}
        for entry in module.params[option]
    ]


def accounting_error(err: SlurmRestError) -> SlurmRestError:
    """The client's error, saying what it means for accounting: slurmrestd without its
    slurmdbd plugin answers 404, and one whose slurmdbd is away 5xx."""
    if "/slurmdb/" not in (err.url or ""):
        return err
    if err.status == 404:
        hint = (
            "this slurmrestd serves no /slurmdb/ API: start it with "
            "-s openapi/slurmctld,openapi/slurmdbd, on a cluster with slurmdbd"
        )
    elif err.status is not None and err.status >= 500:
        hint = (
            "slurmdbd did not answer slurmrestd: check that slurmdbd runs and reaches its "
            "database (slurmctld keeps its jobs meanwhile and sends their records later)"
        )
    else:
        return err
    said = describe_errors(err.errors or []) or "no details"
    return SlurmRestError(
        f"{hint} (HTTP {err.status} from {err.url}: {said})",
        status=err.status,
        url=err.url,
        errors=err.errors,
    )


def run_accounting_module(module: AnsibleModule, option: str, planner: Planner) -> None:
    """Plan, apply (unless check mode) and exit with the result."""
    result: JSON = {"changed": False, option: []}
    client = slurm_client(module, token_source_from_params(module))
    api = SlurmdbApi(client)
    try:
        _run(module, api, option, planner, result)
    except SlurmRestError as err:
        fail_with(module, accounting_error(err), **result)
    module.exit_json(**result)


def _run(
    module: AnsibleModule, api: SlurmdbApi, option: str, planner: Planner, result: JSON
) -> None:
    """Fill `result`; a client error propagates, with what was done so far in `result`."""
    result["api_version"] = api.client.api_version
    result["cluster"] = cluster_of(api, module.params["cluster"])
    try:
        plan = planner(api, result["cluster"], entries_of(module, option))
    except FieldError as err:
        module.fail_json(msg=str(err), **result)
    result[option] = [
        {
            "name": change.key,
            "action": change.action,
            "before": change.before,
            "after": change.after,
        }
        for change in plan.changes
    ]
    changed = [change for change in plan.changes if change.changed]
    result["changed"] = bool(changed)
    if module._diff:
        result["diff"] = {
            "before": {change.key: change.before for change in changed},
            "after": {change.key: change.after for change in changed},
        }
    if not module.check_mode:
        # What was sent before a failure is in the result: the failure says how far it got.
        result["done"] = []
        for what, send in plan.requests:
            send()
            result["done"].append(what)
    result["requests"] = api.requests
