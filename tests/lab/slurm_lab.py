#!/usr/bin/env python3
"""Build phase only (scratch, to be completed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CACHE_DIR = Path(os.environ.get("HPCOPS_LAB_CACHE", "/var/cache/hpcops-lab"))
CHROOT_PACKAGES = ("slurmctld", "slurmd", "slurmrestd", "slurm-client", "slurm-wlm-jwt-plugin")
CHROOT_USERS = ("slurmrest", "alice", "bob")
CHROOT_RECIPE = 1
STAMP = "etc/hpcops-lab-stamp.json"


class LabError(Exception):
    pass


@dataclass(frozen=True)
class Release:
    name: str
    suite: str


def log(msg: str) -> None:
    print(f"[slurm-lab] {msg}", file=sys.stderr, flush=True)


def debian_mirror() -> str:
    override = os.environ.get("HPCOPS_LAB_MIRROR")
    if override:
        return override
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in stanza.splitlines() if ":" in line and not line.startswith("#")
            )
            uris = fields.get("URIs", "").split()
            suites = fields.get("Suites", "").split()
            if uris and suites and not any(s.endswith("-security") for s in suites):
                return uris[0]
    raise LabError("no Debian mirror found in /etc/apt/sources.list.d/*.sources; set HPCOPS_LAB_MIRROR")
