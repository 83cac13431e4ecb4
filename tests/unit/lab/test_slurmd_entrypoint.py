# SPDX-License-Identifier: GPL-3.0-or-later
"""The slurmd entrypoint of the kind scenario's Slurm image (tests/lab/kind/slurmd-entrypoint.sh).

The Slinky operator passes --conf's value wrapped in literal single quotes and the pod's
limits as POD_CPUS and POD_MEMORY; the entrypoint must hand slurmd one --conf argument
with the pod's limits as CoreSpecCount and MemSpecLimit.  A stand-in `slurmd` on PATH
reports a hardware line (as `slurmd -C` does) and records its arguments.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ENTRYPOINT = Path(__file__).resolve().parents[2] / "lab/kind/slurmd-entrypoint.sh"
HARDWARE = (
    "NodeName=hpc-0 CPUs=8 Boards=1 SocketsPerBoard=2 CoresPerSocket=2 ThreadsPerCore=2 "
    "RealMemory=32000"
)
OPERATOR_ARGS = [
    "-Z",
    "--conf-server",
    "slurm-controller.slurm:6817",
    "--conf",
    "'Features=hpc Weight=10'",
]


@pytest.fixture
def run_entrypoint(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    recorded = tmp_path / "argv.json"
    fake = bin_dir / "slurmd"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        f"if sys.argv[1:] == ['-C']:\n    print({HARDWARE!r}); print('UpTime=0-00:00:01'); sys.exit(0)\n"
        f"json.dump(sys.argv[1:], open({str(recorded)!r}, 'w'))\n"
    )
    fake.chmod(0o755)
    # The image's hold-log-fifos.sh keeps the pod's log FIFOs open; there are none here.
    hold = bin_dir / "hold-log-fifos.sh"
    hold.write_text('#!/bin/sh\nexec "$@"\n')
    hold.chmod(0o755)

    def run(args: list[str], **env: str) -> list[str]:
        environment = {"PATH": f"{bin_dir}:{os.environ['PATH']}", **env}
        # mkdir of /run/slurm and the spool needs root; elsewhere the script runs in a sandbox root.
        proc = subprocess.run(
            ["bash", str(ENTRYPOINT), *args],
            env=environment,
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        argv: list[str] = json.loads(recorded.read_text())
        return argv

    return run


def conf_of(argv: list[str]) -> list[str]:
    return argv[argv.index("--conf") + 1].split()


@pytest.mark.skipif(os.geteuid() != 0, reason="the entrypoint creates /run/slurm")
def test_the_quoted_conf_becomes_one_argument(run_entrypoint) -> None:
    argv = run_entrypoint(OPERATOR_ARGS)
    assert argv[:4] == ["-D", "-Z", "--conf-server", "slurm-controller.slurm:6817"]
    assert argv.count("--conf") == 1
    assert conf_of(argv) == ["Features=hpc", "Weight=10"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the entrypoint creates /run/slurm")
def test_pod_limits_become_core_and_memory_specialisation(run_entrypoint) -> None:
    # 4 cores of 2 threads; a pod of 3 CPUs needs 2 cores, so 2 are kept from Slurm.
    argv = run_entrypoint(OPERATOR_ARGS, POD_CPUS="3", POD_MEMORY="8000", POD_TOPOLOGY="rack1")
    assert conf_of(argv) == [
        "Features=hpc",
        "Weight=10",
        "CoreSpecCount=2",
        "MemSpecLimit=24000",
        "Topology=rack1",
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="the entrypoint creates /run/slurm")
@pytest.mark.parametrize(
    "env",
    [
        {"POD_CPUS": "0", "POD_MEMORY": "0"},
        # A pod as large as the node keeps nothing back.
        {"POD_CPUS": "8", "POD_MEMORY": "32000"},
        {},
    ],
)
def test_no_limits_no_specialisation(run_entrypoint, env: dict[str, str]) -> None:
    assert conf_of(run_entrypoint(OPERATOR_ARGS, **env)) == ["Features=hpc", "Weight=10"]
