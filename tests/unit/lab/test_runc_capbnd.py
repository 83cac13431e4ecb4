# SPDX-License-Identifier: GPL-3.0-or-later
"""The runc wrapper dockerd runs on hosts whose bounding set lacks capabilities (tests/lab)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "lab"))
import runc_capbnd


def test_capability_names_follow_the_kernel_numbering() -> None:
    assert runc_capbnd.CAPABILITIES[0] == "CHOWN"
    assert runc_capbnd.CAPABILITIES[24] == "SYS_RESOURCE"
    assert runc_capbnd.CAPABILITIES[40] == "CHECKPOINT_RESTORE"


def test_the_bundle_and_process_options_are_found_in_both_spellings() -> None:
    argv = ["--root", "/run/runc", "create", "--bundle", "/b", "--pid-file", "p", "id"]
    assert runc_capbnd.option_value(argv, "--bundle", "-b") == "/b"
    assert (
        runc_capbnd.option_value(["exec", "--process=/p.json", "id"], "--process", "-p")
        == "/p.json"
    )
    assert runc_capbnd.option_value(["start", "id"], "--bundle", "-b") is None


def test_capabilities_outside_the_bounding_set_are_dropped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(runc_capbnd, "bounding_set", lambda: {"CAP_CHOWN", "CAP_SYS_ADMIN"})
    config = tmp_path / "config.json"
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    config.write_text(
        json.dumps(
            {"process": {"args": ["sh"], "capabilities": {"bounding": caps, "effective": caps}}}
        )
    )
    runc_capbnd.rewrite(str(config), "process")
    written = json.loads(config.read_text())["process"]
    assert written["capabilities"] == {
        "bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"],
        "effective": ["CAP_CHOWN", "CAP_SYS_ADMIN"],
    }
    assert written["args"] == ["sh"]


def test_this_hosts_bounding_set_is_read_from_proc() -> None:
    allowed = runc_capbnd.bounding_set()
    assert "CAP_CHOWN" in allowed
    assert all(name.startswith("CAP_") for name in allowed)
