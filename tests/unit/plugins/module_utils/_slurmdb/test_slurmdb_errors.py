# SPDX-License-Identifier: GPL-3.0-or-later
"""What a failed /slurmdb/ request means for accounting, in the message a module ends
with; and the queries each API version parses."""

from __future__ import annotations

from ansible_collections.hpcops.slinky.plugins.module_utils._slurm.rest import SlurmRestError
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.api import period_query
from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.module import (
    accounting_error,
)

URL = "http://slurmrestd:6820/slurmdb/v0.0.45/qos/"
# What slurmrestd 26.05 answered while the lab's slurmdbd was stopped.
AWAY = [{"description": "Failed to open slurmdbd connection", "source": "openapi_get_db_conn"}]


def test_slurmdbd_away() -> None:
    err = accounting_error(SlurmRestError("refused", status=502, url=URL, errors=AWAY))
    assert str(err) == (
        "slurmdbd did not answer slurmrestd: check that slurmdbd runs and reaches its database "
        "(slurmctld keeps its jobs meanwhile and sends their records later) (HTTP 502 from "
        f"{URL}: Failed to open slurmdbd connection (openapi_get_db_conn))"
    )
    assert err.status == 502 and err.errors == AWAY


def test_no_slurmdbd_plugin_in_slurmrestd() -> None:
    err = accounting_error(SlurmRestError("not found", status=404, url=URL))
    assert str(err).startswith("this slurmrestd serves no /slurmdb/ API: start it with")


def test_other_errors_are_left_as_they_are() -> None:
    refused = SlurmRestError("refused", status=422, url=URL)
    assert accounting_error(refused) is refused
    elsewhere = SlurmRestError(
        "down", status=502, url="http://slurmrestd:6820/slurm/v0.0.45/nodes/"
    )
    assert accounting_error(elsewhere) is elsewhere


def test_the_period_is_sent_as_each_api_version_parses_it() -> None:
    assert period_query("v0.0.45", 1000.0, 2000.0, 5000.0) == {
        "start_time": "1000",
        "end_time": "2000",
    }
    # Slurm 24.11's v0.0.41 refuses Unix times; now-<seconds> it takes.
    assert period_query("v0.0.41", 1000.0, 2000.0, 5000.0) == {
        "start_time": "now-4000",
        "end_time": "now-3000",
    }
    assert period_query("v0.0.41", 1000.0, 6000.0, 5000.0)["end_time"] == "now"
