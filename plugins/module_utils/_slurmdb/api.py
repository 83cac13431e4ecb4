# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""slurmdbd's records through slurmrestd's /slurmdb/ API, on the collection's client.

PRIVATE to the collection. One request per call; the lists are read whole (a site's
accounts, users and associations are thousands of small records, not millions).
"""

from __future__ import annotations

import typing as t
from urllib.parse import quote

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import (
    RESTART,
    SlurmRequestError,
    SlurmRestClient,
)

JSON = dict[str, t.Any]
Acc = t.TypeVar("Acc")


class SlurmdbApi:
    """The /slurmdb/ endpoints the accounting modules use."""

    def __init__(self, client: SlurmRestClient) -> None:
        self.client = client
        self.requests = 0

    def _path(self, path: str) -> str:
        return f"/slurmdb/{self.client.api_version}/{path}"

    def _call(self, method: str, path: str, **kwargs: t.Any) -> JSON:
        self.requests += 1
        return self.client.request(method, self._path(path), **kwargs)

    # -- reads ----------------------------------------------------------------------------

    def clusters(self) -> list[str]:
        body = self._call("GET", "clusters/")
        return [str(record.get("name")) for record in body.get("clusters") or []]

    def accounts(self) -> list[JSON]:
        return list(self._call("GET", "accounts/").get("accounts") or [])

    def users(self) -> list[JSON]:
        return list(self._call("GET", "users/").get("users") or [])

    def associations(self, cluster: str | None = None) -> list[JSON]:
        query = {"cluster": cluster} if cluster else None
        return list(self._call("GET", "associations/", query=query).get("associations") or [])

    def jobs(self, start: float, end: float, now: float, each: t.Callable[[JSON], None]) -> None:
        """Every attempt of every job that ran in [start, end], handed to `each` as it
        arrives (a year of jobs never sits in memory whole); `each` sees RESTART when a
        retry sends the list again from its first job."""
        query = {
            **period_query(self.client.api_version, start, end, now),
            "show_duplicates": "true",
            "skip_steps": "true",
        }
        self.requests += 1
        self.client.request("GET", self._path("jobs/"), query=query, stream=("jobs", each))

    def fold_jobs(
        self,
        start: float,
        end: float,
        now: float,
        new: t.Callable[[], Acc],
        add: t.Callable[[Acc, JSON], None],
    ) -> tuple[Acc, int]:
        """The jobs of [start, end] added one at a time to what `new` makes, and how many
        there were; a retry that sends the list again starts over from a new one."""
        accs = [new()]
        counts = [0]

        def each(raw: JSON) -> None:
            if raw is RESTART:
                accs[0], counts[0] = new(), 0
                return
            counts[0] += 1
            add(accs[0], raw)

        self.jobs(start, end, now, each)
        return accs[0], counts[0]

    def shares(self) -> list[JSON]:
        """The fair-share tree, as sshare reads it: from slurmctld (/slurm/, not /slurmdb/)."""
        self.requests += 1
        body = self.client.request("GET", f"/slurm/{self.client.api_version}/shares")
        return list((body.get("shares") or {}).get("shares") or [])

    def qos(self) -> list[JSON]:
        return list(self._call("GET", "qos/").get("qos") or [])

    # -- changes ----------------------------------------------------------------------------

    def post_accounts(self, records: list[JSON]) -> None:
        self._call("POST", "accounts/", body={"accounts": records})

    def post_users(self, records: list[JSON]) -> None:
        self._call("POST", "users/", body={"users": records})

    def post_associations(self, records: list[JSON]) -> None:
        self._call("POST", "associations/", body={"associations": records})

    def place_accounts(self, accounts: list[str], cluster: str, parent: str) -> None:
        """Give accounts their association on the cluster, under a parent: the one request
        that sets a parent (POST associations ignores parent_account)."""
        condition = {"accounts": accounts, "clusters": [cluster], "association": {"parent": parent}}
        self._call("POST", "accounts_association/", body={"association_condition": condition})

    def post_qos(self, records: list[JSON]) -> None:
        self._call("POST", "qos/", body={"qos": records})

    def delete_account(self, name: str) -> None:
        self._call("DELETE", f"account/{quote(name, safe='')}")

    def delete_user(self, name: str) -> None:
        self._call("DELETE", f"user/{quote(name, safe='')}")

    def delete_qos(self, name: str) -> None:
        self._call("DELETE", f"qos/{quote(name, safe='')}")

    def delete_association(self, query: JSON) -> None:
        self._call("DELETE", "association/", query={k: v for k, v in query.items() if v})


def period_query(api_version: str, start: float, end: float, now: float) -> dict[str, str]:
    """start_time and end_time as the API version parses them: Unix times from v0.0.42 on;
    v0.0.41 (Slurm 24.11) refuses them ("Parsing of ... for timestamp failed", measured) and
    takes times relative to now in seconds."""
    if api_version != "v0.0.41":
        return {"start_time": str(int(start)), "end_time": str(int(end))}

    def before_now(moment: float) -> str:
        ago = int(now - moment)
        return f"now-{ago}" if ago > 0 else "now"

    return {"start_time": before_now(start), "end_time": before_now(end)}


def cluster_of(api: SlurmdbApi, wanted: str | None) -> str:
    """The cluster the records belong to: the one named, or slurmdbd's only one."""
    known = api.clusters()
    if wanted:
        if wanted not in known:
            raise SlurmRequestError(
                f"cluster {wanted!r} is not registered in slurmdbd (it knows "
                f"{', '.join(known) or 'none'}); name one of them, or start the cluster's "
                "slurmctld with AccountingStorageType=accounting_storage/slurmdbd first"
            )
        return wanted
    if len(known) == 1:
        return known[0]
    raise SlurmRequestError(
        f"slurmdbd keeps {len(known)} clusters ({', '.join(known) or 'none'}): set cluster "
        "to the one these records belong to"
    )
