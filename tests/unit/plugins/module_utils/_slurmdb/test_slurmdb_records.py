# SPDX-License-Identifier: GPL-3.0-or-later
"""Planning accounting changes on what slurmdbd answered (recorded from the lab's slurmdbd on
Slurm 24.11 and 26.05, every API version the collection speaks): an account tree rec >
rec-child, alice in rec-child with MaxJobs=3 and GrpTRES=cpu=4, and the QoS rec-lent."""

from __future__ import annotations

import json
import typing as t
from pathlib import Path

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import FieldError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.records import (
    AccountPlan,
    plan_accounts,
    plan_associations,
    plan_qos,
    plan_users,
    qos_requests,
)

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "slurmrestd"
RECORDED = [
    (release, version)
    for release, versions in (("24.11", ("v0.0.41", "v0.0.42")), ("26.05", ("v0.0.42", "v0.0.45")))
    for version in versions
]


class Slurmdb(t.NamedTuple):
    cluster: str
    version: str
    accounts: list[dict[str, t.Any]]
    users: list[dict[str, t.Any]]
    associations: list[dict[str, t.Any]]
    qos: list[dict[str, t.Any]]


@pytest.fixture(params=RECORDED, ids=lambda pair: f"{pair[0]}-{pair[1]}")
def slurmdb(request: pytest.FixtureRequest) -> Slurmdb:
    release, version = request.param
    body = {
        name: json.loads((FIXTURES / release / version / f"slurmdb_{name}.json").read_text())[
            "body"
        ]
        for name in ("accounts", "users", "associations", "qos")
    }
    return Slurmdb(
        f"lab{release.replace('.', '')}",
        version,
        body["accounts"]["accounts"],
        body["users"]["users"],
        body["associations"]["associations"],
        body["qos"]["qos"],
    )


# -- QoS ----------------------------------------------------------------------------------

REC_LENT = {
    "name": "rec-lent",
    "priority": 10,
    "max_wall": "01:00:00",
    "max_tres_per_user": "cpu=8,mem=4G",
    "preempt_mode": ["requeue"],
    "flags": ["DenyOnLimit"],
}


def test_a_qos_as_sacctmgr_made_it_is_no_change(slurmdb: Slurmdb) -> None:
    (change,) = plan_qos(slurmdb.qos, [REC_LENT], slurmdb.version)
    assert change.action == "none", change.after
    assert change.after["max_tres_per_user"] == {"cpu": 8, "mem": 4096}
    assert change.after["flags"] == ["DENY_LIMIT"]


def test_a_qos_update_sends_only_what_differs(slurmdb: Slurmdb) -> None:
    wanted = {"name": "rec-lent", "priority": 20, "max_tres_per_user": {"mem": -1, "gres/gpu": 2}}
    (change,) = plan_qos(slurmdb.qos, [wanted], slurmdb.version)
    assert change.action == "update"
    assert change.body == {
        "name": "rec-lent",
        "priority": {"set": True, "infinite": False, "number": 20},
        "limits": {
            "max": {
                "tres": {
                    "per": {
                        "user": [
                            {"type": "cpu", "count": 8},
                            {"type": "gres", "name": "gpu", "count": 2},
                            {"type": "mem", "count": -1},
                        ]
                    }
                }
            }
        },
    }
    assert change.before["priority"] == 10 and change.after["priority"] == 20


def test_a_new_qos_and_one_that_preempts_it_take_two_requests(slurmdb: Slurmdb) -> None:
    entries = [{"name": "owner", "preempt": ["newlent"]}, {"name": "newlent", "priority": 1}]
    changes = plan_qos(slurmdb.qos, entries, slurmdb.version)
    assert [change.action for change in changes] == ["create", "create"]
    first, later = qos_requests(changes)
    assert [body["name"] for body in first] == ["owner", "newlent"]
    assert "preempt" not in first[0]
    assert later == [{"name": "owner", "preempt": {"list": ["newlent"]}}]
    # Preempting a QoS that exists already: one request.
    (one,) = qos_requests(
        plan_qos(slurmdb.qos, [{"name": "owner", "preempt": ["rec-lent"]}], slurmdb.version)
    )
    assert one[0]["preempt"] == {"list": ["rec-lent"]}


def test_what_slurmrestd_cannot_do_is_refused_with_the_way_that_can(slurmdb: Slurmdb) -> None:
    with pytest.raises(FieldError, match=r"qos\[0\].preempt has an empty name"):
        plan_qos(slurmdb.qos, [{"name": "x", "preempt": [""]}], slurmdb.version)
    with pytest.raises(FieldError, match=r"unknown QoS flag 'Fast'; known: DenyOnLimit"):
        plan_qos(slurmdb.qos, [{"name": "x", "flags": ["Fast"]}], slurmdb.version)
    preempting = [{**q, "preempt": {**q["preempt"], "list": ["normal"]}} for q in slurmdb.qos]
    with pytest.raises(FieldError, match=r"sacctmgr modify qos rec-lent set preempt=''"):
        plan_qos(preempting, [{"name": "rec-lent", "preempt": []}], slurmdb.version)


def test_a_setting_an_older_api_lacks_names_the_version(slurmdb: Slurmdb) -> None:
    entry = {"name": "rec-lent", "grp_submit_jobs": 5}
    if slurmdb.version == "v0.0.41":
        with pytest.raises(FieldError, match=r"grp_submit_jobs needs slurmrestd API v0\.0\.42"):
            plan_qos(slurmdb.qos, [entry], slurmdb.version)
    else:
        (change,) = plan_qos(slurmdb.qos, [entry], slurmdb.version)
        assert change.body["limits"]["max"]["jobs"]["count"]["number"] == 5


def test_a_qos_to_remove(slurmdb: Slurmdb) -> None:
    gone, missing = plan_qos(
        slurmdb.qos,
        [{"name": "rec-lent", "state": "absent"}, {"name": "nope", "state": "absent"}],
        slurmdb.version,
    )
    assert gone.action == "delete" and gone.before["priority"] == 10 and gone.after is None
    assert missing.action == "none"


# -- accounts -----------------------------------------------------------------------------


def test_the_recorded_tree_is_no_change_and_new_accounts_are_placed_parents_first(
    slurmdb: Slurmdb,
) -> None:
    entries = [
        {"name": "rec", "description": "recorded", "organization": "hpcops"},
        {"name": "rec-child", "parent": "rec"},
        {"name": "grandchild", "parent": "newchild"},
        {"name": "newchild", "parent": "rec-child", "description": "new"},
    ]
    plan = plan_accounts(slurmdb.accounts, slurmdb.associations, entries, slurmdb.cluster)
    assert [change.action for change in plan.changes] == ["none", "none", "create", "create"]
    assert plan.placements() == [("rec-child", ["newchild"]), ("newchild", ["grandchild"])]
    assert plan.records == [
        {"name": "grandchild", "description": "grandchild", "organization": "newchild"},
        {"name": "newchild", "description": "new", "organization": "rec-child"},
    ]


def test_an_account_is_not_moved_nor_placed_under_an_unknown_parent(slurmdb: Slurmdb) -> None:
    with pytest.raises(FieldError, match="sacctmgr modify account name=rec-child set parent=lab"):
        plan_accounts(
            slurmdb.accounts,
            slurmdb.associations,
            [{"name": "rec-child", "parent": "lab"}],
            slurmdb.cluster,
        )
    with pytest.raises(FieldError, match=r"accounts\[0\].parent: account ghost has no association"):
        plan_accounts(
            slurmdb.accounts,
            slurmdb.associations,
            [{"name": "new", "parent": "ghost"}],
            slurmdb.cluster,
        )


def test_parents_that_wait_on_each_other_are_named() -> None:
    plan = AccountPlan([], [], {"a": ["b"], "b": ["a"]})
    with pytest.raises(FieldError, match="parents a, b are each under one another"):
        plan.placements()


# -- users ----------------------------------------------------------------------------------


def test_a_user_gains_an_account_and_keeps_its_default(slurmdb: Slurmdb) -> None:
    plan = plan_users(
        slurmdb.users,
        slurmdb.associations,
        [{"name": "alice", "accounts": ["rec-child"]}, {"name": "bob", "accounts": ["rec-child"]}],
        slurmdb.cluster,
    )
    alice, bob = plan.changes
    assert alice.action == "none" and alice.before["default_account"] == "lab"
    assert bob.action == "update" and bob.after["accounts"] == ["lab", "rec-child"]
    assert plan.associations == [
        {"account": "rec-child", "user": "bob", "cluster": slurmdb.cluster}
    ]
    assert plan.records == [
        {"name": "bob", "default": {"account": "lab"}, "administrator_level": ["None"]}
    ]


def test_a_user_needs_accounts_that_exist(slurmdb: Slurmdb) -> None:
    with pytest.raises(
        FieldError, match=r"users\[0\]: account ghost has no association on cluster"
    ):
        plan_users(
            slurmdb.users,
            slurmdb.associations,
            [{"name": "carol", "accounts": ["ghost"]}],
            slurmdb.cluster,
        )
    with pytest.raises(FieldError, match="user carol is new and has no account"):
        plan_users(slurmdb.users, slurmdb.associations, [{"name": "carol"}], slurmdb.cluster)


# -- associations -------------------------------------------------------------------------


def test_association_limits_read_as_sacctmgr_set_them(slurmdb: Slurmdb) -> None:
    entry = {"account": "rec-child", "user": "alice", "max_jobs": 3, "grp_tres": {"cpu": 4}}
    (change,) = plan_associations(slurmdb.associations, [entry], slurmdb.cluster)
    assert change.action == "none", change.after
    assert change.key == f"{slurmdb.cluster}/rec-child/alice"
    shares = {"account": "rec-child", "fairshare": 5}
    assert plan_associations(slurmdb.associations, [shares], slurmdb.cluster)[0].action == "none"


def test_an_association_change_names_its_record_and_only_what_differs(slurmdb: Slurmdb) -> None:
    entry = {"account": "rec-child", "user": "alice", "max_jobs": -1, "grp_wall": "1-00:00:00"}
    (change,) = plan_associations(slurmdb.associations, [entry], slurmdb.cluster)
    assert change.body == {
        "cluster": slurmdb.cluster,
        "account": "rec-child",
        "user": "alice",
        "max": {
            "jobs": {"active": {"set": True, "infinite": True, "number": 0}},
            "per": {"account": {"wall_clock": {"set": True, "infinite": False, "number": 1440}}},
        },
    }
    account = {"account": "rec", "grp_jobs": 4}
    (change,) = plan_associations(slurmdb.associations, [account], slurmdb.cluster)
    assert change.body["user"] == "", "the API needs user, also for an account's association"


def test_an_association_of_an_account_without_one_is_refused(slurmdb: Slurmdb) -> None:
    with pytest.raises(FieldError, match="account ghost has no association on cluster"):
        plan_associations(
            slurmdb.associations, [{"account": "ghost", "user": "alice"}], slurmdb.cluster
        )
