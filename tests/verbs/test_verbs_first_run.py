"""What a first cluster run trips on, against the stand-in libibverbs: a container without
/dev/infiniband (V2), EFA and iWARP devices (V3), a locked-memory limit of 0 (V11). Each test
failed before its fix: the messages named the wrong cause (install ibverbs-providers; no
permission on /dev/infiniband) or none at all (EFA's RC queue pair)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(fake_lib: str, code: str, **env: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_lib, **env))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


STATUS = "import json; from gdrlab import verbs; print(json.dumps(verbs.status()))"


def _container(tmp_path: Path, nodes: list[str] | None) -> dict[str, str]:
    """A sysfs that shows fake0 with uverbs0, and a /dev with `nodes` under infiniband/ (None: no
    /dev/infiniband at all); the stand-in drops devices whose node is missing, as libibverbs does."""
    sysfs = tmp_path / "sys"
    (sysfs / "class/infiniband/fake0").mkdir(parents=True)
    (sysfs / "class/infiniband_verbs/uverbs0").mkdir(parents=True)
    (sysfs / "class/infiniband_verbs/uverbs0/ibdev").write_text("fake0\n")
    dev = tmp_path / "dev"
    dev.mkdir()
    if nodes is not None:
        (dev / "infiniband").mkdir()
        for n in nodes:
            (dev / "infiniband" / n).write_text("")
    return {"GDRLAB_SYSFS_ROOT": str(sysfs), "GDRLAB_DEV_ROOT": str(dev), "FAKE_IBV_DEV_DIR": str(dev / "infiniband")}


def test_container_without_dev_infiniband_is_told_to_pass_the_devices(fake_verbs_lib, tmp_path):
    st = _run(fake_verbs_lib, STATUS, **_container(tmp_path, None))
    assert st["devices"] == []
    assert "--device /dev/infiniband" in st["reason"] and "device plugin" in st["reason"]
    assert "ibverbs-providers" not in st["reason"]


def test_container_with_some_device_nodes_names_the_missing_one(fake_verbs_lib, tmp_path):
    st = _run(fake_verbs_lib, STATUS, **_container(tmp_path, ["rdma_cm"]))
    assert "uverbs0 (fake0)" in st["reason"] and "missing" in st["reason"]
    assert "ibverbs-providers" not in st["reason"]


def test_nodes_present_but_nothing_listed_is_a_missing_provider(fake_verbs_lib, tmp_path):
    env = _container(tmp_path, ["uverbs0"])
    env["FAKE_IBV_DEV_DIR"] = str(tmp_path / "elsewhere")  # the library still lists nothing
    st = _run(fake_verbs_lib, STATUS, **env)
    assert "ibverbs-providers" in st["reason"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root may open any device node")
def test_unreadable_device_node_is_a_permission_problem(fake_verbs_lib, tmp_path):
    env = _container(tmp_path, ["uverbs0"])
    (tmp_path / "dev/infiniband/uverbs0").chmod(0)
    env["FAKE_IBV_DEV_DIR"] = str(tmp_path / "elsewhere")
    st = _run(fake_verbs_lib, STATUS, **env)
    assert "permission" in st["reason"] and "uverbs0" in st["reason"]


def test_no_uverbs_interface_means_ib_uverbs_not_loaded(fake_verbs_lib, tmp_path):
    env = _container(tmp_path, None)
    (tmp_path / "sys/class/infiniband_verbs/uverbs0/ibdev").unlink()
    (tmp_path / "sys/class/infiniband_verbs/uverbs0").rmdir()
    st = _run(fake_verbs_lib, STATUS, **env)
    assert "modprobe ib_uverbs" in st["reason"]


BENCH_HOST = r"""
import json, threading
from gdrlab import _native, errors
from gdrlab.transfer.verbs_wire import require_verbs
out = {"devices": [(d["name"], d["node_type"], d["transport_type"], d["rc_unsupported"]) for d in _native.verbs.devices()]}
try:
    require_verbs("host")
    out["require"] = "ok"
except errors.GdrlabError as e:
    out["require"] = str(e)
srv = _native.Server("127.0.0.1", 0, "tok", 10000)
t = threading.Thread(target=srv.serve_one, args=(10000,))
t.start()
client = _native.verbs.Client("127.0.0.1", srv.port, "tok", 10000)
try:
    client.run("host", 0, 4096, 3, 1, 1, 16384, 3, 0, 9)
    out["run"] = "ran"
except errors.GdrlabError as e:
    out["run"], out["kind"] = str(e), type(e).__name__
client.close()
t.join()
print(json.dumps(out))
"""


def test_efa_is_refused_in_one_line_naming_srd(fake_verbs_lib):
    out = _run(fake_verbs_lib, BENCH_HOST, FAKE_IBV_KIND="efa")
    (name, node, transport, why), = out["devices"]
    assert name == "rdmap0s0" and node == 7 and transport == 4
    for text in (why, out["require"], out["run"]):
        assert "EFA" in text and "SRD" in text and "libfabric" in text and "RC queue pairs" in text
    assert out["kind"] == "Unavailable" and "ibv_create_qp" not in out["run"]


def test_iwarp_is_refused_naming_immediate_data(fake_verbs_lib):
    out = _run(fake_verbs_lib, BENCH_HOST, FAKE_IBV_KIND="iwarp")
    assert "iWARP" in out["require"] and "immediate" in out["require"]
    assert out["kind"] == "Unavailable" and "RDMA-CM" in out["run"]


def test_infiniband_stand_in_still_runs(fake_verbs_lib):
    out = _run(fake_verbs_lib, BENCH_HOST)
    assert out["require"] == "ok" and out["run"] == "ran" and out["devices"][0][3] == ""


MEMLOCK_ZERO = r"""
import json, resource
import numpy as np
from gdrlab import errors, verbs
soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, hard))
out = {}
with verbs.Device() as dev, dev.alloc_pd() as pd:
    try:
        pd.reg_mr(np.zeros(4096, np.uint8))
    except errors.GdrlabError as e:
        out["reg"] = str(e)
out["cq_hint"] = verbs._v().verbs_hint("ibv_create_cq", 1, False)
out["cq_enomem"] = verbs._v().verbs_hint("ibv_create_cq", 12, False)
print(json.dumps(out))
"""


def test_memlock_zero_is_not_blamed_on_device_permissions(fake_verbs_lib):
    out = _run(fake_verbs_lib, MEMLOCK_ZERO, FAKE_IBV_CHECK_MEMLOCK="1")
    assert "locked-memory limit is 0" in out["reg"] and "IPC_LOCK" in out["reg"]
    assert "no permission on /dev/infiniband" not in out["reg"]
    assert "locked-memory limit is 0" in out["cq_hint"]  # EPERM from ibv_create_cq, limit 0
    assert "memlock" in out["cq_enomem"] and "IPC_LOCK" in out["cq_enomem"]
