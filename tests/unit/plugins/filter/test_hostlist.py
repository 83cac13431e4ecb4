# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the hostlist_expand and hostlist_compress filters."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hpcops.slinky.plugins.filter.hostlist import (
    FilterModule,
    hostlist_compress,
    hostlist_expand,
)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("node1", ["node1"]),
        ("gpu[1-2],cpu01", ["gpu1", "gpu2", "cpu01"]),
        ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
        ("", []),
    ],
)
def test_expand(expression: str, expected: list[str]) -> None:
    assert hostlist_expand(expression) == expected


def test_expand_sort_and_duplicates() -> None:
    assert hostlist_expand("n[3,1],n3") == ["n3", "n1"]
    assert hostlist_expand("n[3,1],n3", sort=True) == ["n1", "n3"]
    assert hostlist_expand("n[3,1],n3", allow_duplicates=True) == ["n3", "n1", "n3"]


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["node01", "node02", "node03", "node04", "node07"], "node[01-04,07]"),
        (["gpu2", "gpu1", "node1"], "gpu[1-2],node1"),
        (["login"], "login"),
        ([], ""),
        ("node[01-02],node03", "node[01-03]"),
    ],
)
def test_compress(names: list[str] | str, expected: str) -> None:
    assert hostlist_compress(names) == expected


def test_round_trip_keeps_padding() -> None:
    names = [f"cn{i:03d}" for i in (1, 2, 3, 10, 11, 99, 100)]
    assert hostlist_compress(names) == "cn[001-003,010-011,099-100]"
    assert hostlist_expand(hostlist_compress(names)) == names


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("node[01-", "unbalanced brackets"),
        ("node[5-3]", "start > stop"),
        ("node[a-b]", "not a valid host list"),
    ],
)
def test_expand_bad_expression_names_the_input_and_the_fix(expression: str, message: str) -> None:
    with pytest.raises(AnsibleFilterError) as err:
        hostlist_expand(expression)
    text = str(err.value)
    assert text.startswith("hostlist_expand: ")
    assert repr(expression) in text
    assert message in text
    assert "balanced brackets and start <= end" in text


@pytest.mark.parametrize("value", [42, None, ["node1"], {"a": 1}])
def test_expand_rejects_non_strings(value: object) -> None:
    with pytest.raises(AnsibleFilterError, match="expected a host list string"):
        hostlist_expand(value)


def test_compress_rejects_non_string_names() -> None:
    with pytest.raises(AnsibleFilterError, match=r"every host name must be a string; 7 is int"):
        hostlist_compress(["node1", 7])


@pytest.mark.parametrize("value", [42, {"node1": 1}])
def test_compress_rejects_non_lists(value: object) -> None:
    with pytest.raises(AnsibleFilterError, match="expected a list of host names"):
        hostlist_compress(value)


def test_compress_bad_name_points_at_it() -> None:
    with pytest.raises(AnsibleFilterError) as err:
        hostlist_compress(["node1", "node[2"])
    assert "'node[2'" in str(err.value)
    assert "hostlist_expand" in str(err.value)


def test_filters_are_registered() -> None:
    filters = FilterModule().filters()
    assert filters["hostlist_expand"] is hostlist_expand
    assert filters["hostlist_compress"] is hostlist_compress
