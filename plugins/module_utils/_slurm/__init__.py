# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: Slurm through slurmrestd, for the collection's modules and plugins.

`rest` is the one slurmrestd client and its normalised JSON; `query` selects nodes and jobs;
`node_change` decides what brings a node to a wanted state; `shared_reads` and `patient`
wrap the client for the handover's worker threads; `module` holds the connection options and
the glue between a module and the client. Imports only `_k8s` (a token from a Secret).
"""
