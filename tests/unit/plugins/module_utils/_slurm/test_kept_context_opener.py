# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurmrestd client's default opener: open_url's requests, one TLS context kept."""

from __future__ import annotations

import json
import threading
import typing as t
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm import rest
from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    Connection,
    KeptContextOpener,
    SlurmRestClient,
)


class Answers(BaseHTTPRequestHandler):
    """Answers every GET with the headers it was sent."""

    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "user": self.headers["X-SLURM-USER-NAME"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: t.Any) -> None:
        pass


@pytest.fixture
def server() -> t.Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def test_requests_share_one_context_per_validation_setting(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[tuple[str | None, bool]] = []
    real = rest.make_context

    def counting(cafile: str | None = None, validate_certs: bool = True, **kwargs: t.Any) -> t.Any:
        made.append((cafile, validate_certs))
        return real(cafile=cafile, validate_certs=validate_certs, **kwargs)

    monkeypatch.setattr(rest, "make_context", counting)
    opener = KeptContextOpener()
    for _request in range(3):
        response = opener(f"{server}/ping", method="GET", headers={"X-SLURM-USER-NAME": "u"})
        assert json.loads(response.read()) == {"path": "/ping", "user": "u"}
    opener(f"{server}/ping", method="GET", validate_certs=False, headers={})
    assert made == [(None, True), (None, False)]


def test_the_client_sends_its_requests_through_it(server: str) -> None:
    client = SlurmRestClient(Connection(url=server, token="a-token", user="slurm"))
    assert isinstance(client._open, KeptContextOpener)
    assert client.request("GET", "/slurm/v0.0.42/ping") == {
        "path": "/slurm/v0.0.42/ping",
        "user": "slurm",
    }
