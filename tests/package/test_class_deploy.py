"""The class view's deployment: the container recipes install the [class] extra, and the
Kubernetes manifest (examples/k8s/class-view.yaml) parses, hangs together (selectors, ports,
volumes, the token from a Secret, the database on a claim) and runs a command gdrlab accepts.
No cluster and no container engine run here: the manifest is checked, not applied."""
from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from conftest import UNDER_ASAN

if UNDER_ASAN:
    pytest.skip("packaging and deployment tests run in the plain suite, not the sanitizer re-run",
                allow_module_level=True)

import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "k8s" / "class-view.yaml"
INSTALL_CLASS = '/opt/venv/bin/python -m pip install -q -c constraints.txt "gdrlab[class]"'


def _docs() -> dict[str, dict]:
    docs = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    kinds = [d["kind"] for d in docs]
    assert sorted(kinds) == ["Deployment", "PersistentVolumeClaim", "Service"], kinds
    return {d["kind"]: d for d in docs}


def _commands(text: str) -> list[str]:
    """The shell commands of a recipe's install step, continuation lines joined."""
    return [c.strip() for c in text.replace("\\\n", " ").replace("&&", "\n").splitlines() if c.strip()]


@pytest.mark.parametrize("recipe", ["Dockerfile", "gdrlab.def"])
def test_images_install_the_class_extra_after_gdrlab(recipe):
    cmds = _commands((ROOT / recipe).read_text())
    cmds = [c[4:].strip() if c.startswith("RUN ") else c for c in cmds]
    gdrlab = next(i for i, c in enumerate(cmds) if c.startswith("bash scripts/install-gdrlab.sh"))
    assert INSTALL_CLASS in cmds[gdrlab + 1:], f"{recipe}: the [class] extra is not installed after gdrlab"
    # pinned: the same constraints file as everything else in the image
    assert "-c constraints.txt" in shlex.join(shlex.split(INSTALL_CLASS))


def test_dockerfile_exposes_the_class_view_port():
    lines = [ln.split()[1:] for ln in (ROOT / "Dockerfile").read_text().splitlines() if ln.startswith("EXPOSE ")]
    assert any("8731" in ports for ports in lines), lines


def test_the_class_extra_has_the_server_and_the_parquet_writer():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["class"]
    names = {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in extra}
    assert {"starlette", "uvicorn", "sqlalchemy", "plotly", "pyarrow"} <= names, names


def test_manifest_parses_and_hangs_together():
    docs = _docs()
    dep, svc, pvc = docs["Deployment"], docs["Service"], docs["PersistentVolumeClaim"]
    assert dep["apiVersion"] == "apps/v1" and svc["apiVersion"] == "v1" and pvc["apiVersion"] == "v1"
    spec = dep["spec"]
    # one writer of the SQLite file: one replica, replaced rather than rolled
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    (container,) = spec["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for p in svc["spec"]["ports"]:
        target = p["targetPort"]
        assert (target in ports) if isinstance(target, str) else (target in ports.values()), p
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz" and container[probe]["httpGet"]["port"] in ports
    assert "nvidia.com/gpu" not in container.get("resources", {}).get("limits", {})  # no GPU to draw a page


def test_manifest_command_is_one_gdrlab_accepts_with_token_and_database_on_volumes():
    docs = _docs()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[:3] == ["gdrlab", "class", "serve"]
    from gdrlab.cli import build_parser
    args = build_parser().parse_args(command[1:])
    assert args.class_command == "serve"
    host, _, port = args.listen.rpartition(":")
    assert host == "0.0.0.0" and int(port) in {p["containerPort"] for p in container["ports"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    # the token comes from a Secret, as a file readable by its owner only; never inline
    token_mount = next(m for m in mounts.values() if args.token_file.startswith(m["mountPath"] + "/"))
    secret = volumes[token_mount["name"]]["secret"]
    assert secret["secretName"] and token_mount.get("readOnly") is True
    assert secret["defaultMode"] == 0o400
    item = next(i for i in secret["items"] if args.token_file == token_mount["mountPath"] + "/" + i["path"])
    assert item["key"]
    assert not any(e.get("name") == "GDRLAB_TOKEN" and "value" in e for e in container.get("env", []))
    # the SQLite file lives on the claim, so a restarted pod keeps the class
    db_mount = next(m for m in mounts.values() if args.db.startswith(m["mountPath"] + "/"))
    claim = volumes[db_mount["name"]]["persistentVolumeClaim"]["claimName"]
    assert claim == docs["PersistentVolumeClaim"]["metadata"]["name"]
    assert docs["PersistentVolumeClaim"]["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert args.public_url and args.public_url.rstrip("/").endswith(
        f"{docs['Service']['metadata']['name']}:{docs['Service']['spec']['ports'][0]['port']}")


def test_the_probed_route_exists_and_needs_no_token(tmp_path):
    pytest.importorskip("starlette", reason="the class view needs the 'class' extra")
    import json
    import urllib.request

    from gdrlab.classroom.app import ClassConfig
    from gdrlab.classroom.server import BackgroundServer
    from gdrlab.classroom.store import open_store
    path = _docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"]
    store = open_store(str(tmp_path / "probe.sqlite"))
    try:
        with BackgroundServer(store, ClassConfig(instructor_token="t" * 32, join_token="j" * 16)) as srv:
            with urllib.request.urlopen(srv.url.rstrip("/") + path, timeout=30) as resp:
                assert resp.status == 200 and json.loads(resp.read())["ok"] is True
    finally:
        store.close()
