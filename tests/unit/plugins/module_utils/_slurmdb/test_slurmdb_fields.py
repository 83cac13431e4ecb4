# SPDX-License-Identifier: GPL-3.0-or-later
"""The accounting settings as users write them: TRES limits, durations, counts."""

from __future__ import annotations

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._slurmdb.fields import (
    FieldError,
    canonical,
    from_api,
    merged_tres,
    parse_minutes,
    parse_tres,
    to_api,
    tres_from_api,
    tres_to_api,
)


@pytest.mark.parametrize(
    ("written", "tres"),
    [
        ({"cpu": 64, "mem": "256G", "gres/gpu": 4}, {"cpu": 64, "mem": 262144, "gres/gpu": 4}),
        ("cpu=64,mem=256G,gres/gpu=4", {"cpu": 64, "mem": 262144, "gres/gpu": 4}),
        ("mem=512M, node=2", {"mem": 512, "node": 2}),
        ("mem=1T", {"mem": 1048576}),
        ({"CPU": -1}, {"cpu": -1}),
        ("", {}),
    ],
)
def test_tres_limits_are_read_as_sacctmgr_writes_them(
    written: object, tres: dict[str, int]
) -> None:
    assert parse_tres(written, "grp_tres") == tres


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("cpu", "grp_tres: 'cpu' is not TYPE=COUNT"),
        ({"cpu": "many"}, "grp_tres: cpu=many is not a TRES limit"),
        ({"cpu": "4G"}, "only mem takes a unit"),
        (64, "grp_tres must be a dict such as"),
    ],
)
def test_a_tres_limit_that_is_not_one_names_the_setting(written: object, message: str) -> None:
    with pytest.raises(FieldError, match=message):
        parse_tres(written, "grp_tres")


def test_tres_round_trip_the_apis_list() -> None:
    api = [{"type": "cpu", "count": 4}, {"type": "gres", "name": "gpu", "count": 1}]
    assert tres_from_api(api) == {"cpu": 4, "gres/gpu": 1}
    assert tres_to_api({"cpu": 4, "gres/gpu": 1}) == api


def test_a_tres_update_changes_only_what_it_names() -> None:
    assert merged_tres({"cpu": 4, "mem": 100}, {"mem": 200, "node": -1}) == {"cpu": 4, "mem": 200}
    assert merged_tres({"cpu": 4}, {"cpu": -1}) == {}


@pytest.mark.parametrize(
    ("written", "minutes"),
    [
        (90, 90),
        ("90", 90),
        ("01:30:00", 90),
        ("1:30", 2),
        ("90:00", 90),
        ("1-12:30", 2190),
        ("2-00:00:00", 2880),
        ("1-12", 2160),
        ("unlimited", -1),
        (-1, -1),
    ],
)
def test_durations_in_slurms_time_format(written: object, minutes: int) -> None:
    assert parse_minutes(written, "max_wall") == minutes


def test_a_duration_that_is_not_one_says_what_is_accepted() -> None:
    with pytest.raises(FieldError, match=r"max_wall: 'two days' is not a duration; write minutes"):
        parse_minutes("two days", "max_wall")


def test_counts_refuse_words_and_numbers_below_minus_one() -> None:
    assert canonical("count", "unlimited", "max_jobs") == -1
    with pytest.raises(FieldError, match="max_jobs must be a whole number"):
        canonical("count", "lots", "max_jobs")
    with pytest.raises(FieldError, match="max_jobs must be 0 or more, or -1 to remove it"):
        canonical("count", -5, "max_jobs")


def test_unset_and_infinite_limits_read_as_no_limit() -> None:
    assert from_api("count", {"set": False, "infinite": False, "number": 0}) == -1
    assert from_api("count", {"set": True, "infinite": True, "number": 0}) == -1
    assert from_api("count", {"set": True, "infinite": False, "number": 7}) == 7
    assert to_api("count", -1) == {"set": True, "infinite": True, "number": 0}
    assert to_api("count", 7) == {"set": True, "infinite": False, "number": 7}
