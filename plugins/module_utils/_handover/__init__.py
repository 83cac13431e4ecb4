# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: lending Kubernetes nodes to Slurm and taking them back (the handover protocol).

From the bottom up: `model` (the journal, the policy, the states and results), `views`
(Nodes, Pods and Slurm nodes as the decisions see them), `plan` (the pure planner),
`steps` (each step's decision, pure), `options` (the modules' policy option and the role's
settings check), `report` (a run's summary and metrics), `faults` (the seam where tests
stop a run), `kube` (the Kubernetes calls of the protocol) and `executor` (the I/O, step by
step). Imports `_k8s` and `_slurm`, never the other way round.
"""
