# Copyright (c) hpcops.slinky contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Login sets and the site's directory in the Slinky ``slurm`` chart's values (pure; no I/O).

PRIVATE to the collection: names here can change without notice.

A login set is where people SSH in and run ``sbatch``; the directory (LDAP) is where their
users and groups come from.  Slinky's login image resolves them through SSSD, but slurmctld,
slurmrestd and slurmd do not (slurm-operator #129, #118): a job of a user they cannot
resolve is held.  So every Slurm pod gets the directory's client beside it: a sidecar that
runs the NSS daemon (``sssd`` or Debian's ``nslcd``), its socket shared with the main
container, and the NSS library and ``nsswitch.conf`` that make the main container ask it.
Nothing of the image is changed, so Slinky's images and a site's own work alike.
"""

from __future__ import annotations

import itertools
import re
import typing as t
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.merge import merged, plain
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.metallb import (
    ADDRESS_ANNOTATION,
)

LOGIN_SETS_VAR = "slurm_cluster_login_sets"
DIRECTORY_VAR = "slurm_cluster_directory"
# A login set's name is part of its Deployment's and Service's names.
LOGIN_SET_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,29}$")
SERVICE_TYPES = ("LoadBalancer", "NodePort")
LOGIN_SET_KEYS = frozenset(
    {
        "replicas",
        "root_authorized_keys",
        "sshd_config",
        "resources",
        "node_selector",
        "tolerations",
        "service",
        "values",
    }
)
SERVICE_KEYS = frozenset({"type", "address", "port", "node_port", "annotations"})
# sshd settings the operator and the login pod fix: UsePAM and Subsystem are in the
# operator's sshd_config, the Service and the container port are 22, and the host keys and
# the pid file are the container's. Changing them stops sshd or skips the directory.
SSHD_FIXED = frozenset({"usepam", "port", "hostkey", "pidfile", "subsystem"})
SSHD_KEY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class DirectoryClient:
    """One NSS client of an LDAP directory, as it runs in a sidecar."""

    name: str
    conf_file: str  # the key in the directory Secret, and the file's name
    conf_dir: str
    socket_dir: str  # where the NSS library finds the daemon
    nss_module: str  # its name in nsswitch.conf
    nss_library: str
    command: tuple[str, ...]

    @property
    def conf_path(self) -> str:
        return f"{self.conf_dir}/{self.conf_file}"


DIRECTORY_CLIENTS = {
    # Slinky's login and slurmd images have SSSD (its login image runs it itself).
    "sssd": DirectoryClient(
        name="sssd",
        conf_file="sssd.conf",
        conf_dir="/etc/sssd",
        socket_dir="/var/lib/sss/pipes",
        nss_module="sss",
        nss_library="libnss_sss.so.2",
        command=("sssd", "--interactive", "--logger=stderr"),
    ),
    # Debian's nss-pam-ldapd, where SSSD is not packaged (Debian forky).
    "nslcd": DirectoryClient(
        name="nslcd",
        conf_file="nslcd.conf",
        conf_dir="/etc",
        socket_dir="/run/nslcd",
        nss_module="ldap",
        nss_library="libnss_ldap.so.2",
        command=("nslcd", "--nofork"),
    ),
}
DIRECTORY_KEYS = frozenset(
    {
        "client",
        "uris",
        "base_dn",
        "user_base_dn",
        "group_base_dn",
        "bind_dn",
        "bind_password_secret",
        "tls_ca_secret",
        "start_tls",
        "test_user",
        "image",
        "nss_library_dir",
    }
)
LDAP_URI_RE = re.compile(r"^ldaps?://[^\s/]+/?$")
DN_RE = re.compile(r"^[A-Za-z][A-Za-z0-9-]*=[^,=]+(,\s*[A-Za-z][A-Za-z0-9-]*=[^,=]+)*$")
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
# Users and groups the directory must never answer for: Slurm's own and root.
LOCAL_ONLY = ("root", "slurm")
# Volumes and containers the directory adds to a pod.
SIDECAR = "directory"
NSS_INIT = "directory-nss"
CONF_VOLUME = "directory-conf"
CA_VOLUME = "directory-ca"
SOCKET_VOLUME = "directory-socket"
NSS_VOLUME = "directory-nss"
NSSWITCH_VOLUME = "directory-nsswitch"
CA_PATH = "/etc/hpcops/directory/ca.crt"
CA_MOUNT = {"name": CA_VOLUME, "mountPath": CA_PATH, "subPath": "ca.crt", "readOnly": True}
NSSWITCH_FILE = "nsswitch.conf"
DEFAULT_NSS_LIBRARY_DIR = "/usr/lib/x86_64-linux-gnu"


def _mapping(value: t.Any, variable: str) -> Mapping[str, t.Any]:
    if value in (None, ""):
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            variable, f"expected a mapping, got {type(value).__name__}", "give a mapping"
        )
    return value


def _check_keys(
    given: Mapping[str, t.Any], known: frozenset[str], variable: str, what: str
) -> None:
    """A misspelt or unknown key is named with the ones there are, never ignored."""
    unknown = sorted(set(given) - known)
    if unknown:
        raise ConfigError(
            f"{variable}.{unknown[0]}",
            f"is not a {what} setting",
            f"use {', '.join(sorted(known))}",
        )


def _secret_ref(value: t.Any, variable: str) -> dict[str, str]:
    ref = _mapping(value, variable)
    if not ref.get("name") or not ref.get("key"):
        raise ConfigError(
            variable,
            "needs name and key",
            "give the Secret in the Slurm namespace that holds it, for example {name: ldap-bind, key: password}",
        )
    return {"name": str(ref["name"]), "key": str(ref["key"])}


@dataclass(frozen=True)
class Directory:
    """The site's directory, checked."""

    client: DirectoryClient
    uris: tuple[str, ...]
    base_dn: str
    user_base_dn: str
    group_base_dn: str
    bind_dn: str
    bind_password_secret: Mapping[str, str] | None
    tls_ca_secret: Mapping[str, str] | None
    start_tls: bool
    test_user: str
    image: Mapping[str, str]
    nss_library_dir: str


def _uris(value: t.Any) -> tuple[str, ...]:
    uris = [value] if isinstance(value, str) else value
    if not uris or not isinstance(uris, list):
        raise ConfigError(
            f"{DIRECTORY_VAR}.uris",
            "is empty",
            "give the directory's LDAP URIs, for example [ldaps://ldap1.example.org, ldaps://ldap2.example.org]",
        )
    for index, uri in enumerate(uris):
        if not LDAP_URI_RE.match(str(uri)):
            raise ConfigError(
                f"{DIRECTORY_VAR}.uris[{index}]",
                f"{uri!r} is not an LDAP URI",
                "write it as ldap://host[:port] or ldaps://host[:port]",
            )
    return tuple(str(uri).rstrip("/") for uri in uris)


def _dns(given: Mapping[str, t.Any]) -> dict[str, str]:
    dns = {}
    for key in ("base_dn", "user_base_dn", "group_base_dn", "bind_dn"):
        text = str(given.get(key) or "").strip()
        if text and not DN_RE.match(text):
            raise ConfigError(
                f"{DIRECTORY_VAR}.{key}",
                f"{text!r} is not a distinguished name",
                "write it as attribute=value pairs, for example dc=example,dc=org",
            )
        dns[key] = text
    if not dns["base_dn"]:
        raise ConfigError(
            f"{DIRECTORY_VAR}.base_dn",
            "is empty",
            "give the directory's base DN, for example dc=example,dc=org",
        )
    return dns


def _bind_password_secret(given: Mapping[str, t.Any], bind_dn: str) -> dict[str, str] | None:
    password = given.get("bind_password_secret")
    if bind_dn and not password:
        raise ConfigError(
            f"{DIRECTORY_VAR}.bind_password_secret",
            "is missing while bind_dn is set",
            "give the Secret that holds the bind DN's password ({name: ..., key: ...}); "
            "the password never goes into the inventory",
        )
    if password and not bind_dn:
        raise ConfigError(
            f"{DIRECTORY_VAR}.bind_dn",
            "is missing while bind_password_secret is set",
            "give the DN the clients bind as, or remove bind_password_secret for anonymous reads",
        )
    return _secret_ref(password, f"{DIRECTORY_VAR}.bind_password_secret") if password else None


def _client(given: Mapping[str, t.Any]) -> DirectoryClient:
    _check_keys(given, DIRECTORY_KEYS, DIRECTORY_VAR, "directory")
    name = str(given.get("client", "sssd"))
    if name not in DIRECTORY_CLIENTS:
        raise ConfigError(
            f"{DIRECTORY_VAR}.client",
            f"unknown client {name!r}",
            "use sssd (Slinky's images) or nslcd (images of a distribution without SSSD)",
        )
    return DIRECTORY_CLIENTS[name]


def directory_settings(value: t.Any, default_image: Mapping[str, str]) -> Directory | None:
    """The site's directory from slurm_cluster_directory; None when it has none."""
    given = _mapping(value, DIRECTORY_VAR)
    if not given:
        return None
    client = _client(given)
    uris = _uris(given.get("uris"))
    dns = _dns(given)
    start_tls = bool(given.get("start_tls", False))
    if start_tls and any(uri.startswith("ldaps://") for uri in uris):
        raise ConfigError(
            f"{DIRECTORY_VAR}.start_tls",
            "is set with an ldaps:// URI, which is TLS already",
            "use ldap:// URIs with start_tls, or remove start_tls",
        )
    test_user = str(given.get("test_user") or "")
    if test_user and not USER_NAME_RE.match(test_user):
        raise ConfigError(
            f"{DIRECTORY_VAR}.test_user",
            f"{test_user!r} is not a user name",
            "give a user the directory holds, the one the checks resolve in every Slurm pod",
        )
    image = dict(_mapping(given.get("image"), f"{DIRECTORY_VAR}.image") or default_image)
    if not image.get("repository") or not image.get("tag"):
        raise ConfigError(
            f"{DIRECTORY_VAR}.image",
            "needs repository and tag",
            f"give an image with {client.name} and its NSS library (default: the login image)",
        )
    library_dir = str(given.get("nss_library_dir") or DEFAULT_NSS_LIBRARY_DIR).rstrip("/")
    if not library_dir.startswith("/"):
        raise ConfigError(
            f"{DIRECTORY_VAR}.nss_library_dir",
            f"{library_dir!r} is not an absolute path",
            "give the directory glibc loads NSS modules from in the Slurm images",
        )
    ca = given.get("tls_ca_secret")
    return Directory(
        client=client,
        uris=uris,
        base_dn=dns["base_dn"],
        user_base_dn=dns["user_base_dn"],
        group_base_dn=dns["group_base_dn"],
        bind_dn=dns["bind_dn"],
        bind_password_secret=_bind_password_secret(given, dns["bind_dn"]),
        tls_ca_secret=_secret_ref(ca, f"{DIRECTORY_VAR}.tls_ca_secret") if ca else None,
        start_tls=start_tls,
        test_user=test_user,
        image={"repository": str(image["repository"]), "tag": str(image["tag"])},
        nss_library_dir=library_dir,
    )


def sssd_conf(directory: Directory, bind_password: str, chart_line: str) -> str:
    """sssd.conf for the LDAP directory. SSSD before 2.10 (Slinky 1.1's Ubuntu 24.04
    images) still reads config_file_version, as 1.1's chart writes; 1.2's images ship
    SSSD 2.12, whose chart leaves it out."""
    lines = ["[sssd]"]
    if chart_line == "1.1":
        lines.append("config_file_version = 2")
    lines += [
        "services = nss,pam",
        "domains = DEFAULT",
        "",
        "[nss]",
        f"filter_users = {','.join(LOCAL_ONLY)}",
        f"filter_groups = {','.join(LOCAL_ONLY)}",
        "",
        "[pam]",
        "",
        "[domain/DEFAULT]",
        "id_provider = ldap",
        "auth_provider = ldap",
        f"ldap_uri = {','.join(directory.uris)}",
        f"ldap_search_base = {directory.base_dn}",
    ]
    if directory.user_base_dn:
        lines.append(f"ldap_user_search_base = {directory.user_base_dn}")
    if directory.group_base_dn:
        lines.append(f"ldap_group_search_base = {directory.group_base_dn}")
    if directory.bind_dn:
        lines += [
            f"ldap_default_bind_dn = {directory.bind_dn}",
            "ldap_default_authtok_type = password",
            f"ldap_default_authtok = {bind_password}",
        ]
    if directory.start_tls:
        lines.append("ldap_id_use_start_tls = true")
    if directory.tls_ca_secret:
        lines += [f"ldap_tls_cacert = {CA_PATH}", "ldap_tls_reqcert = demand"]
    # Each pod's daemon asks the directory; a cache of credentials would outlive a removal.
    lines += ["cache_credentials = false", "enumerate = false", ""]
    return "\n".join(lines)


def nslcd_conf(directory: Directory, bind_password: str) -> str:
    """nslcd.conf for the LDAP directory (nss-pam-ldapd 0.9)."""
    lines = ["uid nslcd", "gid nslcd"]
    lines += [f"uri {uri}" for uri in directory.uris]
    lines.append(f"base {directory.base_dn}")
    if directory.user_base_dn:
        lines += [f"base passwd {directory.user_base_dn}", f"base shadow {directory.user_base_dn}"]
    if directory.group_base_dn:
        lines.append(f"base group {directory.group_base_dn}")
    if directory.bind_dn:
        lines += [f"binddn {directory.bind_dn}", f"bindpw {bind_password}"]
    if directory.start_tls:
        lines.append("ssl start_tls")
    if directory.tls_ca_secret:
        lines += [f"tls_cacertfile {CA_PATH}", "tls_reqcert demand"]
    lines += [
        f"nss_initgroups_ignoreusers {','.join(LOCAL_ONLY)}",
        # A directory that does not answer fails a lookup in seconds, not minutes.
        "bind_timelimit 5",
        "timelimit 10",
        "reconnect_retrytime 10",
        "",
    ]
    return "\n".join(lines)


def directory_conf(directory: Directory, bind_password: str, chart_line: str) -> dict[str, str]:
    """The client's configuration file, keyed by its name (the directory Secret's data)."""
    if directory.client.name == "sssd":
        return {directory.client.conf_file: sssd_conf(directory, bind_password, chart_line)}
    return {directory.client.conf_file: nslcd_conf(directory, bind_password)}


def nsswitch_conf(directory: Directory) -> str:
    """nsswitch.conf of the Slurm containers: local files first (root, slurm and the image's
    own users stay local), libnss_slurm where the image has it (Slinky's slurmd: a job's
    own identity), then the directory. glibc skips a module it cannot load."""
    module = directory.client.nss_module
    return "\n".join(
        [
            f"passwd: files slurm {module}",
            f"group: files slurm {module}",
            "shadow: files",
            "hosts: files dns",
            "networks: files",
            "protocols: files",
            "services: files",
            "ethers: files",
            "rpc: files",
            "netgroup: files",
            "",
        ]
    )


def directory_names(release: str) -> dict[str, str]:
    """The Secret and ConfigMap the role writes for the directory."""
    return {"secret": f"{release}-directory", "nsswitch": f"{release}-nsswitch"}


class PodParts(t.NamedTuple):
    """What the directory adds to one pod."""

    volumes: list[dict[str, t.Any]]
    init_containers: list[dict[str, t.Any]]
    sidecar: dict[str, t.Any]
    main_mounts: list[dict[str, t.Any]]


def _pod_parts(directory: Directory, release: str) -> PodParts:
    """The volumes, init container, sidecar and main-container mounts of one pod."""
    client = directory.client
    names = directory_names(release)
    volumes: list[dict[str, t.Any]] = [
        {
            "name": CONF_VOLUME,
            "secret": {
                "secretName": names["secret"],
                "defaultMode": 0o400,
                "items": [{"key": client.conf_file, "path": client.conf_file, "mode": 0o400}],
            },
        },
        {"name": SOCKET_VOLUME, "emptyDir": {"medium": "Memory"}},
        {"name": NSS_VOLUME, "emptyDir": {"medium": "Memory"}},
        {"name": NSSWITCH_VOLUME, "configMap": {"name": names["nsswitch"]}},
    ]
    sidecar_mounts: list[dict[str, t.Any]] = [
        {"name": CONF_VOLUME, "mountPath": client.conf_path,
         "subPath": client.conf_file, "readOnly": True},
        {"name": SOCKET_VOLUME, "mountPath": client.socket_dir},
    ]  # fmt: skip
    if directory.tls_ca_secret:
        volumes.append(_ca_volume(directory.tls_ca_secret))
        sidecar_mounts.append(dict(CA_MOUNT))
    image = f"{directory.image['repository']}:{directory.image['tag']}"
    library = f"{directory.nss_library_dir}/{client.nss_library}"
    init: list[dict[str, t.Any]] = [
        {
            # The main container's image may lack the client's NSS library (Slinky's
            # slurmctld and slurmrestd have none): it gets the sidecar image's copy.
            "name": NSS_INIT,
            "image": image,
            "command": ["cp", library, f"/nss/{client.nss_library}"],
            "volumeMounts": [{"name": NSS_VOLUME, "mountPath": "/nss"}],
        }
    ]
    sidecar: dict[str, t.Any] = {
        "name": SIDECAR,
        "image": image,
        "command": list(client.command),
        # Both daemons start as root to read their 0400 configuration (it holds the bind
        # password) and keep their socket; nslcd then runs as its own user. The pods of
        # slurmctld and slurmrestd run as non-root users, so this container says so itself.
        "securityContext": {"runAsUser": 0, "runAsNonRoot": False},
        "volumeMounts": sidecar_mounts,
    }
    main_mounts: list[dict[str, t.Any]] = [
        {"name": SOCKET_VOLUME, "mountPath": client.socket_dir},
        {"name": NSS_VOLUME, "mountPath": library, "subPath": client.nss_library, "readOnly": True},
        {"name": NSSWITCH_VOLUME, "mountPath": "/etc/nsswitch.conf", "subPath": NSSWITCH_FILE,
         "readOnly": True},
    ]  # fmt: skip
    return PodParts(volumes, init, sidecar, main_mounts)


def _ca_volume(ca: Mapping[str, str]) -> dict[str, t.Any]:
    return {
        "name": CA_VOLUME,
        "secret": {"secretName": ca["name"], "items": [{"key": ca["key"], "path": "ca.crt"}]},
    }


def _add_ca(part: dict[str, t.Any], container_key: str, ca: Mapping[str, str]) -> None:
    pod = part.setdefault("podSpec", {})
    volumes = list(pod.get("volumes") or [])
    pod["volumes"] = (
        [*volumes, _ca_volume(ca)] if all(v.get("name") != CA_VOLUME for v in volumes) else volumes
    )
    container = part.setdefault(container_key, {})
    mounts = list(container.get("volumeMounts") or [])
    container["volumeMounts"] = (
        mounts if any(m.get("mountPath") == CA_PATH for m in mounts) else [*mounts, dict(CA_MOUNT)]
    )


def _add_to_pod(
    part: dict[str, t.Any], container_key: str, directory: Directory, release: str
) -> None:
    """The directory's client in one component's pod, beside what the site's values gave."""
    parts = _pod_parts(directory, release)
    pod = part.setdefault("podSpec", {})
    taken = {v.get("name") for v in pod.get("volumes") or []}
    pod["volumes"] = list(pod.get("volumes") or []) + [
        v for v in parts.volumes if v["name"] not in taken
    ]
    inits = list(pod.get("initContainers") or [])
    pod["initContainers"] = [
        *parts.init_containers,
        *(c for c in inits if c.get("name") != NSS_INIT),
    ]
    containers = list(pod.get("containers") or [])
    pod["containers"] = [*(c for c in containers if c.get("name") != SIDECAR), parts.sidecar]
    container = part.setdefault(container_key, {})
    own = list(container.get("volumeMounts") or [])
    paths = {m.get("mountPath") for m in own}
    container["volumeMounts"] = own + [m for m in parts.main_mounts if m["mountPath"] not in paths]


def add_directory(values: dict[str, t.Any], directory: Directory | None, release: str) -> None:
    """The directory in every Slurm pod: slurmctld, slurmrestd, each NodeSet's slurmd and,
    where the login image does not run the client itself (nslcd), each login set."""
    if directory is None:
        return
    _add_to_pod(values["controller"], "slurmctld", directory, release)
    _add_to_pod(values["restapi"], "slurmrestd", directory, release)
    for nodeset in values.get("nodesets", {}).values():
        if nodeset.get("enabled", True):
            _add_to_pod(nodeset, "slurmd", directory, release)
    for loginset in values.get("loginsets", {}).values():
        if loginset.get("enabled", True) and directory.client.name != "sssd":
            _add_to_pod(loginset, "login", directory, release)
        elif loginset.get("enabled", True) and directory.tls_ca_secret:
            # SSSD in the login image itself reads the CA at the path sssd.conf names.
            _add_ca(loginset, "login", directory.tls_ca_secret)
    if directory.client.name == "sssd":
        # Slinky's login image runs SSSD with the cluster-wide sssd.conf the operator mounts.
        values["sssd"] = {
            "secretRef": {"name": directory_names(release)["secret"], "key": "sssd.conf"}
        }


def away_from_pools(shared_selectors: Sequence[Mapping[str, str]]) -> dict[str, t.Any]:
    """Node affinity that keeps a pod off the nodes of every pool given (lendable, bridge).

    A node is in a pool when it has all of the pool's labels, so it is outside when one of
    them differs: one term per way of picking a label from each pool (terms are ORed, a
    term's expressions ANDed). NotIn also matches a node without the label."""
    if not shared_selectors:
        return {}
    choices = [sorted(selector.items()) for selector in shared_selectors]
    terms = []
    for pick in itertools.product(*choices):
        expressions: dict[str, set[str]] = {}
        for key, value in pick:
            expressions.setdefault(key, set()).add(value)
        terms.append(
            {
                "matchExpressions": [
                    {"key": key, "operator": "NotIn", "values": sorted(values)}
                    for key, values in sorted(expressions.items())
                ]
            }
        )
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def _sshd_config(value: t.Any, variable: str) -> str | None:
    settings = _mapping(value, variable)
    lines = []
    for key, setting in settings.items():
        if not SSHD_KEY_RE.match(str(key)):
            raise ConfigError(
                f"{variable}.{key}",
                "is not an sshd_config keyword",
                "use keywords as sshd_config(5) spells them",
            )
        if str(key).lower() in SSHD_FIXED:
            raise ConfigError(
                f"{variable}.{key}",
                "is set by the login image (sshd would stop answering or skip PAM and the directory)",
                "remove it",
            )
        if isinstance(setting, bool):
            text = "yes" if setting else "no"
        elif isinstance(setting, list):
            text = " ".join(str(s) for s in setting)
        else:
            text = str(setting)
        if not text.strip() or "\n" in text:
            raise ConfigError(
                f"{variable}.{key}",
                "needs a one-line value",
                "give one value, as in sshd_config(5)",
            )
        lines.append(f"{key} {text}")
    return "\n".join(lines) if lines else None


def _service(value: t.Any, variable: str) -> dict[str, t.Any]:
    given = _mapping(value, variable)
    _check_keys(given, SERVICE_KEYS, variable, "service")
    kind = str(given.get("type", "LoadBalancer"))
    if kind not in SERVICE_TYPES:
        raise ConfigError(
            f"{variable}.type",
            f"{kind!r} cannot be reached from outside the cluster",
            "use LoadBalancer (an address from MetalLB's pool or the site's load balancer) or NodePort",
        )
    service: dict[str, t.Any] = {"spec": {"type": kind}}
    annotations = {
        str(k): str(v)
        for k, v in _mapping(given.get("annotations"), f"{variable}.annotations").items()
    }
    if given.get("address"):
        if kind != "LoadBalancer":
            raise ConfigError(
                f"{variable}.address",
                "is for a LoadBalancer Service",
                "remove it, or set type: LoadBalancer",
            )
        annotations[ADDRESS_ANNOTATION] = str(given["address"])
    if annotations:
        service["metadata"] = {"annotations": annotations}
    port = given.get("port", 22)
    if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
        raise ConfigError(
            f"{variable}.port", f"{port!r} is not a port", "give a number from 1 to 65535"
        )
    service["port"] = port
    if given.get("node_port") is not None:
        node_port = given["node_port"]
        if kind != "NodePort":
            raise ConfigError(
                f"{variable}.node_port",
                "is for a NodePort Service",
                "remove it, or set type: NodePort",
            )
        if (
            not isinstance(node_port, int)
            or isinstance(node_port, bool)
            or not 30000 <= node_port <= 32767
        ):
            raise ConfigError(
                f"{variable}.node_port",
                f"{node_port!r} is outside Kubernetes' NodePort range",
                "give a port from 30000 to 32767",
            )
        service["nodePort"] = node_port
    return service


def login_set_values(
    login_sets: t.Any,
    login_image: Mapping[str, str],
    initconf_image: Mapping[str, str],
    shared_selectors: Sequence[Mapping[str, str]],
    node_labels: Sequence[Mapping[str, str]],
) -> dict[str, dict[str, t.Any]]:
    """The chart's loginsets from slurm_cluster_login_sets. Each entry is whole, since the
    1.1 chart has no loginsetDefaults, and kept off the lendable and bridge pools: a login pod
    on a lendable node would count as an application there and hold the node from Slurm, and
    the bridge's taint evicts it from a bridge node."""
    sets = _mapping(login_sets, LOGIN_SETS_VAR)
    out: dict[str, dict[str, t.Any]] = {}
    for name, given_value in sets.items():
        var = f"{LOGIN_SETS_VAR}.{name}"
        if not LOGIN_SET_NAME_RE.match(str(name)):
            raise ConfigError(
                var,
                "is not a valid login set name",
                "use lower-case letters, digits and '-', starting with a letter, at most 30 characters",
            )
        given = _mapping(given_value, var)
        _check_keys(given, LOGIN_SET_KEYS, var, "login set")
        replicas = given.get("replicas", 1)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or not 0 <= replicas <= 100:
            raise ConfigError(
                f"{var}.replicas",
                f"{replicas!r} is not a replica count",
                "give a number from 0 to 100",
            )
        keys = given.get("root_authorized_keys") or []
        if isinstance(keys, str):
            keys = [keys]
        for index, key in enumerate(keys):
            if not re.match(r"^(ssh-|ecdsa-|sk-)\S+ \S+", str(key)):
                raise ConfigError(
                    f"{var}.root_authorized_keys[{index}]",
                    "is not an SSH public key",
                    "give lines as in authorized_keys, for example 'ssh-ed25519 AAAA... admin@site'",
                )
        selector = {
            str(k): str(v)
            for k, v in _mapping(given.get("node_selector"), f"{var}.node_selector").items()
        }
        placeable = [
            labels for labels in node_labels
            if all(labels.get(k) == v for k, v in selector.items())
            and not any(all(labels.get(k) == v for k, v in pool.items()) for pool in shared_selectors)
        ]  # fmt: skip
        if node_labels and not placeable:
            raise ConfigError(
                f"{var}.node_selector",
                f"selects no Kubernetes node outside the lendable and bridge pools ({selector or 'every node'})",
                "select nodes that are never lent nor the bridge's (a login pod on a lendable node would hold it from Slurm)",
            )
        tolerations = given.get("tolerations") or []
        if not isinstance(tolerations, list):
            raise ConfigError(
                f"{var}.tolerations", "expected a list", "give Kubernetes tolerations"
            )
        pod_spec: dict[str, t.Any] = {
            "nodeSelector": {"kubernetes.io/os": "linux", **selector},
            "affinity": away_from_pools(shared_selectors),
            "tolerations": plain(tolerations),
            "initContainers": [],
            "volumes": [],
        }
        entry: dict[str, t.Any] = {
            "enabled": True,
            "replicas": replicas,
            "login": {
                "image": dict(login_image),
                "resources": plain(_mapping(given.get("resources"), f"{var}.resources")),
                "volumeMounts": [],
            },
            "initconf": {"image": dict(initconf_image)},
            "rootSshAuthorizedKeys": "\n".join(str(k) for k in keys) if keys else None,
            "extraSshdConfig": _sshd_config(given.get("sshd_config"), f"{var}.sshd_config"),
            "podSpec": pod_spec,
            "service": _service(given.get("service"), f"{var}.service"),
        }
        out[str(name)] = merged(entry, _mapping(given.get("values"), f"{var}.values"))
    return out


def login_sets_not_ready(deployments: Sequence[Mapping[str, t.Any]], expected: int) -> list[str]:
    """The login sets whose pods are not all ready (their Deployments, by name), and how many
    the operator has not made yet."""
    waiting = []
    for deployment in sorted(deployments, key=lambda d: d.get("metadata", {}).get("name", "")):
        wanted = int((deployment.get("spec") or {}).get("replicas", 1))
        status = deployment.get("status") or {}
        ready = int(status.get("readyReplicas") or 0)
        current = status.get("observedGeneration", 0) >= deployment["metadata"].get("generation", 0)
        if ready < wanted or int(status.get("updatedReplicas") or 0) < wanted or not current:
            waiting.append(f"{deployment['metadata']['name']} ({ready} of {wanted} ready)")
    missing = expected - len(deployments)
    if missing > 0:
        waiting.append(f"{missing} login set(s) the operator has not made yet")
    return waiting


def _service_name(service: Mapping[str, t.Any]) -> str:
    return str(service.get("metadata", {}).get("name", ""))


def login_services_pending(services: Sequence[Mapping[str, t.Any]]) -> list[str]:
    """The LoadBalancer Services the load balancer has given no address yet."""
    return sorted(
        _service_name(service)
        for service in services
        if (service.get("spec") or {}).get("type") == "LoadBalancer"
        and not ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress")
    )


def login_addresses(services: Sequence[Mapping[str, t.Any]]) -> dict[str, dict[str, t.Any]]:
    """How each login Service is reached: its load balancer address and port, or its node
    port on every node."""
    found = {}
    for service in services:
        spec = service.get("spec") or {}
        port = (spec.get("ports") or [{}])[0]
        if spec.get("type") == "LoadBalancer":
            ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
            found[_service_name(service)] = {
                "type": "LoadBalancer",
                "addresses": [i.get("ip") or i.get("hostname") for i in ingress],
                "port": port.get("port"),
            }
        elif spec.get("type") == "NodePort":
            found[_service_name(service)] = {"type": "NodePort", "port": port.get("nodePort")}
    return found
