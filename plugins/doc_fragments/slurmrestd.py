# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Options of every module and plugin that talks to slurmrestd."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description:
      - Base URL of slurmrestd, for example V(https://slurmrestd.slurm.svc:6820).
      - If not set, the value of the E(SLURMRESTD_URL) environment variable is used.
    type: str
    required: true
  token:
    description:
      - A JWT for slurmrestd, as printed by C(scontrol token) or kept in a Slinky C(Token) secret.
      - If not set, the value of the E(SLURM_JWT) environment variable is used.
      - Mutually exclusive with O(jwt_key_path).
    type: str
  jwt_key_path:
    description:
      - Path to the JWT key of slurmctld (C(AuthAltParameters=jwt_key=)). A short-lived HS256
        token is minted from it for O(user) on every run, and never shown in results.
      - If not set, the value of the E(SLURM_JWT_KEY_PATH) environment variable is used.
      - Mutually exclusive with O(token).
    type: path
  user:
    description:
      - The Slurm user the requests are made as (C(X-SLURM-USER-NAME)) and, with
        O(jwt_key_path), the user the token is minted for.
    type: str
    default: root
    aliases: [username]
  token_lifespan:
    description: Lifetime in seconds of a token minted from O(jwt_key_path).
    type: int
    default: 300
  api_version:
    description:
      - The slurmrestd API version to use. By default the newest version that both the
        server (from C(GET /openapi/v3)) and this collection speak.
      - Pinning a version the server does not offer is an error that lists what it offers.
    type: str
    choices: [v0.0.41, v0.0.42, v0.0.43, v0.0.44, v0.0.45]
  validate_certs:
    description: Verify the TLS certificate of slurmrestd.
    type: bool
    default: true
    aliases: [verify_ssl]
  ca_path:
    description: A CA bundle to verify the certificate of slurmrestd with.
    type: path
  timeout:
    description: Seconds to wait for each answer of slurmrestd.
    type: float
    default: 30
  retries:
    description:
      - How many times a request is sent again after a connection error, HTTP 429 or 5xx,
        with exponential backoff (1, 2, 4 seconds...) or the server's C(Retry-After).
    type: int
    default: 3
notes:
  - Tokens, minted or given, are never returned or logged.
"""

    # Modules that also talk to Kubernetes (the handover's) can read the token from a Secret.
    FROM_CLUSTER = r"""
options:
  token_secret:
    description:
      - A Secret that holds the slurmrestd token, such as the one a Slinky C(Token) keeps
        fresh. It is read when the module starts and read again whenever slurmrestd rejects
        the token in hand (it expired during a long run), so a run outlives its token.
      - It is read through the Kubernetes API (O(kubeconfig), O(context)); only this option
        and O(jwt_key_secret) need the kubernetes Python library and kubernetes.core.
      - Mutually exclusive with O(token) and O(jwt_key_path).
    type: dict
    suboptions:
      namespace:
        description: The Secret's namespace.
        type: str
        required: true
      name:
        description: The Secret's name.
        type: str
        required: true
      key:
        description: The key that holds the token.
        type: str
        default: auth-token
  jwt_key_secret:
    description:
      - A Secret that holds slurmctld's JWT key (C(AuthAltParameters=jwt_key=)), such as the
        one the slurm chart mounts. The key is read once through the Kubernetes API and kept
        in memory only, never written to a file; a token is minted from it for O(user), and
        minted again when slurmrestd rejects the one in hand.
      - Mutually exclusive with O(token), O(jwt_key_path) and O(token_secret).
    type: dict
    suboptions:
      namespace:
        description: The Secret's namespace.
        type: str
        required: true
      name:
        description: The Secret's name.
        type: str
        required: true
      key:
        description: The key that holds the JWT key.
        type: str
        default: jwt_hs256.key
"""

    ACTIONGROUP = r"""
attributes:
  action_group:
    description: Use C(group/hpcops.slinky.slurmrestd) in C(module_defaults) to set the
      connection options once for every slurmrestd module.
    support: full
    membership:
      - hpcops.slinky.slurmrestd
"""

    # The accounting modules: slurmdbd's records through slurmrestd's /slurmdb/ API.
    ACCOUNTING = r"""
options:
  cluster:
    description:
      - The cluster, as slurmdbd knows it (C(ClusterName) of slurm.conf), the records
        belong to.
      - Unset, the one cluster slurmdbd keeps; an error names them when it keeps several.
    type: str
notes:
  - Needs Slurm with accounting (C(AccountingStorageType=accounting_storage/slurmdbd)) and
    slurmrestd started with C(-s openapi/slurmctld,openapi/slurmdbd). The user the requests
    are made as (O(user)) must be a Slurm administrator or operator, or root.
"""
