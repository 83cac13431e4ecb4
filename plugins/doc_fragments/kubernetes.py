# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """How the modules reach the Kubernetes API (through kubernetes.core's client): the
    handover modules always, the Slurm modules to read O(token_secret)."""

    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - The kubeconfig of the cluster. Without it, C(K8S_AUTH_KUBECONFIG), then
        C(~/.kube/config), then the pod's service account (in a CronJob) are used.
    type: path
  context:
    description: The kubeconfig context.
    type: str
requirements:
  - kubernetes >= 24.2.0 (Python)
  - the kubernetes.core collection
"""
