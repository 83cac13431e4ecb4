# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the kind benchmarks share: kubectl on the scenarios' cluster, slurmrestd's address
from this host, and a Slinky Token of SlurmUser for their requests."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
KIND_DIR = Path(os.environ.get("HPCOPS_KIND_DIR", REPO / ".kind"))
NAMESPACE = "slurm"


def kubectl(*args: str, stdin: str | None = None, check: bool = True) -> str:
    proc = subprocess.run(
        [str(KIND_DIR / "bin/kubectl"), "--kubeconfig", str(KIND_DIR / "kubeconfig"), *args],
        input=stdin, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args[:3])}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def slurmrestd_url() -> str:
    """The restapi Service's node port on the control plane (as inventories/kind has it)."""
    port = kubectl("get", "svc", "-n", NAMESPACE, "slurm-restapi", "-o",
                   "jsonpath={.spec.ports[0].nodePort}")  # fmt: skip
    address = kubectl("get", "nodes", "-l", "node-role.kubernetes.io/control-plane", "-o",
                      "jsonpath={.items[0].status.addresses[?(@.type=='InternalIP')].address}")  # fmt: skip
    return f"http://{address}:{port}"


def ask_token(name: str) -> str:
    """A Slinky Token `name` of SlurmUser (as the scenarios' verify asks for one); the name of
    the Secret the operator writes it to, once written."""
    kubectl("apply", "-f", "-", stdin=f"""
apiVersion: slinky.slurm.net/v1beta1
kind: Token
metadata: {{name: {name}, namespace: {NAMESPACE}}}
spec:
  username: slurm
  lifetime: 2h
  jwtHs256KeyRef: {{name: slurm-jwt-key, key: jwt_hs256.key}}
  secretRef: {{name: {name}-token, key: auth-token}}
""")  # fmt: skip
    deadline = time.monotonic() + 60
    while not kubectl("get", "secret", "-n", NAMESPACE, f"{name}-token", "--ignore-not-found",
                      "-o", "name"):  # fmt: skip
        if time.monotonic() > deadline:
            raise SystemExit("the operator made no token Secret in 60 s")
        time.sleep(1)
    return f"{name}-token"


def drop_token(name: str) -> None:
    kubectl("delete", "token", "-n", NAMESPACE, name, "--ignore-not-found")
