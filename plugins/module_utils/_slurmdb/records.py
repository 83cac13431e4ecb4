# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What to send slurmdbd to bring accounts, users, associations and QoS to what is wanted.

PRIVATE to the collection. Pure functions: each takes the records slurmdbd holds (as the
API returns them) and the wanted entries (as the modules' options give them) and returns
one Change per entry, with the view before and after in the settings' own names.
"""

from __future__ import annotations

import typing as t
from dataclasses import dataclass, field

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import (
    ADMIN_LEVELS,
    ASSOCIATION_SETTINGS,
    NO_LIMIT,
    QOS_SETTINGS,
    QOS_SINCE,
    FieldError,
    canonical,
    from_api,
    get_path,
    merged_tres,
    set_path,
    to_api,
)

JSON = dict[str, t.Any]
Table = t.Mapping[str, tuple[str, str]]


@dataclass
class Change:
    """One entry's change: action is "create", "update", "delete" or "none"."""

    key: str
    action: str
    before: JSON | None
    after: JSON | None
    # The API record to POST (create and update), or the query of a DELETE.
    body: JSON = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action != "none"


# -- settings in the users' names ----------------------------------------------------------


def settings_view(record: JSON, table: Table) -> JSON:
    """Every setting of the table, read from an API record."""
    return {name: from_api(kind, get_path(record, path)) for name, (path, kind) in table.items()}


def wanted_settings(entry: t.Mapping[str, t.Any], table: Table, where: str) -> JSON:
    """The settings the entry names (None: left as it is), in canonical form."""
    return {
        name: canonical(kind, entry[name], f"{where}.{name}")
        for name, (_path, kind) in table.items()
        if entry.get(name) is not None
    }


def settings_after(current: JSON, wanted: JSON, table: Table) -> JSON:
    """The view once the wanted settings are applied (a TRES limit names only what changes)."""
    after = dict(current)
    for name, value in wanted.items():
        if table[name][1] == "tres":
            after[name] = merged_tres(current.get(name) or {}, value)
        else:
            after[name] = value
    return after


def settings_body(before: JSON, after: JSON, table: Table) -> JSON:
    """The API record fields for the settings that differ."""
    body: JSON = {}
    for name, (path, kind) in table.items():
        if after.get(name) == before.get(name):
            continue
        value = after[name]
        if kind == "tres":
            # A resource the limit loses is sent with count -1, as sacctmgr does.
            removed = {key: NO_LIMIT for key in before.get(name) or {} if key not in value}
            value = {**value, **removed}
        set_path(body, path, to_api(kind, value))
    return body


def _visible(view: JSON, table: Table, wanted: JSON) -> JSON:
    """A view for the result: what the entry named, and every limit that is set."""
    return {
        name: value
        for name, value in view.items()
        if name in wanted or (name in table and value not in (NO_LIMIT, {}, [], ""))
    }


# -- QoS ----------------------------------------------------------------------------------


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


def qos_settings(api_version: str) -> Table:
    """The QoS settings the API version has fields for."""
    return {
        name: spec
        for name, spec in QOS_SETTINGS.items()
        if _version_key(api_version) >= _version_key(QOS_SINCE.get(name, "v0.0.0"))
    }


def plan_qos(
    current: list[JSON], entries: t.Sequence[t.Mapping[str, t.Any]], api_version: str
) -> list[Change]:
    table = qos_settings(api_version)
    by_name = {record.get("name"): record for record in current}
    changes = []
    for index, entry in enumerate(entries):
        where = f"qos[{index}]"
        name = _required(entry, "name", where)
        for missing in sorted(set(QOS_SETTINGS) - set(table)):
            if entry.get(missing) is not None:
                raise FieldError(
                    f"{where}.{missing} needs slurmrestd API {QOS_SINCE[missing]} or later, and "
                    f"this run uses {api_version}: leave api_version unset or pin a newer one"
                )
        record = by_name.get(name)
        before = settings_view(record, table) if record is not None else None
        if entry.get("state", "present") == "absent":
            shown = _visible(before, table, {}) if before is not None else None
            changes.append(Change(name, "delete" if record else "none", shown, None))
            continue
        wanted = wanted_settings(entry, table, where)
        base = before if before is not None else settings_view({}, table)
        if base["preempt"] and wanted.get("preempt") == []:
            raise FieldError(
                f"{where}.preempt: slurmrestd cannot empty a preempt list; run "
                f"`sacctmgr modify qos {name} set preempt=''`, or name the QoS it may preempt"
            )
        after = settings_after(base, wanted, table)
        shown_after = _visible(after, table, wanted)
        if before is not None and after == before:
            changes.append(Change(name, "none", shown_after, shown_after))
            continue
        changes.append(
            Change(
                name,
                "update" if before is not None else "create",
                _visible(before, table, wanted) if before is not None else None,
                shown_after,
                {"name": name, **settings_body(base, after, table)},
            )
        )
    return changes


def qos_requests(changes: list[Change]) -> list[list[JSON]]:
    """The POST bodies of the QoS changes, in one request, or two when a QoS preempts one
    made in the same run: slurmdbd resolves preempt names before it makes any."""
    created = {change.key for change in changes if change.action == "create"}
    first: list[JSON] = []
    later: list[JSON] = []
    for change in changes:
        if change.action not in ("create", "update"):
            continue
        body = change.body
        preempt = get_path(body, "preempt.list")
        if preempt and created & set(preempt):
            body = {**body, "preempt": {k: v for k, v in body["preempt"].items() if k != "list"}}
            if not body["preempt"]:
                del body["preempt"]
            later.append({"name": change.key, "preempt": {"list": preempt}})
        first.append(body)
    return [batch for batch in (first, later) if batch]


# -- associations ------------------------------------------------------------------------


def association_key(cluster: str, account: str, user: str = "", partition: str = "") -> str:
    """How a result names an association: cluster/account[/user][@partition]."""
    key = f"{cluster}/{account}"
    if user:
        key += f"/{user}"
    if partition:
        key += f"@{partition}"
    return key


def _assoc_identity(record: JSON) -> tuple[str, str, str, str]:
    return (
        str(record.get("cluster") or ""),
        str(record.get("account") or ""),
        str(record.get("user") or ""),
        str(record.get("partition") or ""),
    )


def account_parents(associations: list[JSON], cluster: str) -> dict[str, str]:
    """The accounts that have their own association on the cluster (users can join those),
    each with its parent account."""
    return {
        str(record.get("account")): str(record.get("parent_account") or "")
        for record in associations
        if record.get("cluster") == cluster
        and not record.get("user")
        and not record.get("partition")
    }


def plan_associations(
    current: list[JSON], entries: t.Sequence[t.Mapping[str, t.Any]], cluster: str
) -> list[Change]:
    """Associations of accounts (no user) or of users, optionally per partition."""
    by_identity = {_assoc_identity(record): record for record in current}
    changes = []
    for index, entry in enumerate(entries):
        where = f"associations[{index}]"
        account = _required(entry, "account", where)
        user = str(entry.get("user") or "")
        partition = str(entry.get("partition") or "")
        on = str(entry.get("cluster") or cluster)
        identity = (on, account, user, partition)
        key = association_key(*identity)
        record = by_identity.get(identity)
        # The API needs user, also empty (an account's own association).
        fields = {"cluster": on, "account": account, "user": user}
        if partition:
            fields["partition"] = partition
        if entry.get("state", "present") == "absent":
            if record is None:
                changes.append(Change(key, "none", None, None))
            else:
                view = settings_view(record, ASSOCIATION_SETTINGS)
                shown = _visible(view, ASSOCIATION_SETTINGS, {})
                changes.append(Change(key, "delete", shown, None, fields))
            continue
        if record is None and (on, account, "", "") not in by_identity:
            raise FieldError(
                f"{where}: account {account} has no association on cluster {on}; create it "
                "first (hpcops.slinky.slurm_account)"
            )
        wanted = wanted_settings(entry, ASSOCIATION_SETTINGS, where)
        before = settings_view(record, ASSOCIATION_SETTINGS) if record else None
        base = before or settings_view({}, ASSOCIATION_SETTINGS)
        after = settings_after(base, wanted, ASSOCIATION_SETTINGS)
        if before is not None and after == before:
            view = _visible(before, ASSOCIATION_SETTINGS, wanted)
            changes.append(Change(key, "none", view, view))
            continue
        changes.append(
            Change(
                key,
                "update" if before is not None else "create",
                _visible(before, ASSOCIATION_SETTINGS, wanted) if before is not None else None,
                _visible(after, ASSOCIATION_SETTINGS, wanted),
                {**fields, **settings_body(base, after, ASSOCIATION_SETTINGS)},
            )
        )
    return changes


# -- accounts -----------------------------------------------------------------------------

ACCOUNT_TEXT = ("description", "organization")


@dataclass
class AccountPlan:
    changes: list[Change]
    # Account records to POST (new ones and changed descriptions or organizations).
    records: list[JSON]
    # New accounts to place in the tree, by parent: one accounts_association request each.
    new_by_parent: dict[str, list[str]]

    def placements(self) -> list[tuple[str, list[str]]]:
        """(parent, accounts) in an order where each parent is placed before its children."""
        placing = {name for names in self.new_by_parent.values() for name in names}
        ordered: list[tuple[str, list[str]]] = []
        placed: set[str] = set()
        waiting = dict(self.new_by_parent)
        while waiting:
            ready = sorted(p for p in waiting if p not in placing or p in placed)
            if not ready:  # a cycle: each waits for another
                raise FieldError(
                    f"accounts: parents {', '.join(sorted(waiting))} are each under one another"
                )
            for parent in ready:
                ordered.append((parent, waiting.pop(parent)))
                placed.update(ordered[-1][1])
        return ordered


def plan_accounts(
    current: list[JSON],
    associations: list[JSON],
    entries: t.Sequence[t.Mapping[str, t.Any]],
    cluster: str,
) -> AccountPlan:
    """Accounts and their place in the tree on `cluster`."""
    by_name = {record.get("name"): record for record in current}
    parents = account_parents(associations, cluster)
    named = {str(entry.get("name")) for entry in entries}
    plan = AccountPlan([], [], {})
    for index, entry in enumerate(entries):
        where = f"accounts[{index}]"
        name = _required(entry, "name", where)
        record = by_name.get(name)
        before = None
        if record is not None:
            before = {key: str(record.get(key) or "") for key in ACCOUNT_TEXT}
            before["parent"] = parents.get(name, "")
        if entry.get("state", "present") == "absent":
            plan.changes.append(Change(name, "delete" if record else "none", before, None))
            continue
        parent = str(entry.get("parent") or "")
        after = dict(before or {"description": "", "organization": "", "parent": ""})
        for key in ACCOUNT_TEXT:
            if entry.get(key) is not None:
                after[key] = str(entry[key])
        if record is None:
            # sacctmgr's defaults: described by its name, organised under its parent's name.
            after["description"] = after["description"] or name
            after["organization"] = after["organization"] or (parent or name)
        placed = bool(after["parent"])
        if parent and placed and parent != after["parent"]:
            raise FieldError(
                f"{where}.parent: account {name} is under {after['parent']} on {cluster}, and "
                "slurmrestd cannot move an account; run `sacctmgr modify account "
                f"name={name} set parent={parent}`, then run this again"
            )
        if not placed:
            after["parent"] = parent or "root"
            plan.new_by_parent.setdefault(after["parent"], []).append(name)
            if after["parent"] not in {*parents, *named, "root"}:
                raise FieldError(
                    f"{where}.parent: account {after['parent']} has no association on "
                    f"cluster {cluster}; add it to accounts, or create it first"
                )
        if before == after:
            plan.changes.append(Change(name, "none", before, after))
            continue
        if before is None or any(before[key] != after[key] for key in ACCOUNT_TEXT):
            plan.records.append({"name": name, **{key: after[key] for key in ACCOUNT_TEXT}})
        plan.changes.append(Change(name, "update" if record else "create", before, after))
    return plan


# -- users --------------------------------------------------------------------------------


@dataclass
class UserPlan:
    changes: list[Change]
    # User associations to create first (they make a new user), then the user records.
    associations: list[JSON]
    records: list[JSON]


def plan_users(
    current: list[JSON],
    associations: list[JSON],
    entries: t.Sequence[t.Mapping[str, t.Any]],
    cluster: str,
) -> UserPlan:
    """Users, the accounts they are in on `cluster`, their default account and admin level."""
    by_name = {record.get("name"): record for record in current}
    member_of: dict[str, set[str]] = {}
    default_of: dict[str, str] = {}
    for assoc in associations:
        if assoc.get("cluster") == cluster and assoc.get("user") and not assoc.get("partition"):
            member_of.setdefault(assoc["user"], set()).add(str(assoc.get("account")))
            if assoc.get("is_default"):
                default_of[assoc["user"]] = str(assoc.get("account"))
    known_accounts = set(account_parents(associations, cluster))
    plan = UserPlan([], [], [])
    for index, entry in enumerate(entries):
        where = f"users[{index}]"
        name = _required(entry, "name", where)
        record = by_name.get(name)
        before = None
        if record is not None:
            before = {
                "default_account": default_of.get(name, ""),
                "admin_level": _admin_level(record.get("administrator_level")),
                "accounts": sorted(member_of.get(name, set())),
            }
        if entry.get("state", "present") == "absent":
            plan.changes.append(Change(name, "delete" if record else "none", before, None))
            continue
        after = _user_after(entry, before, known_accounts, cluster, where)
        if before == after:
            plan.changes.append(Change(name, "none", before, after))
            continue
        joined = [
            acct for acct in after["accounts"] if acct not in (before or {}).get("accounts", [])
        ]
        plan.associations += [
            {"account": acct, "user": name, "cluster": cluster} for acct in joined
        ]
        plan.records.append(
            {
                "name": name,
                "default": {"account": after["default_account"]},
                "administrator_level": [after["admin_level"]],
            }
        )
        plan.changes.append(Change(name, "update" if record else "create", before, after))
    return plan


def _user_after(
    entry: t.Mapping[str, t.Any],
    before: JSON | None,
    known_accounts: set[str],
    cluster: str,
    where: str,
) -> JSON:
    """The user as the entry wants it: accounts added to those it has, default, level."""
    name = entry["name"]
    accounts = canonical("list", entry.get("accounts") or [], f"{where}.accounts")
    default = str(entry.get("default_account") or "")
    if default:
        accounts = sorted({*accounts, default})
    unknown = [account for account in accounts if account not in known_accounts]
    if unknown:
        raise FieldError(
            f"{where}: account {', '.join(unknown)} has no association on cluster "
            f"{cluster}; create it first (hpcops.slinky.slurm_account)"
        )
    after = dict(before or {"default_account": "", "admin_level": "None", "accounts": []})
    after["accounts"] = sorted({*after["accounts"], *accounts})
    if default:
        after["default_account"] = default
    elif not after["default_account"]:
        if not after["accounts"]:
            raise FieldError(
                f"{where}: user {name} is new and has no account; give accounts "
                "(or default_account): Slurm adds a user only within an account"
            )
        after["default_account"] = after["accounts"][0]
    if entry.get("admin_level") is not None:
        after["admin_level"] = _admin_level_option(entry["admin_level"], f"{where}.admin_level")
    return after


def _admin_level(levels: t.Any) -> str:
    if isinstance(levels, list):
        levels = levels[0] if levels else "None"
    text = str(levels or "None")
    return "None" if text.lower() in ("none", "not set", "") else text


def _admin_level_option(value: t.Any, where: str) -> str:
    for level in ADMIN_LEVELS:
        if str(value).lower() == level.lower():
            return level
    raise FieldError(f"{where} must be one of {', '.join(ADMIN_LEVELS)}, not {value!r}")


def _required(entry: t.Mapping[str, t.Any], name: str, where: str) -> str:
    value = entry.get(name)
    if not value:
        raise FieldError(f"{where}.{name} is required")
    return str(value)
