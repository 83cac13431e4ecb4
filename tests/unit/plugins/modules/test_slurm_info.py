# SPDX-License-Identifier: GPL-3.0-or-later
"""slurm_info's query option: a JMESPath expression per kind of item, checked up front and
applied to each item (to each job as it is read)."""

from __future__ import annotations

import json
import typing as t

import pytest
from ansible.module_utils.testing import patch_module_args
from fake_slurmrestd import FakeSlurmRestd

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import SelectionError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    SlurmRestClient,
)
from ansible_collections.hpcops.slinky.plugins.modules import slurm_info
from ansible_collections.hpcops.slinky.plugins.modules.slurm_info import (
    QUERY_KEYS,
    queried,
    queries,
)

ITEMS = [
    {"name": "cpu01", "state": "MIXED", "cpus": 2, "features": []},
    {"name": "cpu02", "state": "IDLE", "cpus": 0, "features": ["gpu"]},
    {"name": "cpu03", "state": "IDLE", "cpus": 2, "features": []},
]


def test_no_query_is_no_query() -> None:
    assert queries(None) == {}
    assert queries({}) == {}


def test_a_query_per_kind_of_item() -> None:
    found = queries({kind: "name" for kind in QUERY_KEYS})
    assert sorted(found) == sorted(QUERY_KEYS) == ["jobs", "nodes", "partitions", "reservations"]
    assert [found["nodes"](item) for item in ITEMS] == ["cpu01", "cpu02", "cpu03"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"pods": "name"},
            "query: 'pods' is not a kind of item; use nodes, jobs, partitions, reservations",
        ),
        (
            {"jobs": "name", "Nodes": "name"},
            "query: 'Nodes' is not a kind of item; use nodes, jobs, partitions, reservations",
        ),
        ({"jobs": 5}, "query.jobs: give a JMESPath expression as a string"),
        ({"nodes": ""}, "query.nodes: give a JMESPath expression as a string"),
        ({"partitions": "   "}, "query.partitions: give a JMESPath expression as a string"),
        ({"reservations": ["name"]}, "query.reservations: give a JMESPath expression as a string"),
        ({"jobs": None}, "query.jobs: give a JMESPath expression as a string"),
    ],
)
def test_a_bad_query_names_its_key(raw: dict[str, t.Any], message: str) -> None:
    with pytest.raises(SelectionError) as err:
        queries(raw)
    assert str(err.value) == message


def test_a_bad_expression_names_its_key() -> None:
    with pytest.raises(SelectionError, match=r"^query\.partitions: 'name ==' is not a JMESPath"):
        queries({"nodes": "name", "partitions": "name =="})


def test_queried_without_a_query_is_the_items_themselves() -> None:
    assert queried(ITEMS, None) is ITEMS


def test_queried_leaves_out_null_and_false_only() -> None:
    idle = queries({"nodes": "state == 'IDLE' && {name: name, cpus: cpus}"})["nodes"]
    assert queried(ITEMS, idle) == [{"name": "cpu02", "cpus": 0}, {"name": "cpu03", "cpus": 2}]
    # A value that is empty or zero is kept: only null and false leave an item out.
    assert queried(ITEMS, queries({"nodes": "cpus"})["nodes"]) == [2, 0, 2]
    assert queried(ITEMS, queries({"nodes": "features"})["nodes"]) == [[], ["gpu"], []]
    assert queried(ITEMS, queries({"nodes": "missing"})["nodes"]) == []


# ---- the module, against the recorded 26.05 slurmrestd ------------------------------------


def run_module(
    args: dict[str, t.Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, dict[str, t.Any], FakeSlurmRestd]:
    fake = FakeSlurmRestd("26.05")
    for name, path in [("jobs", "jobs/"), ("nodes", "nodes/"), ("partitions", "partitions/")]:
        fake.replay("v0.0.45", name, "GET", path)

    def client(module: t.Any, token_source: t.Any = None) -> SlurmRestClient:
        connection = Connection(url="http://127.0.0.1:6820", token="a-token", retries=0)
        return SlurmRestClient(connection, opener=fake, sleep=lambda _: None)

    monkeypatch.setattr(slurm_info, "slurm_client", client)
    with (
        patch_module_args({"url": "http://127.0.0.1:6820", "token": "a-token", **args}),
        pytest.raises(SystemExit) as exited,
    ):
        slurm_info.main()
    return int(exited.value.code or 0), json.loads(capsys.readouterr().out), fake


def test_the_module_applies_each_query(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, _output = run_module(
        {
            "gather": ["jobs", "nodes", "partitions"],
            "query": {
                "jobs": "state == 'PENDING' && {id: job_id, reason: state_reason, hold: hold}",
                "nodes": "state == 'IDLE' && name",
                "partitions": "{name: name, max_time: max_time}",
            },
        },
        monkeypatch,
        capsys,
    )
    assert code == 0
    assert result["jobs"] == [{"id": 2, "reason": "JobHeldUser", "hold": True}]
    assert result["nodes"] == ["cpu02", "cpu03"]
    assert result["partitions"] == [
        {"name": "batch", "max_time": "infinite"},
        {"name": "backfill", "max_time": 240},
    ]
    assert result["api_version"] == "v0.0.45"


def test_the_filters_come_before_the_query(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, _output = run_module(
        {"gather": ["jobs"], "partitions": ["batch"], "query": {"jobs": "job_id"}},
        monkeypatch,
        capsys,
    )
    assert (code, result["jobs"]) == (0, [1])
    code, result, _output = run_module(
        {"gather": ["jobs"], "job_states": ["pending"]}, monkeypatch, capsys
    )
    assert [job["job_id"] for job in result["jobs"]] == [2]
    assert result["jobs"][0]["state_reason"] == "JobHeldUser"


def test_a_bad_query_fails_before_any_read(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, fake = run_module(
        {"gather": ["jobs"], "query": {"job": "job_id"}}, monkeypatch, capsys
    )
    assert code == 1
    assert result["failed"] is True
    assert result["msg"] == (
        "query: 'job' is not a kind of item; use nodes, jobs, partitions, reservations"
    )
    assert fake.requests == []


def test_a_node_query_that_fails_on_an_item_names_query_nodes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, _output = run_module(
        {"gather": ["nodes"], "query": {"nodes": "length(cpus)"}}, monkeypatch, capsys
    )
    assert code == 1
    assert result["msg"].startswith("query.nodes: 'length(cpus)' fails on an item: In function")


def test_a_job_query_that_fails_on_an_item_names_query_jobs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, result, _output = run_module(
        {"gather": ["jobs"], "query": {"jobs": "length(job_id)"}}, monkeypatch, capsys
    )
    assert code == 1
    assert result["msg"].startswith("query.jobs: 'length(job_id)' fails on an item: In function")
