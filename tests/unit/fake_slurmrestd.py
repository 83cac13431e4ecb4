# SPDX-License-Identifier: GPL-3.0-or-later
"""Recorded slurmrestd answers served to the client without a network.

The JSON under fixtures/slurmrestd/<release>/<api_version>/ was recorded from the real
slurmrestd of the lab by tests/lab/record_slurmrestd.py.
"""

from __future__ import annotations

import io
import json
import typing as t
from email.message import Message
from pathlib import Path
from urllib.error import HTTPError
from urllib.parse import urlsplit

FIXTURES = Path(__file__).parent / "fixtures" / "slurmrestd"

# (release, api_version) pairs that have recordings, e.g. ("26.05", "v0.0.44").
RECORDED = sorted(
    (version_dir.parent.name, version_dir.name)
    for version_dir in FIXTURES.glob("*/v0.0.*")
    if version_dir.is_dir()
)
SUPPORTED_RECORDED = [pair for pair in RECORDED if pair[1] >= "v0.0.41"]


def recording(release: str, version: str, name: str) -> tuple[int, t.Any]:
    data = json.loads((FIXTURES / release / version / f"{name}.json").read_text())
    return data["status"], data["body"]


def openapi_document(release: str) -> dict[str, t.Any]:
    data = json.loads((FIXTURES / release / "openapi_info.json").read_text())
    return {"info": data["info"], "paths": {path: {} for path in data["paths"]}}


class FakeResponse:
    def __init__(self, status: int, body: t.Any) -> None:
        self.status = status
        self._payload = body if isinstance(body, bytes) else _encode(body)

    def getcode(self) -> int:
        return self.status

    def read(self, size: int = -1) -> bytes:
        """The body, or its next `size` bytes (a streamed read)."""
        if size < 0:
            return self._payload
        chunk, self._payload = self._payload[:size], self._payload[size:]
        return chunk


def _encode(body: t.Any) -> bytes:
    return body.encode() if isinstance(body, str) else json.dumps(body).encode()


class FakeSlurmRestd:
    """Stands in for open_url: answers from recordings, records every request.

    `routes` maps (method, path) to a list of answers used in turn (the last one repeats);
    an answer is (status, body) or an exception to raise.
    """

    def __init__(self, release: str = "26.05") -> None:
        self.release = release
        self.requests: list[dict[str, t.Any]] = []
        self.routes: dict[tuple[str, str], list[t.Any]] = {}
        self.answer("GET", "/openapi/v3", 200, openapi_document(release))

    def answer(self, method: str, path: str, status: int, body: t.Any) -> None:
        self.routes.setdefault((method, path), []).append((status, body))

    def fail(self, method: str, path: str, error: Exception) -> None:
        self.routes.setdefault((method, path), []).append(error)

    def replay(self, version: str, name: str, method: str, path: str) -> None:
        self.answer(method, f"/slurm/{version}/{path}", *recording(self.release, version, name))

    def __call__(
        self, url: str, data: bytes | None = None, method: str = "GET", **kwargs: t.Any
    ) -> FakeResponse:
        parts = urlsplit(url)
        self.requests.append(
            {
                "method": method,
                "path": parts.path,
                "query": parts.query,
                "body": json.loads(data) if data else None,
                "headers": kwargs.get("headers", {}),
            }
        )
        answers = self.routes.get((method, parts.path))
        if not answers:
            raise AssertionError(f"unexpected request {method} {parts.path}")
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        if status >= 300:
            raise HTTPError(url, status, "error", Message(), io.BytesIO(_encode(body)))
        return FakeResponse(status, body)

    def sent(self, method: str) -> list[dict[str, t.Any]]:
        return [request for request in self.requests if request["method"] == method]
