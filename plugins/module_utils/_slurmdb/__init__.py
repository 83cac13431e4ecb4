# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE: Slurm's accounting (slurmdbd) through slurmrestd's /slurmdb/ API.

`fields` maps the settings users write (sacctmgr's names: GrpTRES, MaxJobs, Fairshare)
to and from the API's records; `records` plans the change from what slurmdbd holds to
what is wanted, one entity kind at a time; `api` is the I/O, on the client of `_slurm.rest`.
Pure functions in the first two, so they are tested on recorded answers.
"""
