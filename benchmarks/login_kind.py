# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A user's two waits on real kubelets: SSH to a prompt, and sbatch to RUNNING on an idle node.

    HPCOPS_KIND_IMAGES=local molecule converge -s default   # kind, the directory, site.yml
    HPCOPS_KIND_IMAGES=local .venv/bin/python benchmarks/login_kind.py [--trials 20]
    molecule destroy -s default

Runs on the kind cluster of the default scenario as the directory's user ada: her key goes
into her home on the share every kind node mounts, and each trial connects to the login
set's MetalLB address. "SSH to a prompt" is from starting ssh to the remote shell's first
output (a fresh connection each time: key exchange, public key check, the user resolved
through nslcd and the directory, PAM, the shell). "sbatch to RUNNING" is from starting sbatch
on the login pod to squeue saying RUNNING, polled every 0.1 s on the same connection, on the
idle `batch` node, each job cancelled before the next. Prints p50, p95 and the maximum.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

from _common import figure, maximum, median, percentile  # noqa: E402

KIND_DIR = Path(os.environ.get("HPCOPS_KIND_DIR", REPO / ".kind"))
NAMESPACE = "slurm"
USER, UID, ACCOUNT = "ada", 30001, "physics"
PARTITION = "batch"
# On the login pod: sbatch, then squeue every 0.1 s until RUNNING; prints the seconds.
SBATCH_TO_RUNNING = f"""
start=$(date +%s.%N)
job=$(sbatch --parsable -p {PARTITION} -A {ACCOUNT} -c 1 --mem=100M --wrap 'sleep 120' | cut -d';' -f1)
until [ "$(squeue -h -j "$job" -o %T)" = RUNNING ]; do sleep 0.1; done
end=$(date +%s.%N)
scancel "$job"
echo "$start $end"
"""


def kubectl(*args: str) -> str:
    return subprocess.run(
        [str(KIND_DIR / "bin/kubectl"), "--kubeconfig", str(KIND_DIR / "kubeconfig"), *args],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def login_address() -> str:
    return kubectl("get", "svc", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=login", "-o",
                   "jsonpath={.items[0].status.loadBalancer.ingress[0].ip}")  # fmt: skip


def authorize(key: Path) -> None:
    """ada's key in her home's authorized_keys, beside what is there."""
    ssh_dir = KIND_DIR / "home" / USER / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    authorized = ssh_dir / "authorized_keys"
    lines = authorized.read_text().splitlines() if authorized.exists() else []
    authorized.write_text("\n".join([*lines, key.with_suffix(".pub").read_text().strip()]) + "\n")
    authorized.chmod(0o600)
    for path in (ssh_dir, authorized):
        os.chown(path, UID, UID)


def ssh_argv(key: Path, known_hosts: Path, address: str) -> list[str]:
    return ["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "StrictHostKeyChecking=accept-new", f"{USER}@{address}"]  # fmt: skip


def ssh_to_prompt(argv: list[str]) -> float:
    """Seconds from starting ssh to the remote shell's first output."""
    start = time.monotonic()
    process = subprocess.Popen([*argv, "echo ready; sleep 1"], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    took = time.monotonic() - start
    process.wait(timeout=30)
    assert line.strip() == "ready", f"ssh said {line!r}"
    return took


def sbatch_to_running(argv: list[str]) -> float:
    out = subprocess.run(
        [*argv, SBATCH_TO_RUNNING], capture_output=True, text=True, check=True, timeout=180
    )
    start, end = (float(v) for v in out.stdout.split())
    return end - start


def row(name: str, values: list[float]) -> str:
    return (f"{name:<22} {len(values):>6} {figure(median(values)):>8} "
            f"{figure(percentile(values, 0.95)):>8} {figure(maximum(values)):>8}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    address = login_address()
    with tempfile.TemporaryDirectory() as scratch:
        key = Path(scratch) / "ada"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        authorize(key)
        argv = ssh_argv(key, Path(scratch) / "known_hosts", address)
        ssh_to_prompt(argv)  # the host key learnt, ada's home read once
        logins = [ssh_to_prompt(argv) for _trial in range(args.trials)]
        starts = [sbatch_to_running(argv) for _trial in range(max(1, args.trials // 2))]
    print(f"login set at {address} (MetalLB L2), user {USER} from the directory (nslcd sidecar)")
    print(f"{'seconds':<22} {'trials':>6} {'p50':>8} {'p95':>8} {'max':>8}")
    print(row("ssh to a prompt", logins))
    print(row("sbatch to RUNNING", starts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
