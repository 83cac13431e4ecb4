# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: what the deploy roles render, as pure functions (no I/O).

`helm_chart` turns a role's chart source into Helm arguments; `slinky_release` knows the
Slinky releases and which versions go together; `slurm_cluster_values` builds the `slurm`
chart's values from the node pools; `slinky_upgrade` says what an upgrade would change.
Imports only `_k8s` (Kubernetes quantities).
"""
