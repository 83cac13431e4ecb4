# SPDX-License-Identifier: GPL-3.0-or-later
"""Secrets the tests write go when their fixture ends, also when the test fails
(tests/unit/secret_files.py, the fixtures of tests/conftest.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import secret_files

pytest_plugins = ["pytester"]


def test_the_directory_is_private_and_removed_after_an_error() -> None:
    with pytest.raises(AssertionError), secret_files.secret_dir("unit") as path:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
        (path / "jwt.key").write_bytes(b"k" * 32)
        raise AssertionError("the test failed")
    assert not path.exists()


def test_a_failing_test_leaves_no_key_and_a_stray_one_is_removed_and_named(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        "from secret_files import no_secret_left, report_secrets_removed,"
        " secret_dir_fixture, secret_dirs\n"
        "def pytest_terminal_summary(terminalreporter, exitstatus, config):\n"
        "    report_secrets_removed(terminalreporter, config)\n"
    )
    record = pytester.path / "dirs.txt"
    pytester.makepyfile(
        test_writers=f"""
        import pytest
        from pathlib import Path

        @pytest.fixture(scope="module")
        def keys(secret_dirs):
            with secret_dirs("module") as path:
                (path / "jwt.key").write_bytes(b"k" * 32)
                yield path

        def test_fails(secret_dir, keys):
            (secret_dir / "token").write_text("a token")
            Path({str(record)!r}).write_text(f"{{secret_dir}}\\n{{keys}}\\n")
            assert False, "the test failed"

        def test_stray(tmp_path):
            (tmp_path / "wrong.key").write_bytes(b"x" * 32)
        """
    )
    result = pytester.runpytest_inprocess()
    result.assert_outcomes(passed=1, failed=1)
    for line in record.read_text().split():
        assert not Path(line).exists(), f"{line} is still there"
    assert secret_files.secret_files(pytester.path.parent) == []
    result.stdout.fnmatch_lines(["*removed 1 key or token file(s)*", "*wrong.key"])
