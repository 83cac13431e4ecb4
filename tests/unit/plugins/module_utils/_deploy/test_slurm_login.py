# SPDX-License-Identifier: GPL-3.0-or-later
"""Login sets and the site's directory in the slurm chart's values, on both Slinky lines."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.errors import ConfigError
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.metallb import (
    login_address_problems,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_cluster_values import (
    build_values,
    directory_objects,
)
from ansible_collections.hpcops.slinky.plugins.module_utils._deploy.slurm_login import (
    directory_settings,
    login_addresses,
    login_services_pending,
    login_set_values,
    login_sets_not_ready,
    nsswitch_conf,
)

LOGIN_IMAGE = {"repository": "mirror/slinkyproject/login", "tag": "26.05-ubuntu26.04"}
INITCONF_IMAGE = {"repository": "mirror/library/alpine", "tag": "3.22"}
NODES = [
    {"hpcops.io/pool": "services"},
    {"hpcops.io/pool": "interactive"},
    {"hpcops.io/pool": "interactive", "hpcops.io/gpu": "true"},
]
DIRECTORY = {
    "uris": ["ldaps://ldap1.example.org", "ldaps://ldap2.example.org:636"],
    "base_dn": "dc=example,dc=org",
    "user_base_dn": "ou=people,dc=example,dc=org",
    "bind_dn": "cn=reader,dc=example,dc=org",
    "bind_password_secret": {"name": "ldap-bind", "key": "password"},
    "tls_ca_secret": {"name": "ldap-ca", "key": "ca.crt"},
    "test_user": "alice",
}


def login_sets(
    sets: t.Any, lendable: t.Any = ({"hpcops.io/pool": "interactive"},)
) -> dict[str, t.Any]:
    return login_set_values(sets, LOGIN_IMAGE, INITCONF_IMAGE, list(lendable), NODES)


def site(chart_version: str, **settings: t.Any) -> dict[str, t.Any]:
    return {
        "name": "hpc",
        "release": "slurm",
        "chart_version": chart_version,
        "slurm_version": "26.05" if chart_version.startswith("1.2") else "25.11",
        "image_registry": "mirror/slinkyproject",
        "pools": {
            "cpu": {"kind": "dedicated", "node_selector": {"hpcops.io/pool": "slurm-cpu"}},
            "interactive": {"kind": "lendable", "node_selector": {"hpcops.io/pool": "interactive"}},
        },
        **settings,
    }


K8S_NODES = [
    {"metadata": {"name": name, "labels": {"hpcops.io/pool": pool}},
     "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}
    for name, pool in (("cpu01", "slurm-cpu"), ("jup01", "interactive"), ("svc01", "services"))
]  # fmt: skip


def test_a_login_set_is_whole_and_kept_off_the_lendable_pools() -> None:
    built = login_sets(
        {
            "team-a": {
                "replicas": 2,
                "node_selector": {"hpcops.io/pool": "services"},
                "root_authorized_keys": ["ssh-ed25519 AAAAC3Nza admin@site"],
                "sshd_config": {
                    "PasswordAuthentication": False,
                    "AllowGroups": ["physics", "chemistry"],
                },
                "service": {"address": "10.20.3.241"},
            }
        }
    )["team-a"]
    assert built["replicas"] == 2
    assert built["login"]["image"] == LOGIN_IMAGE and built["initconf"]["image"] == INITCONF_IMAGE
    assert built["rootSshAuthorizedKeys"] == "ssh-ed25519 AAAAC3Nza admin@site"
    assert built["extraSshdConfig"] == "PasswordAuthentication no\nAllowGroups physics chemistry"
    assert built["podSpec"]["nodeSelector"] == {
        "kubernetes.io/os": "linux",
        "hpcops.io/pool": "services",
    }
    terms = built["podSpec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "hpcops.io/pool", "operator": "NotIn", "values": ["interactive"]}
                ]
            }
        ]
    }
    assert built["service"] == {
        "spec": {"type": "LoadBalancer"},
        "metadata": {"annotations": {"metallb.universe.tf/loadBalancerIPs": "10.20.3.241"}},
        "port": 22,
    }


def test_two_label_pools_are_avoided_by_every_way_of_differing() -> None:
    """Outside pool {a, b} and pool {c}: (not a or not b) and not c, as ORed terms."""
    built = login_sets({"x": {}}, lendable=[{"a": "1", "b": "2"}, {"c": "3"}])["x"]
    terms = built["podSpec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [[(e["key"], e["values"]) for e in term["matchExpressions"]] for term in terms] == [
        [("a", ["1"]), ("c", ["3"])],
        [("b", ["2"]), ("c", ["3"])],
    ]


def test_no_lendable_pool_no_affinity_and_node_port_as_given() -> None:
    built = login_sets(
        {"x": {"service": {"type": "NodePort", "node_port": 32222, "port": 2222}}}, lendable=[]
    )["x"]
    assert built["podSpec"]["affinity"] == {}
    assert built["service"] == {"spec": {"type": "NodePort"}, "port": 2222, "nodePort": 32222}


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        ({"Team": {}}, "slurm_cluster_login_sets.Team: is not a valid login set name"),
        ({"a": {"replica": 2}}, "slurm_cluster_login_sets.a.replica: is not a login set setting"),
        ({"a": {"replicas": -1}}, "slurm_cluster_login_sets.a.replicas: -1 is not a replica count"),
        (
            {"a": {"node_selector": {"hpcops.io/pool": "interactive"}}},
            "slurm_cluster_login_sets.a.node_selector: selects no Kubernetes node outside the lendable and bridge pools",
        ),
        ({"a": {"root_authorized_keys": ["hunter2"]}}, "slurm_cluster_login_sets.a.root_authorized_keys[0]: is not an SSH public key"),
        ({"a": {"sshd_config": {"UsePAM": False}}}, "slurm_cluster_login_sets.a.sshd_config.UsePAM: is set by the login image"),
        ({"a": {"sshd_config": {"Match": "a\nb"}}}, "slurm_cluster_login_sets.a.sshd_config.Match: needs a one-line value"),
        ({"a": {"service": {"type": "ClusterIP"}}}, "slurm_cluster_login_sets.a.service.type: 'ClusterIP' cannot be reached"),
        ({"a": {"service": {"type": "NodePort", "address": "10.0.0.1"}}}, "slurm_cluster_login_sets.a.service.address: is for a LoadBalancer Service"),
        ({"a": {"service": {"type": "NodePort", "node_port": 22}}}, "slurm_cluster_login_sets.a.service.node_port: 22 is outside"),
        ({"a": {"service": {"node_port": 32000}}}, "slurm_cluster_login_sets.a.service.node_port: is for a NodePort Service"),
        ({"a": {"service": {"port": 70000}}}, "slurm_cluster_login_sets.a.service.port: 70000 is not a port"),
        ({"a": {"service": {"externalIPs": ["1.2.3.4"]}}}, "slurm_cluster_login_sets.a.service.externalIPs: is not a service setting"),
    ],
)  # fmt: skip
def test_bad_login_sets_name_the_field_and_the_fix(sets: t.Any, said: str) -> None:
    with pytest.raises(ConfigError) as err:
        login_sets(sets)
    assert str(err.value).startswith(said), err.value
    assert "; " in str(err.value)  # the fix follows


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"client": "winbind"}, "slurm_cluster_directory.client: unknown client 'winbind'"),
        ({"uris": []}, "slurm_cluster_directory.uris: is empty"),
        ({"uris": ["ldap1.example.org"]}, "slurm_cluster_directory.uris[0]: 'ldap1.example.org' is not an LDAP URI"),
        ({"base_dn": ""}, "slurm_cluster_directory.base_dn: is empty"),
        ({"base_dn": "example.org"}, "slurm_cluster_directory.base_dn: 'example.org' is not a distinguished name"),
        ({"bind_password_secret": None}, "slurm_cluster_directory.bind_password_secret: is missing while bind_dn is set"),
        ({"bind_dn": ""}, "slurm_cluster_directory.bind_dn: is missing while bind_password_secret is set"),
        ({"bind_password_secret": {"name": "x"}}, "slurm_cluster_directory.bind_password_secret: needs name and key"),
        ({"start_tls": True}, "slurm_cluster_directory.start_tls: is set with an ldaps:// URI"),
        ({"test_user": "Alice Smith"}, "slurm_cluster_directory.test_user: 'Alice Smith' is not a user name"),
        ({"bind_password": "hunter2"}, "slurm_cluster_directory.bind_password: is not a directory setting"),
    ],
)  # fmt: skip
def test_bad_directory_settings_name_the_field_and_the_fix(
    change: dict[str, t.Any], said: str
) -> None:
    with pytest.raises(ConfigError) as err:
        directory_settings({**DIRECTORY, **change}, LOGIN_IMAGE)
    assert str(err.value).startswith(said), err.value
    assert "hunter2" not in str(err.value)


def objects(chart_version: str, client: str = "sssd") -> dict[str, dict[str, t.Any]]:
    found = directory_objects(
        site(chart_version, directory={**DIRECTORY, "client": client}), "s3cret", "slurm"
    )
    return {obj["kind"]: obj for obj in found}


def test_sssd_conf_follows_each_line_and_holds_the_password_only_in_its_secret() -> None:
    conf_1_1 = objects("1.1.2")["Secret"]["stringData"]["sssd.conf"]
    conf_1_2 = objects("1.2.1")["Secret"]["stringData"]["sssd.conf"]
    assert "config_file_version = 2" in conf_1_1 and "config_file_version" not in conf_1_2
    for conf in (conf_1_1, conf_1_2):
        assert "ldap_uri = ldaps://ldap1.example.org,ldaps://ldap2.example.org:636" in conf
        assert "ldap_default_authtok = s3cret" in conf
        assert "ldap_tls_cacert = /etc/hpcops/directory/ca.crt" in conf
        assert "filter_users = root,slurm" in conf
        assert "files" not in conf  # SSSD 2.12 removed the files provider
    nsswitch = objects("1.2.1")["ConfigMap"]
    assert nsswitch["metadata"]["name"] == "slurm-nsswitch"
    assert "s3cret" not in str(nsswitch)
    values = build_values(site("1.2.1", directory=DIRECTORY), K8S_NODES)
    assert "s3cret" not in str(values)


def test_nslcd_conf_and_nsswitch() -> None:
    found = objects("1.2.1", client="nslcd")
    conf = found["Secret"]["stringData"]["nslcd.conf"]
    assert conf.splitlines()[:4] == [
        "uid nslcd",
        "gid nslcd",
        "uri ldaps://ldap1.example.org",
        "uri ldaps://ldap2.example.org:636",
    ]
    assert "bindpw s3cret" in conf and "base passwd ou=people,dc=example,dc=org" in conf
    directory = directory_settings({**DIRECTORY, "client": "nslcd"}, LOGIN_IMAGE)
    assert directory is not None
    assert nsswitch_conf(directory).splitlines()[:2] == [
        "passwd: files slurm ldap",
        "group: files slurm ldap",
    ]


@pytest.mark.parametrize("chart_version", ["1.1.2", "1.2.1"])
@pytest.mark.parametrize("client", ["sssd", "nslcd"])
def test_every_slurm_pod_gets_the_directory(chart_version: str, client: str) -> None:
    values = build_values(
        site(
            chart_version,
            directory={**DIRECTORY, "client": client},
            login_sets={"team-a": {"node_selector": {"hpcops.io/pool": "services"}}},
            values={"controller": {"podSpec": {"volumes": [{"name": "site-own", "emptyDir": {}}]}}},
        ),
        K8S_NODES,
    )
    pods = {
        "controller": (values["controller"], "slurmctld"),
        "restapi": (values["restapi"], "slurmrestd"),
        "cpu": (values["nodesets"]["cpu"], "slurmd"),
        "interactive": (values["nodesets"]["interactive"], "slurmd"),
    }
    if client == "nslcd":
        pods["login"] = (values["loginsets"]["team-a"], "login")
    socket = "/var/lib/sss/pipes" if client == "sssd" else "/run/nslcd"
    for where, (part, container) in pods.items():
        sidecars = [c for c in part["podSpec"]["containers"] if c["name"] == "directory"]
        assert len(sidecars) == 1, where
        assert sidecars[0]["command"][0] == client
        mounts = {m["mountPath"] for m in part[container]["volumeMounts"]}
        assert {socket, "/etc/nsswitch.conf"} <= mounts, where
        assert [i["name"] for i in part["podSpec"]["initContainers"]].count("directory-nss") == 1
    # The site's own volumes stay beside the directory's.
    assert "site-own" in {v["name"] for v in values["controller"]["podSpec"]["volumes"]}
    login = values["loginsets"]["team-a"]
    if client == "sssd":
        assert values["sssd"] == {"secretRef": {"name": "slurm-directory", "key": "sssd.conf"}}
        assert "containers" not in login["podSpec"]  # the login image runs SSSD itself
        assert [m["mountPath"] for m in login["login"]["volumeMounts"]] == [
            "/etc/hpcops/directory/ca.crt"
        ]


def test_the_login_sets_are_the_same_on_both_lines_but_the_1_1_sample_stays_off() -> None:
    sets = {"team-a": {"node_selector": {"hpcops.io/pool": "services"}}}
    on_1_1 = build_values(site("1.1.2", login_sets=sets), K8S_NODES)["loginsets"]
    on_1_2 = build_values(site("1.2.1", login_sets=sets), K8S_NODES)["loginsets"]
    assert on_1_1.pop("slinky") == {"enabled": False}
    assert on_1_1["team-a"]["login"]["image"]["tag"] == "25.11-ubuntu24.04"
    on_1_1["team-a"]["login"]["image"]["tag"] = "26.05-ubuntu26.04"
    assert on_1_1 == on_1_2


def test_a_login_address_outside_metallb_pools_is_refused() -> None:
    values = {
        "loginsets": {
            "a": {
                "service": {
                    "metadata": {
                        "annotations": {"metallb.universe.tf/loadBalancerIPs": "10.20.3.241"}
                    }
                }
            },
            "b": {
                "service": {
                    "metadata": {
                        "annotations": {"metallb.universe.tf/loadBalancerIPs": "10.20.9.1"}
                    }
                }
            },
            "c": {"service": {"spec": {"type": "NodePort"}}},
        }
    }
    pools = [
        {"name": "login", "addresses": ["10.20.3.240/29"]},
        {"name": "x", "addresses": ["10.20.4.1-10.20.4.9"]},
    ]
    assert login_address_problems(values, pools) == [
        "slurm_cluster_login_sets.b.service.address: 10.20.9.1 is in no pool of metallb_address_pools, "
        "so MetalLB would never give it; pick an address of a pool or add one"
    ]


def deployment(
    name: str, replicas: int, ready: int, generation: int = 1, observed: int = 1
) -> dict[str, t.Any]:
    return {
        "metadata": {"name": name, "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "readyReplicas": ready,
            "updatedReplicas": ready,
            "observedGeneration": observed,
        },
    }


def test_login_sets_not_ready_names_each_and_counts_the_missing() -> None:
    assert login_sets_not_ready([deployment("slurm-login-a", 2, 2)], 1) == []
    assert login_sets_not_ready(
        [deployment("slurm-login-a", 2, 1), deployment("slurm-login-b", 1, 1, 2, 1)], 3
    ) == [
        "slurm-login-a (1 of 2 ready)",
        "slurm-login-b (1 of 1 ready)",
        "1 login set(s) the operator has not made yet",
    ]


def test_services_without_an_address_and_how_each_is_reached() -> None:
    services = [
        {"metadata": {"name": "slurm-login-a"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 22}]},
         "status": {"loadBalancer": {"ingress": [{"ip": "10.20.3.241"}]}}},
        {"metadata": {"name": "slurm-login-b"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 22}]},
         "status": {"loadBalancer": {}}},
        {"metadata": {"name": "slurm-login-c"}, "spec": {"type": "NodePort", "ports": [{"port": 22, "nodePort": 32222}]}},
    ]  # fmt: skip
    assert login_services_pending(services) == ["slurm-login-b"]
    assert login_addresses(services) == {
        "slurm-login-a": {"type": "LoadBalancer", "addresses": ["10.20.3.241"], "port": 22},
        "slurm-login-b": {"type": "LoadBalancer", "addresses": [], "port": 22},
        "slurm-login-c": {"type": "NodePort", "port": 32222},
    }
