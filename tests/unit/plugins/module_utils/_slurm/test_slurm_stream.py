# SPDX-License-Identifier: GPL-3.0-or-later
"""Long job lists read as they arrive (stream_list, SlurmRestClient.jobs), against bodies cut
in tiny pieces, cut short, and the answers recorded from real Slurm 24.11 and 26.05."""

from __future__ import annotations

import json
import socket
import threading
import typing as t

import pytest
from fake_slurmrestd import SUPPORTED_RECORDED, FakeSlurmRestd, openapi_document, recording

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm import rest
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.query import (
    SelectionError,
    item_query,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    RESTART,
    Connection,
    SlurmConnectionError,
    SlurmRequestError,
    SlurmRestClient,
    normalize_job,
    stream_list,
)

JOBS_PATH = "/slurm/v0.0.45/jobs/"
JOBS_URL = f"http://127.0.0.1:6820{JOBS_PATH}"

BODY: dict[str, t.Any] = {
    "meta": {"plugin": {"type": "openapi/slurmctld"}},
    "warnings": [{"description": "a warning", "source": "test"}],
    "jobs": [
        {"job_id": i, "name": f"job {i}", "ratio": i + 0.5, "nested": {"list": [i, [i]]}}
        for i in range(1, 6)
    ],
    "errors": [],
    "last_update": {"set": True, "infinite": False, "number": 1795318550},
    "last_backfill": {"set": True, "infinite": False, "number": 1795318540},
}
PAYLOAD = json.dumps(BODY).encode()
# The body's other members, read as they come.
MEMBERS = {key: value for key, value in BODY.items() if key != "jobs"}


class SevenBytes:
    """A response that gives at most 7 bytes a read, whatever size is asked for."""

    def __init__(self, payload: bytes) -> None:
        self._payload = payload
        self.reads = 0

    def read(self, size: int = -1) -> bytes:
        self.reads += 1
        chunk, self._payload = self._payload[:7], self._payload[7:]
        return chunk


def streamed(payload: bytes) -> tuple[dict[str, t.Any], list[t.Any]]:
    seen: list[t.Any] = []
    return stream_list(SevenBytes(payload), "jobs", seen.append), seen


def test_items_in_tiny_chunks_come_in_order_after_a_restart() -> None:
    response = SevenBytes(PAYLOAD)
    seen: list[t.Any] = []
    body = stream_list(response, "jobs", seen.append)
    assert seen[0] is RESTART
    assert seen[1:] == BODY["jobs"]
    assert body == MEMBERS  # the list left out
    assert response.reads == -(-len(PAYLOAD) // 7)  # every chunk; the last brace ends it


def test_numbers_stay_plain_floats_and_ints() -> None:
    _body, seen = streamed(PAYLOAD)
    assert [type(job["ratio"]) for job in seen[1:]] == [float] * 5
    assert [type(job["job_id"]) for job in seen[1:]] == [int] * 5


def test_a_small_stream_chunk_reads_the_fake_in_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rest, "STREAM_CHUNK", 3)
    fake = FakeSlurmRestd("26.05")
    fake.answer("GET", JOBS_PATH, 200, BODY)
    seen: list[t.Any] = []
    body = client_for(fake).request("GET", JOBS_PATH, stream=("jobs", seen.append))
    assert seen == [RESTART, *BODY["jobs"]]
    assert body == MEMBERS


class FakeBody:
    """A response that reads whole, or `size` bytes at a time."""

    def __init__(self, payload: bytes) -> None:
        self._payload = payload

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            size = len(self._payload)
        chunk, self._payload = self._payload[:size], self._payload[size:]
        return chunk


def test_a_whole_read_gives_the_same() -> None:
    seen: list[t.Any] = []
    body = stream_list(FakeBody(PAYLOAD), "jobs", seen.append)
    assert seen == [RESTART, *BODY["jobs"]]
    assert body == MEMBERS


def test_a_body_without_the_list_gives_no_item() -> None:
    seen: list[t.Any] = []
    body = stream_list(FakeBody(b'{"errors": [], "warnings": []}'), "jobs", seen.append)
    assert (body, seen) == ({"errors": [], "warnings": []}, [RESTART])


CUTS = {
    "last-brace": PAYLOAD[:-1],
    "after-the-list": PAYLOAD[: PAYLOAD.index(b'"errors"')],
    "mid-item": PAYLOAD[: PAYLOAD.index(b'"job 3"')],
    "one-byte": PAYLOAD[:1],
}


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_truncated_body_is_a_value_error(cut: bytes) -> None:
    with pytest.raises(ValueError):
        stream_list(FakeBody(cut), "jobs", lambda _: None)


@pytest.mark.parametrize("cut", CUTS.values(), ids=CUTS.keys())
def test_a_truncated_body_in_tiny_chunks_is_a_value_error(cut: bytes) -> None:
    with pytest.raises(ValueError, match=r"^it ends "):
        streamed(cut)


def test_items_before_the_cut_were_given_already() -> None:
    """Which is why the client drops what it kept when stream_list raises."""
    seen: list[t.Any] = []
    with pytest.raises(ValueError):
        stream_list(SevenBytes(CUTS["mid-item"]), "jobs", seen.append)
    assert seen == [RESTART, *BODY["jobs"][:2]]


@pytest.mark.parametrize("payload", [b"<html>502 Bad Gateway</html>", b'{"jobs": [1, 2'])
def test_a_body_that_is_not_json_is_a_value_error(payload: bytes) -> None:
    with pytest.raises(ValueError):
        stream_list(FakeBody(payload), "jobs", lambda _: None)


# ---- through the client -------------------------------------------------------------------


def client_for(fake: t.Any, **options: t.Any) -> SlurmRestClient:
    connection = Connection(
        url="http://127.0.0.1:6820", token="a-token", **{"api_version": "v0.0.45", **options}
    )
    return SlurmRestClient(connection, opener=fake, sleep=lambda _: None)


def recorded_jobs_fake(release: str, version: str) -> FakeSlurmRestd:
    fake = FakeSlurmRestd(release)
    fake.replay(version, "jobs", "GET", "jobs/")
    return fake


@pytest.mark.parametrize(("release", "version"), SUPPORTED_RECORDED)
def test_recorded_jobs_are_the_same_streamed(
    release: str, version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _status, body = recording(release, version, "jobs")
    expected = [normalize_job(job) for job in body["jobs"]]
    assert [job["state"] for job in expected] == ["RUNNING", "PENDING"]
    client = client_for(recorded_jobs_fake(release, version), api_version=version)
    assert client.jobs() == expected
    monkeypatch.setattr(rest, "STREAM_CHUNK", 16)
    client = client_for(recorded_jobs_fake(release, version), api_version=version)
    assert client.jobs() == expected


def test_keep_keeps_only_what_it_returns() -> None:
    fake = recorded_jobs_fake("26.05", "v0.0.45")
    seen: list[int] = []

    def keep(job: dict[str, t.Any]) -> t.Any:
        seen.append(job["job_id"])
        return {"id": job["job_id"], "user": job["user_name"]} if job["hold"] else None

    assert client_for(fake).jobs(keep) == [{"id": 2, "user": "bob"}]
    assert seen == [1, 2]  # each job given once, normalised
    assert client_for(fake).jobs(lambda job: None) == []
    assert client_for(fake).jobs(lambda job: job["job_id"]) == [1, 2]


def test_an_item_query_as_keep() -> None:
    fake = recorded_jobs_fake("26.05", "v0.0.45")
    query = item_query("state == 'PENDING' && {id: job_id, reason: state_reason}", "query.jobs")
    assert client_for(fake).jobs(query) == [{"id": 2, "reason": "JobHeldUser"}]


def test_errors_in_a_streamed_200_answer_are_raised() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer(
        "GET",
        JOBS_PATH,
        200,
        {
            "jobs": [],
            "errors": [{"description": "Unable to query jobs", "source": "slurm_load_jobs"}],
        },
    )
    with pytest.raises(SlurmRequestError) as err:
        client_for(fake).jobs()
    assert str(err.value) == (
        f"slurmrestd refused GET {JOBS_URL}: Unable to query jobs (slurm_load_jobs)"
    )
    assert err.value.status == 200
    assert err.value.errors == [
        {"description": "Unable to query jobs", "source": "slurm_load_jobs"}
    ]
    assert len(fake.sent("GET")) == 2  # openapi and one try: not retried


def test_a_truncated_answer_is_a_request_error_not_partial_jobs() -> None:
    _status, body = recording("26.05", "v0.0.45", "jobs")
    payload = json.dumps(body).encode()
    fake = FakeSlurmRestd("26.05")
    # Cut after the first job went by.
    fake.answer("GET", JOBS_PATH, 200, payload[: payload.index(b'"hpcops-pending"')])
    kept: list[t.Any] = []
    with pytest.raises(SlurmRequestError) as err:
        kept = client_for(fake).jobs()
    assert kept == []
    assert str(err.value).startswith(
        f"slurmrestd's answer to GET {JOBS_URL} is not JSON or was cut short ("
    )
    assert str(err.value).endswith(
        "); check slurmrestd's log, and that no proxy between cuts long answers"
    )
    assert err.value.status == 200


def test_a_5xx_before_the_stream_is_retried_and_the_items_come_once() -> None:
    fake = FakeSlurmRestd("26.05")
    fake.answer("GET", JOBS_PATH, 503, {"errors": [{"description": "busy"}]})
    fake.replay("v0.0.45", "jobs", "GET", "jobs/")
    assert [job["job_id"] for job in client_for(fake).jobs()] == [1, 2]
    assert len(fake.sent("GET")) == 3


class CutThenReset:
    """The first `keep` bytes of a body, then the connection is reset."""

    def __init__(self, payload: bytes, keep: int, error: Exception) -> None:
        self._payload = payload[:keep]
        self._error = error

    def getcode(self) -> int:
        return 200

    def read(self, size: int = -1) -> bytes:
        if not self._payload:
            raise self._error
        chunk, self._payload = self._payload[:size], self._payload[size:]
        return chunk


def cut_once(fake: FakeSlurmRestd, error: Exception) -> t.Callable[..., t.Any]:
    """An opener whose first answer to GET jobs/ breaks off after the first job."""
    _status, body = recording("26.05", "v0.0.45", "jobs")
    payload = json.dumps(body).encode()
    cuts = [CutThenReset(payload, payload.index(b'"hpcops-pending"'), error)]

    def opener(url: str, **kwargs: t.Any) -> t.Any:
        if url.endswith("/jobs/") and cuts:
            fake.requests.append({"method": "GET", "path": JOBS_PATH})
            return cuts.pop()
        return fake(url, **kwargs)

    return opener


def test_a_stream_reset_midway_is_retried_from_the_first_item() -> None:
    fake = recorded_jobs_fake("26.05", "v0.0.45")
    opener = cut_once(fake, ConnectionResetError(104, "Connection reset by peer"))
    seen: list[int] = []

    def keep(job: dict[str, t.Any]) -> t.Any:
        seen.append(job["job_id"])
        return job["job_id"]

    assert client_for(opener).jobs(keep) == [1, 2]
    assert seen == [1, 1, 2]  # job 1 before the reset, then both again
    assert [r["path"] for r in fake.sent("GET")] == ["/openapi/v3", JOBS_PATH, JOBS_PATH]


def test_a_stream_reset_with_no_retry_left_is_a_connection_error() -> None:
    fake = recorded_jobs_fake("26.05", "v0.0.45")
    opener = cut_once(fake, ConnectionResetError(104, "Connection reset by peer"))
    with pytest.raises(rest.SlurmConnectionError, match="after 1 attempt;"):
        client_for(opener, retries=0).jobs()


def test_an_error_of_keep_is_not_blamed_on_slurmrestd() -> None:
    fake = recorded_jobs_fake("26.05", "v0.0.45")
    query = item_query("length(job_id)", "query.jobs")
    with pytest.raises(SelectionError, match=r"^query\.jobs: 'length\(job_id\)' fails on an item"):
        client_for(fake).jobs(query)


def serve(jobs_answer: bytes) -> tuple[str, threading.Thread]:
    """A real HTTP server on localhost: it answers GET /openapi/v3 (26.05's versions), then
    GET jobs/ with `jobs_answer` (status line, header fields and body), closing each
    connection after its answer."""
    server = socket.create_server(("127.0.0.1", 0))
    openapi = json.dumps(openapi_document("26.05")).encode()
    answers = [
        (
            b"GET /openapi/v3 ",
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(openapi) + openapi,
        ),
        (b"GET /slurm/v0.0.45/jobs/ ", jobs_answer),
    ]

    def answer() -> None:
        with server:
            for request_line, response in answers:
                connection, _address = server.accept()
                with connection:
                    request = connection.recv(65536)
                    assert request.startswith(request_line), request[:80]
                    connection.sendall(response)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{server.getsockname()[1]}", thread


def real_jobs(fields: bytes, body: bytes) -> list[t.Any]:
    """GET jobs/ through the client's real transport (open_url), answered with `body`."""
    url, thread = serve(b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n" + body)
    client = SlurmRestClient(
        Connection(url=url, token="t", api_version="v0.0.45", retries=0, timeout=10)
    )
    try:
        return client.jobs()
    finally:
        thread.join(10)


RECORDED_PAYLOAD = json.dumps(recording("26.05", "v0.0.45", "jobs")[1]).encode()
# Cut after the first job (the running one) went by.
RECORDED_CUT = RECORDED_PAYLOAD[: RECORDED_PAYLOAD.index(b'"hpcops-pending"')]


def test_a_real_answer_is_streamed_whole() -> None:
    jobs = real_jobs(b"Content-Length: %d\r\n" % len(RECORDED_PAYLOAD), RECORDED_PAYLOAD)
    assert jobs == [normalize_job(job) for job in recording("26.05", "v0.0.45", "jobs")[1]["jobs"]]
    chunked = b"%x\r\n" % len(RECORDED_PAYLOAD) + RECORDED_PAYLOAD + b"\r\n0\r\n\r\n"
    assert real_jobs(b"Transfer-Encoding: chunked\r\n", chunked) == jobs


@pytest.mark.parametrize(
    "fields",
    [b"Connection: close\r\n", b"Content-Length: %d\r\n" % len(RECORDED_PAYLOAD)],
    ids=["no-length", "content-length"],
)
def test_a_real_answer_cut_short_is_a_request_error(fields: bytes) -> None:
    with pytest.raises(SlurmRequestError, match="is not JSON or was cut short"):
        real_jobs(fields, RECORDED_CUT)


def test_a_real_chunked_answer_cut_short_is_a_connection_error() -> None:
    # http.client raises IncompleteRead: a connection cut, retried like one (retries=0 here).
    body = b"%x\r\n" % len(RECORDED_CUT) + RECORDED_CUT + b"\r\n"  # no last chunk
    with pytest.raises(SlurmConnectionError, match="IncompleteRead"):
        real_jobs(b"Transfer-Encoding: chunked\r\n", body)
