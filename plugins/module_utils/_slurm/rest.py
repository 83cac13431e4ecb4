# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's one slurmrestd client.

PRIVATE to the collection: names here can change without notice. Modules and plugins use
`SlurmRestClient` for I/O; everything that turns slurmrestd's JSON into one shape for all
API versions (v0.0.41 to v0.0.45) is a pure function below it, so it can be tested on
recorded responses.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import hmac
import json
import re
import time
import typing as t
from dataclasses import dataclass
from http.client import IncompleteRead
from urllib.error import HTTPError, URLError
from urllib.parse import quote, urlencode

from ansible.module_utils.urls import Request, make_context

# API versions this collection understands, oldest first. slurmrestd 24.11 offers
# v0.0.40 to v0.0.42, 26.05 offers v0.0.42 to v0.0.45.
SUPPORTED_API_VERSIONS: tuple[str, ...] = ("v0.0.41", "v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")

# Slurm replies 429 when it sheds load and 502/503/504 when slurmctld is out of reach
# for a moment; both are worth a bounded retry. Other statuses are answers.
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

JSON = dict[str, t.Any]

# Bytes read from a streamed answer at a time: a list of 10,000 jobs is about 50 MB of JSON.
STREAM_CHUNK = 1 << 20


# --------------------------------------------------------------------------------------
# Errors: each says what failed and what to do about it.


class SlurmRestError(Exception):
    """A slurmrestd request failed; `str(err)` is a message fit for fail_json."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        url: str | None = None,
        errors: list[JSON] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.url = url
        self.errors = errors or []


class SlurmConnectionError(SlurmRestError):
    """slurmrestd could not be reached (after the retries)."""


class SlurmAuthError(SlurmRestError):
    """401/403: the token is missing, invalid or expired, or the user may not do this."""


class SlurmNotFoundError(SlurmRestError):
    """404: the node, job or other object does not exist."""


class SlurmApiVersionError(SlurmRestError):
    """No API version that both this collection and the server speak, or a bad pin."""


class SlurmRequestError(SlurmRestError):
    """slurmrestd or slurmctld refused the request (4xx, 5xx, or `errors` in the body)."""


# --------------------------------------------------------------------------------------
# Authentication


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def mint_token(key: bytes, user: str, lifespan: int, now: int | None = None) -> str:
    """Return an HS256 JWT that slurmctld accepts for `user` (claims sun, iat, exp).

    Slurm signs with the raw bytes of its jwt key file as the HMAC secret.
    """
    if not key:
        raise SlurmAuthError(
            "the JWT key is empty; point jwt_key_path at slurmctld's jwt_hs256.key"
        )
    if lifespan <= 0:
        raise SlurmAuthError(f"token_lifespan must be a positive number of seconds, not {lifespan}")
    issued = int(time.time()) if now is None else now
    header = {"alg": "HS256", "typ": "JWT"}
    claims = {"sun": user, "iat": issued, "exp": issued + lifespan}
    signing_input = ".".join(
        _b64url(json.dumps(part, separators=(",", ":"), sort_keys=True).encode())
        for part in (header, claims)
    )
    signature = hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{_b64url(signature)}"


def read_jwt_key(path: str) -> bytes:
    """Read slurmctld's JWT key file; errors name the path and the fix."""
    try:
        with open(path, "rb") as key_file:
            return key_file.read()
    except FileNotFoundError:
        raise SlurmAuthError(
            f"jwt_key_path {path!r} does not exist; give the path of the key named by "
            "AuthAltParameters=jwt_key= in slurm.conf, or pass a token instead"
        ) from None
    except PermissionError:
        raise SlurmAuthError(
            f"jwt_key_path {path!r} is not readable by this user; run the task with become, "
            "or pass a token minted for you instead"
        ) from None


# --------------------------------------------------------------------------------------
# API versions


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


def offered_versions(openapi: JSON) -> list[str]:
    """The data parser versions a server offers, from its GET /openapi/v3 document.

    Slurm 25.05+ lists them in info["x-slurm"]["data_parsers"]; older servers only show
    them in the path keys (/slurm/v0.0.42/...).
    """
    found: set[str] = set()
    parsers = openapi.get("info", {}).get("x-slurm", {}).get("data_parsers") or []
    for parser in parsers:
        name = parser.get("plugin", "") if isinstance(parser, dict) else str(parser)
        match = re.search(r"v\d+\.\d+\.\d+", name)
        if match:
            found.add(match.group(0))
    if not found:
        for path in openapi.get("paths", {}):
            match = re.match(r"/slurm/(v\d+\.\d+\.\d+)/", path)
            if match:
                found.add(match.group(1))
    return sorted(found, key=_version_key)


def choose_api_version(offered: t.Iterable[str], pinned: str | None = None) -> str:
    """Pick the pinned version, or the newest one both sides speak."""
    offered = sorted(set(offered), key=_version_key)
    if pinned:
        if pinned not in SUPPORTED_API_VERSIONS:
            raise SlurmApiVersionError(
                f"api_version {pinned!r} is not supported by this collection; use one of "
                f"{', '.join(SUPPORTED_API_VERSIONS)} or leave it unset to negotiate"
            )
        if pinned not in offered:
            raise SlurmApiVersionError(
                f"api_version {pinned!r} is not offered by this slurmrestd; it offers "
                f"{', '.join(offered) or 'none'}"
            )
        return pinned
    common = [version for version in offered if version in SUPPORTED_API_VERSIONS]
    if not common:
        raise SlurmApiVersionError(
            f"this slurmrestd offers API versions {', '.join(offered) or 'none'}, and this "
            f"collection speaks {', '.join(SUPPORTED_API_VERSIONS)}: upgrade Slurm to 24.05 or "
            "newer (or the collection)"
        )
    return common[-1]


# --------------------------------------------------------------------------------------
# One shape for every API version (pure functions)

INFINITE = "infinite"


def plain_number(value: t.Any) -> t.Any:
    """Turn slurmrestd's {set, infinite, number} into a plain value.

    Unset becomes None and infinite becomes the string "infinite"; plain numbers (and
    anything else) pass through.
    """
    if isinstance(value, dict) and "number" in value and "set" in value:
        if value.get("infinite"):
            return INFINITE
        if not value.get("set"):
            return None
        return value.get("number")
    return value


def _csv_list(value: t.Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [item for item in value.split(",") if item]
    return [str(item) for item in value]


# Node states Slurm uses as a base; everything else in the state list is a flag.
NODE_BASE_STATES = frozenset({"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
NODE_BUSY_STATES = frozenset({"ALLOCATED", "MIXED"})
JOB_BASE_STATES = frozenset(
    {
        "PENDING",
        "RUNNING",
        "SUSPENDED",
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)
# Jobs that still hold or wait for resources; signals and cancels only make sense on these.
JOB_ACTIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED")


def _split_states(states: t.Any, base_states: frozenset[str]) -> tuple[str, list[str]]:
    if isinstance(states, str):
        states = [states]
    states = [str(state).upper() for state in states or []]
    base = next((state for state in states if state in base_states), "UNKNOWN")
    flags = [state for state in states if state != base]
    return base, flags


def drain_state(base: str, flags: list[str]) -> str | None:
    """'draining' or 'drained' as sinfo shows them, or None when the node is not drained.

    Slurm derives this: DRAIN with jobs still on the node (COMPLETING, ALLOCATED or MIXED)
    is draining, otherwise drained.
    """
    if "DRAIN" not in flags:
        return None
    if "COMPLETING" in flags or base in NODE_BUSY_STATES:
        return "draining"
    return "drained"


def normalize_node(raw: JSON) -> JSON:
    """One node in the collection's shape, whatever the API version."""
    base, flags = _split_states(raw.get("state"), NODE_BASE_STATES)
    return {
        "name": raw.get("name"),
        "state": base,
        "state_flags": flags,
        "drain_state": drain_state(base, flags),
        "reason": raw.get("reason") or "",
        "reason_set_by_user": raw.get("reason_set_by_user") or "",
        "reason_changed_at": plain_number(raw.get("reason_changed_at")),
        "partitions": list(raw.get("partitions") or []),
        "features": _csv_list(raw.get("features")),
        "active_features": _csv_list(raw.get("active_features")),
        "cpus": plain_number(raw.get("cpus")),
        # What jobs may use: the CPUs less CoreSpecCount's, the memory less MemSpecLimit.
        "effective_cpus": plain_number(raw.get("effective_cpus")),
        "alloc_cpus": plain_number(raw.get("alloc_cpus")),
        "real_memory": plain_number(raw.get("real_memory")),
        "specialized_memory": plain_number(raw.get("specialized_memory")),
        "alloc_memory": plain_number(raw.get("alloc_memory")),
        "free_memory": plain_number(raw.get("free_mem")),
        "gres": raw.get("gres") or "",
        "gres_used": raw.get("gres_used") or "",
        "address": raw.get("address") or "",
        "hostname": raw.get("hostname") or "",
        "weight": plain_number(raw.get("weight")),
        "comment": raw.get("comment") or "",
        "mcs_label": raw.get("mcs_label") or "",
        "owner": raw.get("owner") or "",
        "boot_time": plain_number(raw.get("boot_time")),
        "last_busy": plain_number(raw.get("last_busy")),
        "slurmd_start_time": plain_number(raw.get("slurmd_start_time")),
        "version": raw.get("version") or "",
        "architecture": raw.get("architecture") or "",
    }


def normalize_job(raw: JSON) -> JSON:
    """One job in the collection's shape, whatever the API version."""
    base, flags = _split_states(raw.get("job_state"), JOB_BASE_STATES)
    return {
        "job_id": raw.get("job_id"),
        "name": raw.get("name") or "",
        "state": base,
        "state_flags": flags,
        "state_reason": raw.get("state_reason") or "",
        "user_name": raw.get("user_name") or "",
        "user_id": raw.get("user_id"),
        "account": raw.get("account") or "",
        "partition": raw.get("partition") or "",
        "qos": raw.get("qos") or "",
        "nodes": raw.get("nodes") or "",
        "requeue": bool(raw.get("requeue")),
        "restart_count": raw.get("restart_cnt"),
        "batch": bool(raw.get("batch_flag")),
        "mcs_label": raw.get("mcs_label") or "",
        "priority": plain_number(raw.get("priority")),
        "time_limit": plain_number(raw.get("time_limit")),
        "submit_time": plain_number(raw.get("submit_time")),
        "start_time": plain_number(raw.get("start_time")),
        "end_time": plain_number(raw.get("end_time")),
        # What a pending job asks for: whether it can start, and on what.
        "hold": bool(raw.get("hold")),
        "dependency": raw.get("dependency") or "",
        "node_count": plain_number(raw.get("node_count")),
        "cpus": plain_number(raw.get("cpus")),
        "cpus_per_node": plain_number(raw.get("minimum_cpus_per_node")),
        "memory_per_node": plain_number(raw.get("memory_per_node")),
        "memory_per_cpu": plain_number(raw.get("memory_per_cpu")),
        "tres_per_node": raw.get("tres_per_node") or "",
        "tres_requested": raw.get("tres_req_str") or "",
        "shared": [str(flag) for flag in raw.get("shared") or []],
        "features": raw.get("features") or "",
    }


def normalize_partition(raw: JSON) -> JSON:
    """One partition in the collection's shape, whatever the API version."""
    nodes = raw.get("nodes") or {}
    priority = raw.get("priority") or {}
    maximums = raw.get("maximums") or {}
    defaults = raw.get("defaults") or {}
    states = (raw.get("partition") or {}).get("state") or []
    return {
        "name": raw.get("name"),
        "nodes": nodes.get("configured") or "",
        "total_nodes": plain_number(nodes.get("total")),
        "total_cpus": plain_number((raw.get("cpus") or {}).get("total")),
        "state": states[0] if states else "UNKNOWN",
        "priority_tier": plain_number(priority.get("tier")),
        "priority_job_factor": plain_number(priority.get("job_factor")),
        "max_time": plain_number(maximums.get("time")),
        "default_time": plain_number(defaults.get("time")),
        "grace_time": plain_number(raw.get("grace_time")),
        "node_sets": raw.get("node_sets") or "",
    }


def normalize_reservation(raw: JSON) -> JSON:
    """One reservation in the collection's shape, whatever the API version."""
    return {
        "name": raw.get("name"),
        "node_list": raw.get("node_list") or "",
        "node_count": plain_number(raw.get("node_count")),
        "start_time": plain_number(raw.get("start_time")),
        "end_time": plain_number(raw.get("end_time")),
        "flags": list(raw.get("flags") or []),
        "users": _csv_list(raw.get("users")),
        "accounts": _csv_list(raw.get("accounts")),
        "partition": raw.get("partition") or "",
    }


def normalize_ping(raw: JSON) -> list[JSON]:
    """slurmctld hosts and whether they answer.

    v0.0.41 has only `pinged` and `mode`; v0.0.42 adds `responding` and `primary`;
    v0.0.45 drops `pinged` and `mode`.
    """
    pings = []
    for ping in raw.get("pings") or []:
        responding = ping.get("responding")
        if responding is None:
            responding = str(ping.get("pinged", "")).upper() == "UP"
        mode = ping.get("mode")
        if not mode and "primary" in ping:
            mode = "primary" if ping["primary"] else "backup"
        pings.append(
            {
                "hostname": ping.get("hostname"),
                "responding": bool(responding),
                "latency": plain_number(ping.get("latency")),
                "mode": mode or "",
            }
        )
    return pings


def describe_errors(errors: list[JSON]) -> str:
    """slurmrestd's `errors` list as one readable sentence."""
    parts = []
    for error in errors:
        text = error.get("description") or error.get("error") or "unknown error"
        source = error.get("source")
        parts.append(f"{text} ({source})" if source else text)
    return "; ".join(parts)


# --------------------------------------------------------------------------------------
# HTTP


@dataclass
class Connection:
    """Where slurmrestd is and how to authenticate; what the modules' options describe."""

    url: str
    token: str | None = None
    jwt_key_path: str | None = None
    user: str = "root"
    token_lifespan: int = 300
    api_version: str | None = None
    validate_certs: bool = True
    ca_path: str | None = None
    timeout: float = 30.0
    retries: int = 3
    backoff: float = 1.0
    # Where a renewed token is read when slurmrestd rejects the one in hand (the Secret a
    # Slinky Token keeps fresh); without one, a rejected token fails the request.
    token_source: t.Callable[[], str] | None = None

    def __post_init__(self) -> None:
        if not self.url:
            raise SlurmRestError(
                "url is required: the address of slurmrestd, for example "
                "http://slurmrestd.slurm:6820 (or set SLURMRESTD_URL)"
            )
        if not re.match(r"^https?://", self.url):
            raise SlurmRestError(
                f"url {self.url!r} must start with http:// or https://, for example "
                "https://slurmrestd.example.org:6820"
            )
        if self.token and self.jwt_key_path:
            raise SlurmAuthError("give either token or jwt_key_path, not both")
        if not self.token and not self.jwt_key_path and self.token_source is None:
            raise SlurmAuthError(
                "no credentials for slurmrestd: set token (or the SLURM_JWT environment "
                "variable), or jwt_key_path to mint a short-lived token"
            )


class KeptContextOpener:
    """open_url, with one TLS context for each (validate_certs, ca_path) kept for the next
    requests: open_url makes a new one per request, which reads the system's CA bundle (5 to
    10 ms of CPU, even for http://: a quarter of the CPU of 32 nodes reclaimed at once)."""

    def __init__(self) -> None:
        self._contexts: dict[tuple[bool, str | None], t.Any] = {}

    def __call__(
        self,
        url: str,
        *,
        method: str,
        validate_certs: bool = True,
        ca_path: str | None = None,
        **kwargs: t.Any,
    ) -> t.Any:
        key = (validate_certs, ca_path)
        context = self._contexts.get(key)
        if context is None:  # two threads may both make one: either serves
            context = make_context(cafile=ca_path, validate_certs=validate_certs)
            self._contexts[key] = context
        return Request().open(method, url, context=context, **kwargs)


class SlurmRestClient:
    """Talks to one slurmrestd: auth, version negotiation, retries, typed errors."""

    def __init__(
        self,
        connection: Connection,
        opener: t.Callable[..., t.Any] | None = None,
        sleep: t.Callable[[float], None] = time.sleep,
        on_new_token: t.Callable[[str], None] | None = None,
    ) -> None:
        self.connection = connection
        # Called as open_url is (url, data, method, headers, validate_certs, ca_path, ...).
        self._open = opener if opener is not None else KeptContextOpener()
        self._sleep = sleep
        # Modules pass a callback that adds each minted token to no_log_values.
        self._on_new_token = on_new_token
        self._token: str | None = connection.token
        self._token_expires: float = float("inf")
        self._api_version: str | None = None
        self._offered: list[str] | None = None
        # Seconds the calling thread may wait for an answer, when it must not wait as long as
        # connection.timeout (the handover's steps have deadlines: PatientSlurm); None: as long.
        self.timeout_for: t.Callable[[], float | None] | None = None

    # -- authentication ---------------------------------------------------------------

    def token(self) -> str:
        """The token to send; a minted one is renewed shortly before it expires."""
        conn = self.connection
        if conn.jwt_key_path and (self._token is None or time.time() > self._token_expires):
            key = read_jwt_key(conn.jwt_key_path)
            self._token = mint_token(key, conn.user, conn.token_lifespan)
            self._token_expires = time.time() + conn.token_lifespan * 0.8
            if self._on_new_token is not None:
                self._on_new_token(self._token)
        if self._token is None and conn.token_source is not None:
            self._take(conn.token_source())
        if self._token is None:
            raise SlurmAuthError("no token: set token, or jwt_key_path to mint one")
        return self._token

    def _take(self, token: str) -> None:
        self._token = token
        if self._on_new_token is not None:
            self._on_new_token(token)

    def _renewed(self) -> bool:
        """After slurmrestd rejected the token: read the source again; True when it gave a
        new token (the one in hand may simply have expired since it was read)."""
        source = self.connection.token_source
        if source is None:
            return False
        token = source()
        if not token or token == self._token:
            return False
        self._take(token)
        return True

    def _headers(self, has_body: bool) -> dict[str, str]:
        headers = {
            "Accept": "application/json",
            "X-SLURM-USER-TOKEN": self.token(),
            "X-SLURM-USER-NAME": self.connection.user,
        }
        if has_body:
            headers["Content-Type"] = "application/json"
        return headers

    # -- transport --------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: JSON | None = None,
        query: dict[str, t.Any] | None = None,
        stream: tuple[str, t.Callable[[JSON], None]] | None = None,
    ) -> JSON:
        """Send one request and return the decoded JSON body (empty dict for 304/no body).

        With `stream` (key, each): the items of the body's list `key` are given to `each`
        one by one as they arrive, and left out of the body returned, so a long list never
        sits in memory whole. `each` must tolerate a retry: it sees the items again from the
        first after a ``restart`` call of its list, see StreamedList.

        Retries connection errors, 429 and 5xx with exponential backoff (honouring
        Retry-After), at most `retries` times. Raises a SlurmRestError subclass otherwise.
        """
        url = self.connection.url.rstrip("/") + path
        if query:
            url += "?" + urlencode(query, doseq=True)
        data = json.dumps(body).encode() if body is not None else None
        attempt = 0
        renewed = False
        while True:
            timeout = self._timeout()
            try:
                response = self._open(
                    url,
                    data=data,
                    method=method,
                    headers=self._headers(data is not None),
                    validate_certs=self.connection.validate_certs,
                    ca_path=self.connection.ca_path,
                    timeout=timeout,
                    follow_redirects="safe",
                )
                status = response.getcode()
                if stream is not None:
                    return self._decode_stream(method, url, status, response, *stream)
                return self._decode(method, url, status, response.read())
            except HTTPError as err:
                status = err.code
                if status == 304:
                    return {}
                payload = err.read() if err.fp is not None else b""
                if status in (401, 511) and not renewed and self._renewed():
                    renewed = True  # once: a token the source still gives is not renewed
                    continue
                if status in RETRY_STATUSES and attempt < self.connection.retries:
                    self._sleep(self._delay(attempt, err.headers))
                    attempt += 1
                    continue
                raise self._http_error(method, url, status, payload) from None
            except (URLError, TimeoutError, ConnectionError, IncompleteRead) as err:
                if attempt < self.connection.retries:
                    self._sleep(self._delay(attempt, None))
                    attempt += 1
                    continue
                reason = getattr(err, "reason", err)
                tries = f"{attempt + 1} attempt{'s' if attempt else ''}"
                if isinstance(reason, TimeoutError):
                    raise SlurmConnectionError(
                        f"slurmrestd at {self.connection.url} did not answer {method} {path} "
                        f"within {timeout:g} s ({tries}); check that slurmrestd and slurmctld "
                        "behind it run and are not overloaded",
                        url=url,
                    ) from None
                raise SlurmConnectionError(
                    f"cannot reach slurmrestd at {self.connection.url} ({reason}) after "
                    f"{tries}; check url, that slurmrestd runs and listens "
                    "there, and for https the CA (ca_path or validate_certs)",
                    url=url,
                ) from None

    def _timeout(self) -> float:
        shorter = self.timeout_for() if self.timeout_for is not None else None
        return self.connection.timeout if shorter is None else min(shorter, self.connection.timeout)

    def _delay(self, attempt: int, headers: t.Any) -> float:
        retry_after = headers.get("Retry-After") if headers is not None else None
        if retry_after and str(retry_after).isdigit():
            return min(float(retry_after), 60.0)
        return float(self.connection.backoff * (2**attempt))

    @staticmethod
    def _parse(payload: bytes) -> JSON:
        if not payload:
            return {}
        try:
            decoded = json.loads(payload)
        except ValueError:
            return {"_raw": payload.decode("utf-8", "replace")[:500]}
        return decoded if isinstance(decoded, dict) else {"_raw": decoded}

    def _decode(self, method: str, url: str, status: int, payload: bytes) -> JSON:
        return _refused_unless_clean(method, url, status, self._parse(payload))

    def _decode_stream(
        self,
        method: str,
        url: str,
        status: int,
        response: t.Any,
        key: str,
        each: t.Callable[[JSON], None],
    ) -> JSON:
        try:
            body = stream_list(response, key, each)
        except StreamError as err:
            raise SlurmRequestError(
                f"slurmrestd's answer to {method} {url} is not JSON or was cut short ({err}); "
                "check slurmrestd's log, and that no proxy between cuts long answers",
                status=status,
                url=url,
            ) from None
        return _refused_unless_clean(method, url, status, body)

    def _http_error(self, method: str, url: str, status: int, payload: bytes) -> SlurmRestError:
        body = self._parse(payload)
        errors = body.get("errors") or []
        detail = describe_errors(errors) or str(body.get("_raw", "")).strip() or "no detail"
        where = f"{method} {url}"
        if status in (401, 511):
            # 401: slurmrestd found no usable token; 511: slurmctld refused the token
            # slurmrestd passed on (expired, signed with another key, unknown user).
            return SlurmAuthError(
                f"slurmrestd rejected the token (HTTP {status}: {detail}) for {where}: it is "
                "missing, malformed or expired, signed with another key than slurmctld's, or "
                f"its user {self.connection.user!r} is unknown to slurmctld; mint a new one "
                "(jwt_key_path, or scontrol token)",
                status=status,
                url=url,
                errors=errors,
            )
        if status == 403:
            return SlurmAuthError(
                f"user {self.connection.user!r} may not do {where} (HTTP 403): {detail}; "
                "use a token of SlurmUser or root, or an operator account",
                status=status,
                url=url,
                errors=errors,
            )
        if status == 404:
            return SlurmNotFoundError(
                f"not found (HTTP 404) at {where}: {detail}",
                status=status,
                url=url,
                errors=errors,
            )
        if status >= 500 and any(
            "slurmdb" in f"{e.get('description')} {e.get('source')}".lower() for e in errors
        ):
            # With accounting, slurmrestd resolves TRES and QoS through slurmdbd even for
            # /slurm/ reads (measured on 26.05: GET partitions while slurmdbd is unreachable).
            return SlurmRequestError(
                f"slurmrestd failed {where} with HTTP {status} because slurmdbd does not answer "
                f"it ({detail}): with accounting slurmrestd reads TRES and QoS through slurmdbd, "
                "so this fails while slurmdbd or its database is down; start them (the slurmdbd "
                "pod, app.kubernetes.io/name=slurmdbd, and its database), then run again. "
                "Running jobs go on: slurmctld keeps their records until slurmdbd is back",
                status=status,
                url=url,
                errors=errors,
            )
        if status >= 500:
            return SlurmRequestError(
                f"slurmrestd failed {where} with HTTP {status}: {detail}; check that "
                "slurmctld is up (slurmrestd answers 502 when it cannot reach it)",
                status=status,
                url=url,
                errors=errors,
            )
        return SlurmRequestError(
            f"slurmrestd refused {where} with HTTP {status}: {detail}",
            status=status,
            url=url,
            errors=errors,
        )

    # -- API version ------------------------------------------------------------------

    def offered_versions(self) -> list[str]:
        if self._offered is None:
            self._offered = offered_versions(self.request("GET", "/openapi/v3"))
        return self._offered

    @property
    def api_version(self) -> str:
        if self._api_version is None:
            self._api_version = choose_api_version(
                self.offered_versions(), self.connection.api_version
            )
        return self._api_version

    def _slurm(self, path: str) -> str:
        return f"/slurm/{self.api_version}/{path}"

    # -- endpoints, returning normalised objects ---------------------------------------

    def ping(self) -> list[JSON]:
        return normalize_ping(self.request("GET", self._slurm("ping/")))

    def diag(self) -> JSON:
        statistics: JSON = self.request("GET", self._slurm("diag/")).get("statistics") or {}
        return {key: plain_number(value) for key, value in statistics.items()}

    def nodes(self) -> list[JSON]:
        body = self.request("GET", self._slurm("nodes/"))
        return [normalize_node(node) for node in body.get("nodes") or []]

    def node(self, name: str) -> JSON | None:
        """The node, or None when Slurm does not know it."""
        try:
            body = self.request("GET", self._slurm(f"node/{quote(name, safe='')}"))
        except SlurmNotFoundError:
            return None
        except SlurmRequestError as err:
            # Slurm answers an unknown node name with an error entry, not always a 404.
            if _is_unknown_node(err):
                return None
            raise
        nodes = body.get("nodes") or []
        return normalize_node(nodes[0]) if nodes else None

    def update_node(self, name: str, changes: JSON) -> None:
        self.request("POST", self._slurm(f"node/{quote(name, safe='')}"), body=changes)

    def delete_node(self, name: str) -> None:
        self.request("DELETE", self._slurm(f"node/{quote(name, safe='')}"))

    def jobs(self, keep: t.Callable[[JSON], t.Any] | None = None) -> list[t.Any]:
        """Every job, normalised; with `keep`, what it returns for each job (None: left out).

        The list is read as it arrives, one job at a time, so what stays in memory is what
        `keep` keeps: the demand read of 10,000 jobs keeps a few fields of the pending and
        running ones.
        """
        return self.jobs_since(None, keep)[0] or []

    def jobs_since(
        self, update_time: int | None, keep: t.Callable[[JSON], t.Any] | None = None
    ) -> tuple[list[t.Any] | None, int | None]:
        """jobs(keep), or None when no job changed since `update_time` (slurmctld then sends
        no job at all: a poll of an unchanged queue of 10,000 jobs costs 1 kB, not 80 MB);
        and the update time to ask with next."""
        kept: list[t.Any] = []

        def each(raw: JSON) -> None:
            if raw is RESTART:
                del kept[:]
                return
            job = normalize_job(raw)
            item = keep(job) if keep is not None else job
            if item is not None:
                kept.append(item)

        query = {"update_time": update_time} if update_time else None
        body = self.request("GET", self._slurm("jobs/"), query=query, stream=("jobs", each))
        if update_time and any(
            str(warning.get("description", "")).startswith(NO_JOB_CHANGES)
            for warning in body.get("warnings") or []
            if isinstance(warning, dict)
        ):
            return None, update_time
        last = plain_number(body.get("last_update"))
        return kept, int(last) if isinstance(last, (int, float)) and last > 0 else None

    def signal_job(
        self, job_id: int | str, signal: str = "SIGKILL", batch_only: bool = False
    ) -> None:
        query = {"signal": signal}
        if batch_only:
            query["flags"] = "BATCH_JOB"
        self.request("DELETE", self._slurm(f"job/{quote(str(job_id), safe='')}"), query=query)

    def partitions(self) -> list[JSON]:
        body = self.request("GET", self._slurm("partitions/"))
        return [normalize_partition(partition) for partition in body.get("partitions") or []]

    def reservations(self) -> list[JSON]:
        body = self.request("GET", self._slurm("reservations/"))
        return [normalize_reservation(resv) for resv in body.get("reservations") or []]


class StreamError(ValueError):
    """A streamed answer that is not JSON, or ends early."""


def _refused_unless_clean(method: str, url: str, status: int, body: JSON) -> JSON:
    """The body of a 2xx answer, or SlurmRequestError when it lists errors."""
    errors = body.get("errors") or []
    if errors:
        raise SlurmRequestError(
            f"slurmrestd refused {method} {url}: {describe_errors(errors)}",
            status=status,
            url=url,
            errors=errors,
        )
    return body


# The warning of a jobs/ answer to update_time when no job changed since [V jobs.c].
NO_JOB_CHANGES = "No job changes since update_time"
# Given to a stream's `each` before a retried request sends the items again.
RESTART: t.Final[JSON] = {}


def stream_list(response: t.Any, key: str, each: t.Callable[[JSON], None]) -> JSON:
    """The JSON object `response` reads, without its list `key`: each item of that list is
    given to `each` as soon as it is read, so the whole list is never in memory at once.

    json's own decoder reads one value at a time from a window of the body (what a decoded
    list of 10,000 jobs needs in memory, 300 MiB, becomes one chunk and the items kept).
    StreamError when the body is not a JSON object or ends early; what `each` raises goes
    through.
    """
    each(RESTART)
    body: JSON = {}
    window = _Window(response)
    window.expect("{")
    if window.next_is("}"):
        return body
    while True:
        name = window.value()
        if not isinstance(name, str):
            raise StreamError(f"a member name is {name!r}")
        window.expect(":")
        if name == key:
            window.expect("[")
            if not window.next_is("]"):
                while True:
                    each(window.value())
                    if window.next_is("]"):
                        break
                    window.expect(",")
        else:
            body[name] = window.value()
        if window.next_is("}"):
            return body
        window.expect(",")


class _Window:
    """The part of a streamed body not read yet, refilled chunk by chunk."""

    _SPACE = " \t\n\r"

    def __init__(self, response: t.Any) -> None:
        self._response = response
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._decoder = json.JSONDecoder()
        self._text = ""
        self._at = 0
        self._ended = False

    def _more(self) -> bool:
        """Read the next chunk; False at the end of the body."""
        if self._ended:
            return False
        chunk = self._response.read(STREAM_CHUNK)
        self._ended = not chunk
        self._text = self._text[self._at :] + self._utf8.decode(chunk, final=self._ended)
        self._at = 0
        return bool(chunk)

    def _skip_space(self) -> None:
        while True:
            while self._at < len(self._text) and self._text[self._at] in self._SPACE:
                self._at += 1
            if self._at < len(self._text) or not self._more():
                return

    def next_is(self, char: str) -> bool:
        """Whether the next character (after white space) is `char`; taken if it is."""
        self._skip_space()
        if self._text[self._at : self._at + 1] == char:
            self._at += 1
            return True
        return False

    def expect(self, char: str) -> None:
        if not self.next_is(char):
            found = self._text[self._at : self._at + 20]
            if not found:
                raise StreamError(f"it ends where {char!r} was due")
            raise StreamError(f"expected {char!r}, found {found!r}")

    def value(self) -> t.Any:
        """The next JSON value, read further until it is whole."""
        self._skip_space()
        while True:
            try:
                found, end = self._decoder.raw_decode(self._text, self._at)
            except ValueError as err:
                if self._more():
                    continue
                if self._at >= len(self._text):
                    raise StreamError("it ends where a value was due") from None
                raise StreamError(
                    f"it ends before a value is whole, or is not JSON: {err}"
                ) from None
            # A number (or true...) that ends with the window may go on in the next chunk.
            if end == len(self._text) and self._more():
                continue
            self._at = end
            return found


def _is_unknown_node(err: SlurmRequestError) -> bool:
    # Slurm 24.11 to 26.05 answer HTTP 200 with "Failure to query node <name>".
    return any(
        str(error.get("description", "")).startswith("Failure to query node ")
        for error in err.errors
    )
