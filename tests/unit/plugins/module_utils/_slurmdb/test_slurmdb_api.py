# SPDX-License-Identifier: GPL-3.0-or-later
"""The requests the accounting modules send: paths, bodies and queries, one per call."""

from __future__ import annotations

import json
import typing as t
from urllib.parse import parse_qs

import pytest
from fake_slurmrestd import FIXTURES, FakeSlurmRestd

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    RESTART,
    Connection,
    SlurmRequestError,
    SlurmRestClient,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import (
    SlurmdbApi,
    cluster_of,
)

BASE = "/slurmdb/v0.0.45"


def api_for(fake: FakeSlurmRestd) -> SlurmdbApi:
    connection = Connection(url="http://127.0.0.1:6820", token="a-token")
    return SlurmdbApi(SlurmRestClient(connection, opener=fake, sleep=lambda _: None))


def recorded(name: str) -> t.Any:
    path = FIXTURES / "26.05" / "v0.0.45" / f"slurmdb_{name}.json"
    return json.loads(path.read_text())["body"]


def test_accounts_are_placed_under_their_parent_in_one_request() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer("POST", f"{BASE}/accounts_association/", 200, {"errors": []})
    api = api_for(fake)
    api.place_accounts(["astro", "hep"], "lab2605", "physics")
    (sent,) = fake.sent("POST")
    assert sent["body"] == {
        "association_condition": {
            "accounts": ["astro", "hep"],
            "clusters": ["lab2605"],
            "association": {"parent": "physics"},
        }
    }
    assert api.requests == 1


def test_an_association_is_removed_by_the_fields_that_name_it() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer("DELETE", f"{BASE}/association/", 200, {"errors": []})
    api_for(fake).delete_association(
        {"cluster": "lab2605", "account": "astro", "user": "alice", "partition": ""}
    )
    (sent,) = fake.sent("DELETE")
    assert parse_qs(sent["query"]) == {
        "cluster": ["lab2605"],
        "account": ["astro"],
        "user": ["alice"],
    }


def test_jobs_of_a_period_arrive_one_at_a_time() -> None:
    fake = FakeSlurmRestd("26.05")
    jobs = [{"job_id": 1}, {"job_id": 2}]
    fake.answer("GET", f"{BASE}/jobs/", 200, {"jobs": jobs, "errors": []})
    seen: list[t.Any] = []
    api_for(fake).jobs(1000.0, 2000.0, 5000.0, seen.append)
    assert [job["job_id"] for job in seen if job] == [1, 2]
    (sent,) = fake.sent("GET")[1:]  # after the API version's negotiation
    assert parse_qs(sent["query"]) == {
        "start_time": ["1000"],
        "end_time": ["2000"],
        "show_duplicates": ["true"],
        "skip_steps": ["true"],
    }


def test_a_fold_of_the_jobs_starts_over_when_a_retry_sends_them_again() -> None:
    fake = FakeSlurmRestd("26.05")
    api = api_for(fake)

    def jobs(_start: float, _end: float, _now: float, each: t.Callable[[t.Any], None]) -> None:
        for raw in ({"job_id": 1}, {"job_id": 2}, RESTART, {"job_id": 1}, {"job_id": 2}):
            each(raw)

    api.jobs = jobs  # type: ignore[method-assign]  # the stream's retry, as the client signals it
    ids, count = api.fold_jobs(0.0, 1.0, 1.0, list, lambda acc, raw: acc.append(raw["job_id"]))
    assert (ids, count) == ([1, 2], 2)


def test_the_cluster_is_the_one_slurmdbd_keeps_or_the_one_named() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer("GET", f"{BASE}/clusters/", 200, recorded("clusters"))
    api = api_for(fake)
    assert cluster_of(api, None) == "lab2605"
    assert cluster_of(api, "lab2605") == "lab2605"
    with pytest.raises(
        SlurmRequestError,
        match=r"cluster 'other' is not registered in slurmdbd \(it knows lab2605\)",
    ):
        cluster_of(api, "other")
    two = {"clusters": [{"name": "a"}, {"name": "b"}]}
    fake.routes[("GET", f"{BASE}/clusters/")] = [(200, two)]
    with pytest.raises(
        SlurmRequestError, match="slurmdbd keeps 2 clusters \\(a, b\\): set cluster"
    ):
        cluster_of(api, None)
