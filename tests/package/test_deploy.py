"""The deployment recipes, tested as far as this machine allows: they install through the one pair
of scripts CI runs, the shell scripts pass shellcheck, binder/postBuild runs in a plain venv, the
Slurm script's body runs under `mpirun -n 2`, the Kubernetes pods parse and ask for the resources.
No container engine, conda or Slurm runs here: image builds and Binder itself are not exercised."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TIME_SCALE, UNDER_ASAN

if UNDER_ASAN:
    # DESIGN.md: the sanitizer re-run covers tests that reach native code; these run once
    pytest.skip("packaging and deployment tests run in the plain suite, not the sanitizer re-run",
                allow_module_level=True)

import yaml  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CI = os.environ.get("CI") == "true"
SYSTEM_DEPS = "scripts/install-system-deps.sh"
PY_DEPS = "scripts/install-gdrlab.sh"
SHELL_SCRIPTS = sorted([*ROOT.glob("scripts/*.sh"), *ROOT.glob("bench/*.sh"), ROOT / ".ci" / "run",
                        ROOT / "binder" / "postBuild", *ROOT.glob("examples/slurm/*.sbatch")])
LABS = sorted(p.parent.name for p in (ROOT / "labs" / "source").glob("*/*.ipynb"))


def _missing(tool: str, install: str) -> None:
    """Skip here, fail on CI, when a tool the recipes' tests need is absent."""
    if shutil.which(tool) is None:
        msg = f"{tool} not found ({install}; scripts/install-system-deps.sh installs it)"
        if CI:
            pytest.fail(msg + " on CI", pytrace=False)
        pytest.skip(msg)


def _copied_sources() -> dict[str, list[str]]:
    """What the Dockerfile's COPY lines and the Apptainer %files section take from the repository."""
    docker = []
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            docker += line.split()[1:-1]
    text = (ROOT / "gdrlab.def").read_text()
    files = re.search(r"^%files\n(.*?)(?=^%)", text, re.M | re.S).group(1)
    apptainer = [line.split()[0] for line in files.splitlines() if line.strip()]
    return {"Dockerfile": docker, "gdrlab.def": apptainer}


def test_recipes_install_through_the_scripts_ci_runs():
    makefile = (ROOT / "Makefile").read_text()
    assert PY_DEPS in makefile and "-c \"$ROOT/constraints.txt\"" in (ROOT / PY_DEPS).read_text()
    for name in ("Dockerfile", "gdrlab.def"):
        text = (ROOT / name).read_text()
        assert f"bash {SYSTEM_DEPS} --lab" in text and f"bash {PY_DEPS} " in text, name
    post = (ROOT / "binder" / "postBuild").read_text()
    assert f"bash {PY_DEPS} " in post
    assert "--gpus all" in (ROOT / "Dockerfile").read_text() and "--nv" in (ROOT / "gdrlab.def").read_text()


def test_images_copy_what_exists_and_no_answers():
    for recipe, sources in _copied_sources().items():
        assert sources, recipe
        for src in sources:
            assert (ROOT / src).exists(), f"{recipe} copies {src}, which does not exist"
            assert src not in (".", "labs", "scripts") and not src.startswith(("labs/", "scripts/labs")), \
                f"{recipe} copies {src}: the lab sources hold the solutions"
        assert {"gdrlab", "native", "pyproject.toml", "constraints.txt", SYSTEM_DEPS, PY_DEPS} <= set(sources), recipe


def test_constraints_satisfy_the_declared_requirements():
    import tomllib

    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = project["dependencies"] + [r for extra in project["optional-dependencies"].values() for r in extra]
    checked = 0
    for text in reqs:
        req = Requirement(text)
        pin = pins.get(req.name.lower().replace("_", "-"))
        if pin is not None:
            assert req.specifier.contains(pin, prereleases=True), f"constraints.txt pins {req.name}=={pin}, not {req}"
            checked += 1
    assert checked >= 10, f"only {checked} requirements are pinned in constraints.txt"


def test_binder_environment_has_the_build_tools():
    env = yaml.safe_load((ROOT / "binder" / "environment.yml").read_text())
    deps = " ".join(str(d) for d in env["dependencies"])
    for tool in ("python", "cxx-compiler", "cmake", "pip"):
        assert tool in deps, tool


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_shellcheck(script):
    _missing("shellcheck", "apt-get install shellcheck")
    proc = subprocess.run(["shellcheck", "-S", "warning", "-s", "bash", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_kubernetes_pods_parse_and_request_gpu_rdma_and_shm():
    docs = list(yaml.safe_load_all((ROOT / "examples" / "k8s" / "gdrlab-lab.yaml").read_text()))
    rdma_seen = set()
    for pod in docs:
        assert pod["kind"] == "Pod" and pod["apiVersion"] == "v1"
        (container,) = pod["spec"]["containers"]
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] >= 1
        rdma_seen |= set(limits) & {"rdma/hca", "vpc.amazonaws.com/efa"}
        assert "IPC_LOCK" in container["securityContext"]["capabilities"]["add"]
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        shm = [n for n, path in mounts.items() if path == "/dev/shm"]
        assert shm and volumes[shm[0]]["emptyDir"]["medium"] == "Memory"
        assert container["command"][:2] == ["gdrlab", "lab"] and "--ip=0.0.0.0" in container["command"]
    assert rdma_seen == {"rdma/hca", "vpc.amazonaws.com/efa"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_slurm_script_body_under_mpirun(tmp_path):
    _missing("mpirun", "apt-get install openmpi-bin libopenmpi-dev")
    try:
        import mpi4py  # noqa: F401
    except ImportError as exc:
        (pytest.fail if CI else pytest.skip)(f"mpi4py not importable ({exc}): pip install mpi4py")
    version = subprocess.run(["mpirun", "--version"], capture_output=True, text=True).stdout
    flags = "--allow-run-as-root --oversubscribe " if "Open MPI" in version else ""
    env = dict(os.environ, HOME=str(tmp_path), SLURM_JOB_ID="4242", SLURM_JOB_NUM_NODES="2", SLURM_NNODES="2",
               SLURM_JOB_NODELIST="node[1-2]", SLURM_SUBMIT_DIR=str(tmp_path),
               GDRLAB=f"{sys.executable} -m gdrlab", GDRLAB_LAUNCH=f"mpirun {flags}-n 2",
               GDRLAB_LAUNCH_PEER="", GDRLAB_SERVER_HOST="127.0.0.1", GDRLAB_PORT=str(_free_port()),
               GDRLAB_SIZES="8,64K", GDRLAB_SERVE_WAIT=str(int(120 * TIME_SCALE)))
    proc = subprocess.run(["bash", str(ROOT / "examples" / "slurm" / "gdrlab-2node.sbatch")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240 * TIME_SCALE)
    out = tmp_path / "gdrlab-results" / "4242"
    if proc.returncode != 0:  # the end of each output, and the server's log: what a cut report keeps
        log = out / "serve.log"
        pytest.fail(f"exit {proc.returncode}\nstderr: ...{proc.stderr[-1500:]}\nstdout: ...{proc.stdout[-800:]}"
                    f"\nserve.log: {log.read_text()[-800:] if log.exists() else '(none)'}")
    mpi = json.loads((out / "mpi-host.json").read_text())
    assert [r["size"] for r in mpi["rows"]] == [8, 65536] and all(r["verified"] for r in mpi["rows"])
    assert mpi["provenance"]["ranks"] == 2 and mpi["provenance"]["launcher"] == "mpi"
    served = json.loads((out / "serve-host.json").read_text())
    assert [r["size"] for r in served["rows"]] == [8, 65536] and all(r["verified"] for r in served["rows"])
    token = tmp_path / ".gdrlab" / "token"
    assert token.stat().st_mode & 0o777 == 0o600 and len(token.read_text().strip()) == 32
    assert "token required" in (out / "serve.log").read_text()


def test_slurm_script_refuses_outside_a_two_node_job(tmp_path):
    script = str(ROOT / "examples" / "slurm" / "gdrlab-2node.sbatch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    proc = subprocess.run(["bash", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0 and "sbatch" in proc.stderr
    proc = subprocess.run(["bash", script], env=dict(env, SLURM_JOB_ID="1", SLURM_JOB_NUM_NODES="1"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "needs 2" in proc.stderr


@pytest.mark.timeout(int(900 * TIME_SCALE))
def test_binder_postbuild_in_a_plain_venv(tmp_path):
    """repo2docker runs postBuild with its environment's python first on PATH; a venv stands in."""
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    cache = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "GDRLAB", "JUPYTER"))}
    env.update(HOME=str(tmp_path / "home"), PATH=f"{tmp_path / 'venv' / 'bin'}:{env['PATH']}")
    if cache:
        env["PIP_CACHE_DIR"] = cache  # the packages the suite's own venv already downloaded
    proc = subprocess.run(["bash", str(ROOT / "binder" / "postBuild")], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=800 * TIME_SCALE)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    venv_py = str(tmp_path / "venv" / "bin" / "python")
    where = subprocess.run([venv_py, "-c", "import gdrlab._native, gdrlab; print(gdrlab.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True).stdout
    assert where.startswith(str(tmp_path / "venv")), where
    work = tmp_path / "home" / "gdrlab-labs"
    assert sorted(p.name for p in work.iterdir()) == sorted([*LABS, "docs"])  # docs/: the pages the labs link
    lab_ext = subprocess.run([venv_py, "-m", "jupyter", "labextension", "list"], env=env, capture_output=True,
                             text=True).stdout + subprocess.run([venv_py, "-m", "jupyter", "labextension", "list"],
                                                                 env=env, capture_output=True, text=True).stderr
    line = next(line for line in lab_ext.splitlines() if "@jupyter/nbgrader" in line)
    assert "disabled" in line, line


def test_readme_names_what_exists():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "lab-instructor", "test", "test-fast", "release", "release-check", "constraints", "wheel"):
        assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"Makefile has no {target} target"
    for target in ("make lab", "make test", "make lab-instructor", "make release", "make test-fast"):
        assert target in readme, target
    for path in re.findall(r"`((?:binder|examples|docs|scripts)/[\w./-]+|Dockerfile|gdrlab\.def|constraints\.txt)`",
                           readme):
        assert (ROOT / path).exists(), f"README names {path}, which does not exist"
    assert "~/gdrlab-labs" in readme and "--allow-root" in readme
