# SPDX-License-Identifier: GPL-3.0-or-later
"""Bad input to the slurmrestd modules ends in a clear message, never a traceback or a token.

Each case runs the module through ansible-playbook against the lab's real slurmrestd, or
against a small misbehaving HTTP server on 127.0.0.1 for the answers Slurm never gives
(a non-JSON page, no answer in time).
"""

from __future__ import annotations

import http.server
import re
import threading
import time
import typing as t
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_runner import run_task

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import mint_token

pytestmark = pytest.mark.integration

JWT = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")


class MisbehavingHandler(http.server.BaseHTTPRequestHandler):
    """/html/... answers an HTML page with 200; /slow/... answers nothing for 5 seconds."""

    def do_GET(self) -> None:
        if self.path.startswith("/slow/"):
            time.sleep(5)
        body = b"<html><body>proxy login required</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: t.Any) -> None:
        """Keep the test output clean."""


@pytest.fixture(scope="module")
def misbehaving_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MisbehavingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def expired_token(lab: t.Any) -> str:
    key = Path(lab.jwt_key_path).read_bytes()
    return mint_token(key, "root", 60, now=int(time.time()) - 3600)


# (id, module, args built from the lab, words the message must contain)
CASES: list[tuple[str, str, t.Callable[[t.Any, str], dict[str, t.Any]], str]] = [
    (
        "unknown node",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu99"], "state": "drain", "reason": "x"},
        "cpu99 is not a node of this Slurm cluster",
    ),
    (
        "drain without a reason",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu01"], "state": "drain"},
        "reason is required with state=drain",
    ),
    (
        "down without a reason",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu01"], "state": "down"},
        "reason is required with state=down",
    ),
    (
        "bad host list",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu[01-"], "state": "resume"},
        "names: 'cpu[01-' is not a valid host list",
    ),
    (
        "bad host list filter",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"nodes": ["cpu[3-1]"]},
        "nodes: 'cpu[3-1]' is not a valid host list",
    ),
    (
        "empty reason prefix",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu01"], "state": "resume", "reason_prefix": " "},
        "reason_prefix must not be empty",
    ),
    (
        "nothing to do",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu01"]},
        "one of the following is required: state, features, weight, comment",
    ),
    (
        "unknown state",
        "hpcops.slinky.slurm_node",
        lambda lab, _: {"names": ["cpu01"], "state": "drained"},
        "value of state must be one of: drain, resume, undrain, down, absent",
    ),
    (
        "garbage token",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"token": "garbage.token.value"},
        "rejected the token",
    ),
    (
        "expired token",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"token": expired_token(lab)},
        "rejected the token",
    ),
    (
        "missing key file",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"jwt_key_path": "/nonexistent/jwt_hs256.key"},
        "jwt_key_path '/nonexistent/jwt_hs256.key' does not exist",
    ),
    (
        "token and key together",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"token": "not-a-real-token", "jwt_key_path": str(lab.jwt_key_path)},
        "parameters are mutually exclusive: token|jwt_key_path",
    ),
    (
        "no credentials",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"jwt_key_path": None},
        "no credentials for slurmrestd",
    ),
    (
        "url without a scheme",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"url": "127.0.0.1:16820"},
        "must start with http:// or https://",
    ),
    (
        "nothing listens at the url",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"url": "http://127.0.0.1:9", "retries": 1},
        "cannot reach slurmrestd at http://127.0.0.1:9",
    ),
    (
        "unsupported pinned version",
        "hpcops.slinky.slurm_info",
        lambda lab, _: {"api_version": "v0.0.38"},
        "value of api_version must be one of: v0.0.41",
    ),
    (
        "a non-JSON answer",
        "hpcops.slinky.slurm_info",
        lambda lab, server: {"url": f"{server}/html"},
        "offers API versions none",
    ),
    (
        "a timeout",
        "hpcops.slinky.slurm_info",
        lambda lab, server: {"url": f"{server}/slow", "timeout": 1, "retries": 1},
        "did not answer GET /openapi/v3 within 1 s (2 attempts)",
    ),
]


@pytest.mark.parametrize(
    ("module", "make_args", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_input_is_a_clear_error(
    slurm_lab: t.Any, misbehaving_server: str, module: str, make_args: t.Any, expected: str
) -> None:
    case_args = make_args(slurm_lab, misbehaving_server)
    # Credentials: the lab's key, unless the case brings a token of its own.
    base = {"url": slurm_lab.url}
    if "token" not in case_args:
        base["jwt_key_path"] = str(slurm_lab.jwt_key_path)
    args = {key: value for key, value in {**base, **case_args}.items() if value is not None}
    result = run_task(module, args)
    assert result.failed, f"no failure for {args}: {result}"
    assert expected in result["msg"], result["msg"]
    assert "Traceback" not in result.output
    assert "module_stderr" not in result, result.get("module_stderr")
    # Neither a given token nor one minted from the key may show.
    assert not JWT.search(result.output), "a token is in the output"
