"""The deployment files (deploy/): each checked by the tool that reads it, and against the rest.

- deploy/systemd: `systemd-analyze verify` on an instance of the template unit, its exposure
  score (`systemd-analyze security --offline`), and `systemd-sysusers` on the users file;
- deploy/kubernetes: every manifest against the Kubernetes schemas (kubernetes-validate, strict,
  each version in KUBERNETES_VERSIONS), `kubectl kustomize` of the whole, raftmq's own loader on
  the ConfigMap's TOML files, and the StatefulSets against those files (names, ports, env);
- deploy/Containerfile: hadolint, and its user and ports against the StatefulSets.

A test skips only when its tool is not installed (systemd and kubectl come from the system;
kubernetes-validate and hadolint from the [test] extra).
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

try:  # the rule that refuses to expose a port unguarded (RAFTMQ_BIND_HOST=0.0.0.0 needs it met)
    from cluster.exposure import check_exposure
except ImportError:  # a tree from before that rule and bind_host
    check_exposure = None

ROOT = Path(__file__).resolve().parent.parent.parent
DEPLOY = ROOT / "deploy"
UNIT = DEPLOY / "systemd" / "raftmq@.service"
SYSUSERS = DEPLOY / "systemd" / "raftmq.sysusers"
KUBERNETES = DEPLOY / "kubernetes"
CONFIG = KUBERNETES / "config"
KUSTOMIZATION = KUBERNETES / "kustomization.yaml"
CONTAINERFILE = DEPLOY / "Containerfile"
GROUPS = ("g1", "g2", "g3")
# Every minor version whose schemas kubernetes-validate ships, from the oldest we claim on.
KUBERNETES_VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37")
INSTALLED_RAFTMQ = "/opt/raftmq/bin/raftmq"  # the unit's, the image's and the pods' executable
MAX_EXPOSURE = 2.0  # systemd-analyze security's score, 0 safest to 10 worst (the unit: 1.6)
TOOL_TIMEOUT = 60


def tool(name: str) -> str:
    """The path of a command-line tool: the test environment's own first (hadolint from the
    [test] extra), then PATH; skips the test when it is absent."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed")
    return found


def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=TOOL_TIMEOUT,
                          check=False)


# -- systemd ---------------------------------------------------------------------------------------


def installed_unit(tmp_path: Path) -> Path:
    """The unit as instance raftmq@g1-n1.service in `tmp_path`, its executable a stub there:
    `verify` checks that ExecStart's and ExecStop's programs exist."""
    stub = tmp_path / "raftmq"
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    text = UNIT.read_text()
    assert INSTALLED_RAFTMQ in text
    (tmp_path / UNIT.name).write_text(text.replace(INSTALLED_RAFTMQ, str(stub)))
    instance = tmp_path / "raftmq@g1-n1.service"
    instance.symlink_to(UNIT.name)
    return instance


@pytest.mark.integration
def test_the_systemd_unit_verifies_as_an_instance(tmp_path: Path) -> None:
    instance = installed_unit(tmp_path)
    result = run(tool("systemd-analyze"), "verify", "--man=no", instance)
    # An unknown key or a bad value is only a warning (exit status 0): any output fails.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


@pytest.mark.integration
def test_the_systemd_unit_is_hardened(tmp_path: Path) -> None:
    instance = installed_unit(tmp_path)
    result = run(tool("systemd-analyze"), "security", "--offline=yes", "--no-pager", instance)
    assert result.returncode == 0, result.stderr
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout
    assert float(found.group(1)) <= MAX_EXPOSURE, result.stdout


@pytest.mark.integration
def test_the_sysusers_file_creates_the_raftmq_user(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    result = run(tool("systemd-sysusers"), f"--root={tmp_path}", SYSUSERS)
    assert result.returncode == 0, result.stderr
    users = {line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()}
    assert users["raftmq"][5:] == ["/var/lib/raftmq", "/usr/sbin/nologin"]
    assert any(line.startswith("raftmq:") for line in (tmp_path / "etc" / "group").read_text().splitlines())


def unit_settings() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_the_systemd_unit_runs_the_node_and_hands_over_before_it_stops() -> None:
    settings = unit_settings()
    assert settings["ExecStart"] == [f"{INSTALLED_RAFTMQ} node"]
    assert settings["ExecStop"] == [f"-{INSTALLED_RAFTMQ} hand-over"]
    assert settings["EnvironmentFile"] == ["/etc/raftmq/%i.env"]
    assert int(settings["TimeoutStopSec"][0]) >= 30
    assert settings["User"] == settings["Group"] == ["raftmq"]
    assert settings["StateDirectory"] == settings["LogsDirectory"] == settings["ConfigurationDirectory"] == ["raftmq"]


# -- Kubernetes ------------------------------------------------------------------------------------


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    yaml = pytest.importorskip("yaml",
                               reason="PyYAML is not installed (kubernetes-validate of the [test] extra brings it)")
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def kustomization() -> dict[str, Any]:
    (doc,) = yaml_documents(KUSTOMIZATION)
    return doc


def manifests() -> list[dict[str, Any]]:
    return [doc for name in kustomization()["resources"] for doc in yaml_documents(KUBERNETES / name)]


def the(kind: str, name: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    found = [doc for doc in (manifests() if docs is None else docs)
             if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{len(found)} {kind} named {name}"
    return found[0]


def validate(docs: list[dict[str, Any]], version: str) -> list[str]:
    """What kubernetes-validate (strict: no unknown field) finds wrong in `docs` for `version`."""
    validation = pytest.importorskip("kubernetes_validate.utils",
                                     reason="kubernetes-validate is not installed (the [test] extra)")
    errors = []
    for doc in docs:
        try:
            validation.validate(doc, version, strict=True)
        except (validation.ValidationError, validation.SchemaNotFoundError) as exc:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {getattr(exc, 'message', exc)}")
    return errors


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_manifests_are_valid_kubernetes(version: str) -> None:
    docs = manifests()
    assert {doc["kind"] for doc in docs} == {"Namespace", "Secret", "Service", "StatefulSet", "PodDisruptionBudget"}
    assert validate(docs, version) == []


@pytest.mark.integration
def test_kustomize_renders_the_whole_cluster() -> None:
    result = run(tool("kubectl"), "kustomize", KUBERNETES)
    assert result.returncode == 0, result.stderr
    yaml = pytest.importorskip("yaml",
                               reason="PyYAML is not installed (kubernetes-validate of the [test] extra brings it)")
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc is not None]
    assert all(doc["metadata"].get("namespace") == kustomization()["namespace"]
               for doc in docs if doc["kind"] != "Namespace")
    (config_map,) = [doc for doc in docs if doc["kind"] == "ConfigMap"]
    assert config_map["data"] == {path.name: path.read_text() for path in CONFIG.glob("*.toml")}
    for group in GROUPS:  # the generated name (with its hash) replaces the one in the StatefulSet
        (projected,) = [v["projected"] for v in the("StatefulSet", group, docs)["spec"]["template"]["spec"]["volumes"]
                        if "projected" in v]
        assert {"name": config_map["metadata"]["name"]} in [source.get("configMap") for source in projected["sources"]]
    for version in (KUBERNETES_VERSIONS[0], KUBERNETES_VERSIONS[-1]):
        assert validate(docs, version) == []


def self_signed_pair(directory: Path) -> None:
    """tls.crt, tls.key and ca.crt in `directory`, as the Secret raftmq-tls mounts them."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "raftmq")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                   .serial_number(1)
                   .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
    directory.mkdir()
    (directory / "tls.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (directory / "ca.crt").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))  # self-signed: its own CA
    (directory / "tls.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))


def mounted_config(tmp_path: Path) -> Path:
    """The ConfigMap's files as a pod sees them, in `tmp_path`, with /etc/raftmq/ there."""
    self_signed_pair(tmp_path / "tls")
    for name in kustomization()["configMapGenerator"][0]["files"]:
        text = (KUBERNETES / name).read_text()
        assert "/etc/raftmq/" not in text.replace("/etc/raftmq/tls/", "")  # only the TLS pair lies elsewhere
        (tmp_path / Path(name).name).write_text(text.replace("/etc/raftmq/", f"{tmp_path}/"))
    return tmp_path


def secret_values(name: str) -> dict[str, str]:
    return dict(the("Secret", name)["stringData"])


def test_raftmq_loads_the_configmap_as_each_pod_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `raftmq node` does with RAFTMQ_CONFIG, RAFTMQ_TOPOLOGY, RAFTMQ_NODE and RAFTMQ_BIND_HOST:
    load the group file, join the topology, and refuse to expose a port unguarded."""
    from cluster.group_file import load_group_config
    from cluster.node_settings import with_cluster
    from cluster.topology import load_topology

    config = mounted_config(tmp_path)
    passwords = secret_values("raftmq-passwords")
    monkeypatch.setenv("RAFTMQ_CLUSTER_PASSWORD", passwords["cluster-password"])
    for group in GROUPS:
        # Every group file names the same variable, and a pod has its own group's in it.
        monkeypatch.setenv("RAFTMQ_GROUP_PASSWORD", passwords[f"{group}-group-password"])
        topology = load_topology(config / "topology.toml")
        assert [spec.name for spec in topology.groups] == list(GROUPS)
        assert [connection.groups for connection in topology.cluster_connections] == [GROUPS]
        loaded = with_cluster(load_group_config(config / f"{group}.toml"), config / f"{group}.toml",
                              config / "topology.toml")
        assert loaded.password and loaded.server.security.tls is not None and loaded.server.cluster_peers
        if check_exposure is None:
            continue
        exposed = dataclasses.replace(loaded, server=dataclasses.replace(loaded.server, bind_host="0.0.0.0"))
        for member in exposed.members:
            check_exposure(exposed, member.id, f"{group}.toml")


def group_file(group: str) -> dict[str, Any]:
    return tomllib.loads((CONFIG / f"{group}.toml").read_text())


def test_the_bridges_password_is_the_cluster_users() -> None:
    from raftmq.passwords import parse_hash, verify_password

    topology = tomllib.loads((CONFIG / "topology.toml").read_text())
    (connection,) = topology["cluster_connection"]
    password = secret_values("raftmq-passwords")["cluster-password"]
    for group in GROUPS:
        (user,) = [user for user in group_file(group)["user"] if user["name"] == connection["cluster_user"]]
        assert verify_password(password, parse_hash(user["password_hash"])), group


def container(statefulset: dict[str, Any]) -> dict[str, Any]:
    (only,) = statefulset["spec"]["template"]["spec"]["containers"]
    return dict(only)


def environment(spec: dict[str, Any]) -> dict[str, Any]:
    return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in spec["env"]}


@pytest.mark.parametrize("group", GROUPS)
def test_each_statefulset_runs_the_members_of_its_group_file(group: str) -> None:
    docs = manifests()
    raw = group_file(group)
    statefulset, headless = the("StatefulSet", group, docs), the("Service", group, docs)
    spec, pod = statefulset["spec"], statefulset["spec"]["template"]
    namespace = kustomization()["namespace"]
    # Members: one pod each, the pod's name its id, its name in the headless Service its address.
    members = raw["node"]
    assert spec["replicas"] == len(members) and spec["podManagementPolicy"] == "Parallel"
    assert [member["id"] for member in members] == [f"{group}-{i}" for i in range(spec["replicas"])]
    assert spec["serviceName"] == headless["metadata"]["name"]
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    ports = {port["name"]: port["containerPort"] for port in container(statefulset)["ports"]}
    for member in members:
        for kind in ("client", "raft", "admin", "mqtt"):
            assert member[kind] == f"{member['id']}.{spec['serviceName']}.{namespace}.svc.cluster.local:{ports[kind]}"
    # Who finds the pods: the Services and the budget select exactly this group's.
    labels = pod["metadata"]["labels"]
    assert spec["selector"]["matchLabels"] == labels
    client = the("Service", f"{group}-client", docs)
    for service in (headless, client):
        assert service["spec"]["selector"] == labels
        assert all(port["targetPort"] in ports for port in service["spec"]["ports"])
    assert client["spec"]["type"] == "ClusterIP"
    assert [p["port"] for p in client["spec"]["ports"]] == [ports["client"], ports["mqtt"]]  # STOMP, MQTT
    budget = the("PodDisruptionBudget", group, docs)["spec"]
    assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": labels}}
    # What `raftmq node` reads.
    env = environment(container(statefulset))
    config_mount = next(m["mountPath"] for m in container(statefulset)["volumeMounts"] if m["name"] == "config")
    assert env["RAFTMQ_NODE"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["RAFTMQ_CONFIG"] == f"{config_mount}/{group}.toml"
    assert env["RAFTMQ_TOPOLOGY"] == f"{config_mount}/topology.toml"
    assert env["RAFTMQ_BIND_HOST"] == "0.0.0.0"
    topology = tomllib.loads((CONFIG / "topology.toml").read_text())
    secrets = {raw["group"]["password_env"]: f"{group}-group-password",
               topology["cluster_connection"][0]["cluster_password_env"]: "cluster-password"}
    for variable, key in secrets.items():
        assert env[variable] == {"secretKeyRef": {"name": "raftmq-passwords", "key": key}}
        assert key in secret_values("raftmq-passwords")
    assert ({Path(name).name for name in kustomization()["configMapGenerator"][0]["files"]}
            >= {f"{group}.toml", "topology.toml"})
    # Files: the TLS pair where [tls] looks for it, the data where [group] data_dir is.
    (projected,) = [volume["projected"] for volume in pod["spec"]["volumes"] if volume["name"] == "config"]
    tls_items = {item["path"]: item["key"] for source in projected["sources"] if "secret" in source
                 for item in source["secret"]["items"]}
    (connection,) = topology["cluster_connection"]  # the bridges' CA for the other groups' certificate
    assert {f"{config_mount}/{path}" for path in tls_items} == {raw["tls"]["cert_file"], raw["tls"]["key_file"],
                                                                connection["tls_ca_file"]}
    assert set(tls_items.values()) == set(the("Secret", "raftmq-tls", docs)["stringData"])
    assert the("Secret", "raftmq-tls", docs)["type"] == "kubernetes.io/tls"
    data_mount = next(m["mountPath"] for m in container(statefulset)["volumeMounts"] if m["name"] == "data")
    assert raw["group"]["data_dir"] == f"{data_mount}/{group}"
    assert [claim["metadata"]["name"] for claim in spec["volumeClaimTemplates"]] == ["data"]


@pytest.mark.parametrize("group", GROUPS)
def test_each_pod_is_probed_on_its_admin_port_and_hands_over_as_it_stops(group: str) -> None:
    statefulset = the("StatefulSet", group)
    pod, main = statefulset["spec"]["template"]["spec"], container(statefulset)
    admin_port = int(group_file(group)["node"][0]["admin"].rpartition(":")[2])
    ports = {port["name"]: port["containerPort"] for port in main["ports"]}
    paths = {"startupProbe": "/live", "livenessProbe": "/live", "readinessProbe": "/ready"}
    for probe, path in paths.items():
        get = main[probe]["httpGet"]
        # [tls] in the group file: the admin port speaks HTTPS.
        assert (get["path"], ports[get["port"]], get["scheme"]) == (
            path, admin_port, "HTTPS" if "tls" in group_file(group) else "HTTP")
    assert main["lifecycle"]["preStop"]["exec"]["command"] == [INSTALLED_RAFTMQ, "hand-over"]
    assert pod["terminationGracePeriodSeconds"] >= 30


def containerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


@pytest.mark.parametrize("group", GROUPS)
def test_each_pod_runs_the_image_as_built_and_locked_down(group: str) -> None:
    statefulset = the("StatefulSet", group)
    pod, main = statefulset["spec"]["template"]["spec"], container(statefulset)
    instructions = containerfile_instructions()
    # The image: this version, its user, its ports, its entry point.
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert main["image"] == f"raftmq:{version}"
    (user,) = [value for kind, value in instructions if kind == "USER"]
    uid, gid = (int(part) for part in user.split(":"))
    (exposed,) = [value for kind, value in instructions if kind == "EXPOSE"]
    assert sorted(int(port) for port in exposed.split()) == sorted(port["containerPort"] for port in main["ports"])
    assert ("ENTRYPOINT", f'["{INSTALLED_RAFTMQ}"]') in instructions and main["args"] == ["node"]
    # Locked down: the restricted Pod Security Standard and then some.
    security = pod["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"], security["fsGroup"]) == (uid, gid, gid)
    assert security["runAsNonRoot"] is True and security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert main["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                       "capabilities": {"drop": ["ALL"]}}
    assert main["resources"]["requests"] and main["resources"]["limits"]
    namespace = the("Namespace", kustomization()["namespace"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_the_groups_manifests_differ_only_in_the_groups_name() -> None:
    first = (KUBERNETES / f"{GROUPS[0]}.yaml").read_text().splitlines()
    for group in GROUPS[1:]:
        lines = (KUBERNETES / f"{group}.yaml").read_text().splitlines()
        assert lines[1] == first[1]  # names every group's file
        assert [line.replace(GROUPS[0], group) for line in first[:1] + first[2:]] == lines[:1] + lines[2:], group


# -- the image -------------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_containerfile_passes_hadolint() -> None:
    result = run(tool("hadolint"), "--no-color", CONTAINERFILE)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr
