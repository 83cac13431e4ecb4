# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurmrestd client against answers recorded from real Slurm 24.11 and 26.05."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import typing as t
from email.message import Message
from io import BytesIO
from urllib.error import HTTPError, URLError

import pytest
from fake_slurmrestd import (
    SUPPORTED_RECORDED,
    FakeSlurmRestd,
    openapi_document,
    recording,
)

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.jwt import token_expiry
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    INFINITE,
    SUPPORTED_API_VERSIONS,
    Connection,
    SlurmApiVersionError,
    SlurmAuthError,
    SlurmConnectionError,
    SlurmRequestError,
    SlurmRestClient,
    SlurmRestError,
    choose_api_version,
    mint_token,
    normalize_job,
    normalize_node,
    normalize_partition,
    normalize_ping,
    offered_versions,
    plain_number,
    read_jwt_key,
)

KEY = b"0123456789abcdef0123456789abcdef"


def _b64decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def client_for(fake: FakeSlurmRestd, **options: object) -> SlurmRestClient:
    connection = Connection(url="http://127.0.0.1:6820", token="a-token", **options)  # type: ignore[arg-type]
    return SlurmRestClient(connection, opener=fake, sleep=lambda _: None)


# -- tokens ---------------------------------------------------------------------------


def test_mint_token_is_hs256_with_slurm_claims() -> None:
    token = mint_token(KEY, "alice", 300, now=1_000_000)
    header, claims, signature = token.split(".")
    assert json.loads(_b64decode(header)) == {"alg": "HS256", "typ": "JWT"}
    assert json.loads(_b64decode(claims)) == {"sun": "alice", "iat": 1_000_000, "exp": 1_000_300}
    expected = hmac.new(KEY, f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert _b64decode(signature) == expected


@pytest.mark.parametrize(("key", "lifespan", "message"), [(b"", 60, "empty"), (KEY, 0, "positive")])
def test_mint_token_rejects_bad_input(key: bytes, lifespan: int, message: str) -> None:
    with pytest.raises(SlurmAuthError, match=message):
        mint_token(key, "root", lifespan)


def test_read_jwt_key_names_the_missing_path(tmp_path) -> None:  # type: ignore[no-untyped-def]
    missing = tmp_path / "jwt_hs256.key"
    with pytest.raises(SlurmAuthError, match=r"jwt_key_path '.*jwt_hs256.key' does not exist"):
        read_jwt_key(str(missing))


def test_minted_token_is_sent_and_reported_for_no_log(secret_dir) -> None:  # type: ignore[no-untyped-def]
    key_file = secret_dir / "jwt.key"
    key_file.write_bytes(KEY)
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "ping", "GET", "ping/")
    seen: list[str] = []
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", jwt_key_path=str(key_file), user="slurm"),
        opener=fake,
        on_new_token=seen.append,
    )
    client.ping()
    assert len(seen) == 1
    headers = fake.requests[-1]["headers"]
    assert headers["X-SLURM-USER-TOKEN"] == seen[0]
    assert headers["X-SLURM-USER-NAME"] == "slurm"
    claims = json.loads(_b64decode(seen[0].split(".")[1]))
    assert claims["sun"] == "slurm"
    assert claims["exp"] - claims["iat"] == 300


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": ""}, "url is required"),
        ({"url": "slurmrestd:6820", "token": "t"}, "must start with http:// or https://"),
        ({"url": "http://x", "token": "t", "jwt_key_path": "/k"}, "not both"),
        ({"url": "http://x"}, "no credentials"),
    ],
)
def test_connection_options_are_checked(options: dict[str, str], message: str) -> None:
    with pytest.raises(SlurmRestError, match=message):
        Connection(**options)  # type: ignore[arg-type]


# -- API versions ---------------------------------------------------------------------


def test_offered_versions_of_the_real_servers() -> None:
    assert offered_versions(openapi_document("26.05")) == [
        "v0.0.42",
        "v0.0.43",
        "v0.0.44",
        "v0.0.45",
    ]
    # 24.11 has no info["x-slurm"]; the versions come from the path keys.
    assert offered_versions(openapi_document("24.11")) == ["v0.0.40", "v0.0.41", "v0.0.42"]


def test_choose_the_newest_common_version() -> None:
    assert choose_api_version(["v0.0.40", "v0.0.41", "v0.0.42"]) == "v0.0.42"
    assert choose_api_version(["v0.0.42", "v0.0.45", "v0.0.46"]) == "v0.0.45"


def test_a_pin_the_server_lacks_lists_what_it_offers() -> None:
    with pytest.raises(SlurmApiVersionError) as err:
        choose_api_version(["v0.0.40", "v0.0.41", "v0.0.42"], "v0.0.44")
    assert "it offers v0.0.40, v0.0.41, v0.0.42" in str(err.value)


def test_a_pin_the_collection_lacks_lists_the_supported_versions() -> None:
    with pytest.raises(
        SlurmApiVersionError, match=r"v0\.0\.41, v0\.0\.42, v0\.0\.43, v0\.0\.44, v0\.0\.45"
    ):
        choose_api_version(["v0.0.40"], "v0.0.40")


def test_no_common_version_says_to_upgrade() -> None:
    with pytest.raises(SlurmApiVersionError, match="upgrade Slurm"):
        choose_api_version(["v0.0.37", "v0.0.38"])


def test_client_negotiates_once() -> None:
    fake = FakeSlurmRestd("24.11")
    fake.replay("v0.0.42", "nodes", "GET", "nodes/")
    client = client_for(fake)
    client.nodes()
    client.nodes()
    assert client.api_version == "v0.0.42"
    assert [request["path"] for request in fake.requests].count("/openapi/v3") == 1


# -- one shape for every version --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"set": True, "infinite": False, "number": 240}, 240),
        ({"set": False, "infinite": True, "number": 0}, INFINITE),
        ({"set": False, "infinite": False, "number": 0}, None),
        (7, 7),
        ("x", "x"),
    ],
)
def test_plain_number(value: object, expected: object) -> None:
    assert plain_number(value) == expected


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_nodes_have_one_shape(release: str, version: str) -> None:
    status, body = recording(release, version, "nodes")
    assert status == 200
    nodes = {node["name"]: node for node in map(normalize_node, body["nodes"])}
    assert sorted(nodes) == ["cpu01", "cpu02", "cpu03"]
    # The recording drained cpu03, ran a job on cpu01 and left cpu02 idle.
    drained = nodes["cpu03"]
    assert (drained["state"], drained["state_flags"], drained["drain_state"]) == (
        "IDLE",
        ["DRAIN"],
        "drained",
    )
    assert drained["reason"] == "hpcops: reclaim test"
    assert nodes["cpu01"]["state"] in ("ALLOCATED", "MIXED")
    assert nodes["cpu01"]["mcs_label"] == "tenantA"
    assert nodes["cpu02"]["state"] == "IDLE" and nodes["cpu02"]["drain_state"] is None
    assert nodes["cpu02"]["partitions"] == ["batch", "backfill"]
    assert isinstance(nodes["cpu02"]["cpus"], int) and isinstance(nodes["cpu02"]["boot_time"], int)
    reference = normalize_node(recording("26.05", "v0.0.45", "nodes")[1]["nodes"][0])
    assert set(drained) == set(reference)


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_jobs_have_one_shape(release: str, version: str) -> None:
    jobs = [normalize_job(job) for job in recording(release, version, "jobs")[1]["jobs"]]
    running = next(job for job in jobs if job["state"] == "RUNNING")
    pending = next(job for job in jobs if job["state"] == "PENDING")
    assert running["nodes"] == "cpu01" and running["requeue"] is True
    assert running["mcs_label"] == "tenantA" and running["user_name"] == "alice"
    assert running["time_limit"] == INFINITE
    assert pending["partition"] == "backfill" and pending["time_limit"] == 240
    assert pending["nodes"] == ""


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_partitions_have_one_shape(release: str, version: str) -> None:
    partitions = {
        partition["name"]: partition
        for partition in map(
            normalize_partition, recording(release, version, "partitions")[1]["partitions"]
        )
    }
    assert partitions["backfill"]["priority_tier"] == 1
    assert partitions["backfill"]["max_time"] == 240
    assert partitions["backfill"]["grace_time"] == 30
    assert partitions["batch"]["priority_tier"] == 10
    assert partitions["batch"]["nodes"] == "cpu[01-03]"
    assert partitions["batch"]["state"] == "UP"


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_ping_says_responding(release: str, version: str) -> None:
    pings = normalize_ping(recording(release, version, "ping")[1])
    assert [ping["responding"] for ping in pings] == [True]
    assert pings[0]["mode"] == "primary"


# -- errors and retries ---------------------------------------------------------------


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_unknown_node_is_none(release: str, version: str) -> None:
    fake = FakeSlurmRestd(release)
    fake.replay(version, "node_missing", "GET", "node/cpu99")
    assert client_for(fake, api_version=version).node("cpu99") is None


@pytest.mark.parametrize("name", ["unauthenticated", "unauthorized"])
@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_rejected_tokens_raise_auth_errors(release: str, version: str, name: str) -> None:
    fake = FakeSlurmRestd(release)
    fake.replay(version, name, "GET", "nodes/")
    with pytest.raises(SlurmAuthError) as err:
        client_for(fake, api_version=version).nodes()
    assert "mint a new one" in str(err.value)
    assert "a-token" not in str(err.value)
    assert len(fake.sent("GET")) == 2  # openapi and one try: auth errors are not retried


def test_5xx_is_retried_with_backoff_then_succeeds() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer("GET", "/slurm/v0.0.45/ping/", 503, "busy")
    fake.answer("GET", "/slurm/v0.0.45/ping/", 502, {"errors": [{"description": "no controller"}]})
    fake.replay("v0.0.45", "ping", "GET", "ping/")
    delays: list[float] = []
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="t", backoff=0.5),
        opener=fake,
        sleep=delays.append,
    )
    assert client.ping()[0]["responding"] is True
    assert delays == [0.5, 1.0]


def test_retries_are_bounded() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer(
        "GET",
        "/slurm/v0.0.45/ping/",
        502,
        {"errors": [{"description": "Unable to contact slurm controller"}]},
    )
    with pytest.raises(SlurmRequestError) as err:
        client_for(fake, retries=2).ping()
    assert "HTTP 502" in str(err.value) and "Unable to contact slurm controller" in str(err.value)
    assert len(fake.sent("GET")) == 1 + 3


def test_connection_errors_are_retried_then_explained() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.fail(
        "GET", "/slurm/v0.0.45/ping/", URLError(ConnectionRefusedError(111, "Connection refused"))
    )
    fake.routes[("GET", "/openapi/v3")] = [URLError(TimeoutError("timed out"))]
    with pytest.raises(SlurmConnectionError) as err:
        client_for(fake, retries=1).ping()
    assert str(err.value).startswith(
        "slurmrestd at http://127.0.0.1:6820 did not answer GET /openapi/v3 within 30 s "
        "(2 attempts); check that slurmrestd and slurmctld behind it run"
    )
    fake.routes[("GET", "/openapi/v3")] = [URLError(ConnectionRefusedError(111, "refused"))]
    with pytest.raises(SlurmConnectionError) as err:
        client_for(fake, retries=1).ping()
    assert "cannot reach slurmrestd at http://127.0.0.1:6820" in str(err.value)
    assert "after 2 attempts" in str(err.value)


def test_a_thread_may_wait_less_than_the_connection_timeout() -> None:
    """A handover step near its deadline asks for a shorter wait (PatientSlurm.attach)."""
    seen: list[float] = []

    def opener(url: str, **kwargs: t.Any) -> t.Any:
        seen.append(kwargs["timeout"])
        raise URLError(TimeoutError("timed out"))

    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token="t", api_version="v0.0.45", retries=0),
        opener=opener,
    )
    client.timeout_for = lambda: 4.0
    with pytest.raises(
        SlurmConnectionError, match=r"did not answer GET \S+ within 4 s \(1 attempt\)"
    ):
        client.ping()
    client.timeout_for = lambda: None
    with pytest.raises(SlurmConnectionError, match="within 30 s"):
        client.ping()
    assert seen == [4.0, 30.0]


def test_errors_in_a_200_answer_are_raised() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer(
        "POST",
        "/slurm/v0.0.45/node/cpu01",
        200,
        {"errors": [{"description": "Invalid node state specified", "source": "update_node"}]},
    )
    with pytest.raises(SlurmRequestError, match=r"Invalid node state specified \(update_node\)"):
        client_for(fake).update_node("cpu01", {"state": ["BOGUS"]})


def test_retry_after_is_honoured() -> None:
    headers = Message()
    headers["Retry-After"] = "7"
    fake = FakeSlurmRestd("26.05")
    fake.fail(
        "GET", "/slurm/v0.0.45/ping/", HTTPError("u", 429, "slow down", headers, BytesIO(b""))
    )
    fake.replay("v0.0.45", "ping", "GET", "ping/")
    delays: list[float] = []
    client = SlurmRestClient(
        Connection(url="http://h:1", token="t"), opener=fake, sleep=delays.append
    )
    client.ping()
    assert delays == [7.0]


def test_supported_versions_are_the_documented_ones() -> None:
    assert SUPPORTED_API_VERSIONS == ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


# -- tokens from a source that renews them ------------------------------------------------


def test_a_rejected_token_is_read_again_from_its_source() -> None:
    """A Slinky Token's Secret is renewed by the operator: a token that expired mid-run is
    read again once, and the request goes through with the new one."""
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "unauthenticated", "GET", "nodes/")
    fake.replay("v0.0.45", "nodes", "GET", "nodes/")
    tokens = iter(["expired-token", "renewed-token"])
    seen: list[str] = []
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token_source=lambda: next(tokens)),
        opener=fake,
        sleep=lambda _: None,
        on_new_token=seen.append,
    )
    assert client.nodes()
    sent = [r["headers"]["X-SLURM-USER-TOKEN"] for r in fake.sent("GET")]
    assert sent == ["expired-token", "expired-token", "renewed-token"]
    assert seen == ["expired-token", "renewed-token"]  # both kept out of the logs


def test_a_source_that_gives_the_same_token_again_fails_as_before() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.replay("v0.0.45", "unauthenticated", "GET", "nodes/")
    client = SlurmRestClient(
        Connection(url="http://127.0.0.1:6820", token_source=lambda: "stale-token"),
        opener=fake,
        sleep=lambda _: None,
    )
    with pytest.raises(SlurmAuthError, match="rejected the token"):
        client.nodes()
    assert len(fake.sent("GET")) == 2  # openapi and one try: the same token is not sent again


def test_token_expiry_reads_the_exp_claim() -> None:
    assert token_expiry(mint_token(KEY, "root", 300, now=1_000_000)) == 1_000_300
    assert token_expiry("not-a-jwt") is None
    assert token_expiry("a.!!!.c") is None
    unsigned = base64.urlsafe_b64encode(b'{"sun":"slurm"}').decode().rstrip("=")
    assert token_expiry(f"x.{unsigned}.y") is None


def test_a_read_that_needs_slurmdbd_while_it_is_gone_names_slurmdbd() -> None:
    # Recorded on Slurm 26.05 with accounting (tests/integration/test_slinky_upgrade.py):
    # GET partitions while slurmdbd's port refused connections.
    fake = FakeSlurmRestd("26.05")
    error = {
        "description": "Slurmdb query failed",
        "error_number": 111,
        "error": "Connection refused",
        "source": "slurmdb_tres_get",
    }
    fake.answer("GET", "/slurm/v0.0.45/partitions/", 500, {"partitions": [], "errors": [error]})
    with pytest.raises(SlurmRequestError) as err:
        client_for(fake, retries=0).request("GET", "/slurm/v0.0.45/partitions/")
    said = str(err.value)
    assert "HTTP 500 because slurmdbd does not answer it" in said
    assert "Slurmdb query failed (slurmdb_tres_get)" in said
    assert "start them (the slurmdbd pod, app.kubernetes.io/name=slurmdbd" in said
    assert "slurmctld is up" not in said
