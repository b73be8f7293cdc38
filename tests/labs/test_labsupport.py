"""Support code of labs 03-05 (gdrlab.labsupport) and the generated notebooks' content.

Expected values come from the rules and published figures (CURRICULUM-style: gdrcopy's 1.3 ms for
64 KB, the MVAPICH2-GDR direction, nvidia-smi's codes read by hand off the recorded hwloc XML),
not from the code under test.
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from gdrlab.labsupport import lab03, lab04, lab05, provenance_label, quick_mode

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- package
def test_quick_mode_follows_environment(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("GDRLAB_QUICK", "0")
    assert quick_mode() is False
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    assert quick_mode() is True
    monkeypatch.setenv("GDRLAB_QUICK", "0")
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert quick_mode() is True


def test_provenance_label_names_the_source():
    # One label format everywhere (gdrlab.provenance.label), in the labs as in the plots.
    assert provenance_label({"kind": "recorded", "hardware": "NVIDIA H200", "date": "2026-11-30T04:00"}) \
        == "recorded on NVIDIA H200 (2026-11-30)"
    assert provenance_label({"kind": "modelled", "profile": "kepler-snb-2013"}) == "modelled, profile kepler-snb-2013"
    assert provenance_label(None) == "modelled"


# ----------------------------------------------------------------------------- lab 03
def test_registration_summary_breakeven_by_hand():
    # The explorer's break-even: (registration + 677 us unpin) / (copy - 0.5 us lookup), rounded up.
    df = lab03.registration_summary("volta-dgx1", [1 << 16])
    row = df.iloc[0]
    want = math.ceil((row.reg_us + 677.0) / (row.copy_us - 0.5))
    assert row.breakeven_sends == want
    assert df.attrs["provenance"]["kind"] == "modelled"


def test_gpu_registration_model_matches_gdrcopy_figure():
    gpu = lab03.REGISTRATION_MODELS["GPU (peer memory / dma-buf)"]
    host = lab03.REGISTRATION_MODELS["host (ibv_reg_mr)"]
    # gdrcopy README: gdr_pin_buffer of 64 KB takes about 1.3 ms on a V100
    assert math.isclose(float(gpu.cost_us(64 * 1024)), 1300.0, rel_tol=0.05)
    sizes = [1 << k for k in range(12, 31)]
    assert np.all(np.diff(gpu.cost_us(sizes)) >= 0) and np.all(np.diff(host.cost_us(sizes)) >= 0)
    assert float(gpu.cost_us(65536)) > 10 * float(host.cost_us(65536))
    assert gpu.page_bytes == 65536 and host.page_bytes == 4096
    with pytest.raises(ValueError):
        gpu.cost_us([0])


def _fake_root(tmp_path: Path, *, ib=(), peermem=False, release="6.8.0") -> Path:
    for dev in ib:
        (tmp_path / "sys/class/infiniband" / dev).mkdir(parents=True)
    if peermem:
        (tmp_path / "sys/module/nvidia_peermem").mkdir(parents=True)
        (tmp_path / "sys/module/nvidia_peermem/version").write_text("580.159.04\n")
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(release + "\n")
    return tmp_path


def test_peer_memory_status_reads_a_recorded_tree(tmp_path):
    st = lab03.peer_memory_status(str(_fake_root(tmp_path, ib=("mlx5_0",), peermem=True, release="5.15.0-91")))
    assert st["rdma_devices"] == ["mlx5_0"]
    assert st["nvidia_peermem"] is True and st["nvidia_peermem_version"] == "580.159.04"
    assert st["kernel_dmabuf"] is True
    assert st["routes"]["host memory (ibv_reg_mr)"]["possible"] is True


def test_peer_memory_status_explains_what_is_missing(tmp_path):
    st = lab03.peer_memory_status(str(_fake_root(tmp_path, release="5.4.0")))
    assert st["rdma_devices"] == [] and st["nvidia_peermem"] is False
    assert st["kernel_dmabuf"] is False  # dma-buf import by RDMA arrived in Linux 5.12
    host = st["routes"]["host memory (ibv_reg_mr)"]
    assert host["possible"] is False and "infiniband" in host["why"]
    assert "Linux 5.12+" in st["routes"]["GPU buffer via dma-buf"]["why"]


def test_try_registrations_never_raises_and_explains():
    rows = lab03.try_registrations(4096)
    assert len(rows) == 3
    for r in rows:
        assert r["outcome"] in ("registered", "exported, nothing to import it", "failed", "not possible here")
        assert r["detail"]
    with pytest.raises(ValueError):
        lab03.try_registrations(0)


def test_try_registrations_without_gpu_says_so():
    from gdrlab import engine
    if engine.cuda_status()["usable"]:
        pytest.skip("a CUDA GPU is present: the dma-buf export is attempted for real")
    dmabuf = lab03.try_registrations(4096)[-1]
    assert dmabuf["outcome"] == "not possible here" and "GPU" in dmabuf["detail"]


def test_registration_figures_carry_units_and_provenance():
    fig = lab03.registration_figure(lab03.registration_cost_table([4096, 65536, 1 << 20]))
    assert "(bytes)" in fig.layout.xaxis.title.text and "(µs)" in fig.layout.yaxis.title.text
    assert all(("modelled" in t.name) or ("published" in t.name) for t in fig.data)
    texts = " ".join(a.text for a in lab03.state_machine_figure().layout.annotations)
    for word in ("EFAULT", "nvidia-peermem", "ibv_reg_dmabuf_mr", "lkey", "cuMemGetHandleForAddressRange"):
        assert word in texts


def test_measure_registration_without_hca_gives_reason():
    df, why = lab03.measure_registration([4096])
    if df is None:
        assert why
    else:  # a machine with an HCA
        assert "reg_us" in df.columns


# ----------------------------------------------------------------------------- lab 04
def test_crossovers_follow_published_platform_order():
    x = lab04.crossovers()
    # MVAPICH2-GDR / NVIDIA 2014: a few KB on Sandy Bridge, 400-500 KB on Ivy Bridge, none on Hopper
    assert 1024 <= x["kepler-snb-2013"] <= 64 * 1024
    assert 100 * 1024 <= x["kepler-ivb-2014"] <= 2 << 20
    assert x["hopper-ndr"] is None


def test_policy_table_is_gdr_small_pipelined_large():
    table = lab04.policy_table("kepler-snb-2013", lab04.GDR_POLICY_PATHS)
    assert [r["path"] for r in table] == ["gdr", "pipelined"]
    assert table[0]["lo"] == 1 and table[-1]["hi"] == 64 << 20
    assert all(a["hi"] < b["lo"] for a, b in zip(table, table[1:]))


def test_crossover_figure_has_units_provenance_and_mark():
    fig = lab04.crossover_figure("kepler-ivb-2014", placement="cross-socket", chunk=64 * 1024)
    assert "(bytes)" in fig.layout.xaxis.title.text and "(µs)" in fig.layout.yaxis.title.text
    assert "modelled" in fig.layout.title.text and "cross-socket" in fig.layout.title.text
    assert any("crossover" in t.name for t in fig.data)
    assert all("modelled" in t.name for t in fig.data)


def test_measured_data_without_live_uses_recorded_or_says_why():
    data = lab04.measured_data("8,1M", live=False)
    assert set(data) == set(lab04.MEASURED_PATHS)
    for result in data.values():
        assert result.source in ("recorded", "none") and result.why
        if result.data is not None:
            assert result.data.attrs["provenance"]["kind"] == "recorded"


def test_gdr_live_without_hca_gives_reason():
    df, why = lab04.gdr_live("8")
    assert df is not None or why


# ----------------------------------------------------------------------------- lab 05
def test_only_real_machines_ship():
    # The hand-edited hwloc fixture (bus 04:00.0 under a root port whose range is [84-84]) stays
    # under tests/data; the package ships only exports of real machines.
    assert set(lab05.machine_names()) == {"nvidiaDGX2", "power8gpudistances"}
    with pytest.raises(KeyError):
        lab05.recorded_topology("32em64t")


def test_dgx2_gpu_pairs_read_by_hand():
    # In the DGX-2H export, GPUs come in pairs below one PLX switch: GPU0 and GPU1 share it.
    topo = lab05.recorded_topology("DGX2")
    assert topo.pcie_code("GPU0", "GPU1")[0] == "PIX"
    assert not topo.nics
    text = lab05.tree_text(topo)
    assert "<- GPU0" in text


def test_recorded_topology_unknown_name():
    with pytest.raises(KeyError, match="shipped"):
        lab05.recorded_topology("no-such-machine")


def test_own_topology_on_an_empty_tree(tmp_path):
    topo, message = lab05.own_topology(str(tmp_path))
    assert message
    if topo is not None:
        assert "no NVIDIA GPU" in message or "GPU" in message


def test_config_b_gdr_is_slower_than_staging_on_sandy_bridge():
    # Seed 1, case 3 and NVIDIA 2014: across sockets GDR falls to about 1 GB/s, below staging
    t = lab05.config_ab_table("kepler-snb-2013", sizes=[4 << 20])
    bw = {(r.config, r.path): r.bw_gbps for r in t.itertuples()}
    assert bw[("B", "gdr")] < bw[("A", "gdr")]
    assert bw[("B", "gdr")] < bw[("B", "pipelined")]
    assert bw[("B", "gdr")] < 2.0
    assert t.attrs["provenance"]["kind"] == "modelled"
    fig = lab05.config_ab_figure(t)
    assert "(GB/s)" in fig.layout.yaxis.title.text and "modelled" in fig.layout.title.text


# ----------------------------------------------------------------------------- notebooks
LABS = {"03": "03-peer-memory", "04": "04-crossover", "05": "05-topology", "06": "06-siblings"}


@pytest.mark.parametrize("lab,words", [
    ("03-peer-memory", ["cudaHostRegister", "host", "nvidia-peermem", "nv_peer_mem", "dma-buf", "EFAULT"]),
    ("04-crossover", ["other way round", "MV2_GPUDIRECT_LIMIT", "gdrcopy", "800 MB/s"]),
    ("05-topology", ["PIX", "PXB", "NCCL_NET_GDR_LEVEL", "numactl"]),
    ("06-siblings", ["GPUDirect Storage", "RDMA NIC", "nvidia_fs", "compatibility mode", "O_DIRECT"]),
])
def test_notebooks_are_graded_and_teach_the_corrections(lab, words):
    nb = json.loads((ROOT / "labs" / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] == 5
    graded = [c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")]
    autograded = [c for c in graded if c["cell_type"] == "code"]
    assert len(autograded) >= 2 and len(graded) > len(autograded), "autograded tests and a written answer"
    assert all("### BEGIN HIDDEN TESTS" in "".join(c["source"]) for c in autograded)
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None
               for c in nb["cells"] if c["cell_type"] == "code")
    text = " ".join("".join(c["source"]) for c in nb["cells"])
    for w in words:
        assert w in text, f"{lab} should mention {w!r}"
    assert "What you saw" in text and "Learning goals" in text


# ----------------------------------------------------------------------------- on a GPU
def _cuda():
    from gdrlab import engine
    return engine.cuda_status()


@pytest.mark.gpu
def test_dmabuf_export_row_on_a_gpu():
    st = _cuda()
    if not st["usable"]:
        pytest.skip("no CUDA GPU: " + st["reason"])
    from gdrlab import engine
    if not any(g.get("dmabuf_supported") for g in engine.gpus()):
        pytest.skip("GPU reports DMA_BUF_SUPPORTED = 0")
    row = lab03.try_registrations(1 << 20)[-1]
    if lab03.verbs_status()[1].get("devices"):
        assert row["outcome"] == "registered" and "dmabuf" in row["detail"], row
    else:
        assert row["outcome"] == "exported, nothing to import it", row
        # measured on the H200: the fd has the buffer's size and the CPU cannot mmap it
        assert f"of {1 << 20} bytes" in row["detail"] and "mmap" in row["detail"]


@pytest.mark.gpu
def test_measured_data_live_on_a_gpu(monkeypatch):
    st = _cuda()
    if not st["usable"]:
        pytest.skip("no CUDA GPU: " + st["reason"])
    monkeypatch.setenv("GDRLAB_QUICK", "1")
    data = lab04.measured_data("8,64K", paths=("staged", "pipelined"), live=True)
    for path, result in data.items():
        assert result.source == "live", (path, result.why)
        assert list(result.data["size"]) == [8, 65536]
        assert result.data["verified"].all()
        assert result.data.attrs["provenance"]["kind"] == "live"
    summary = lab04.measured_summary(data)
    assert set(summary["path"]) == {"staged", "pipelined"}


def test_nccl_log_lines_from_the_recorded_h200_log():
    from gdrlab.labsupport import nccl_log_lines
    lines, label = nccl_log_lines("h200x2-nvlink-p2p_shm_off", ("GPU Direct RDMA", "NET/IB"))
    # CURRICULUM: the recorded log holds `NET/IB : No device found.` and
    # `NET/Socket : GPU Direct RDMA Disabled for HCA 0 'eth0'`
    assert any("No device found" in ln for ln in lines)
    assert any("GPU Direct RDMA Disabled for HCA 0 'eth0'" in ln for ln in lines)
    assert label.startswith("recorded") and "H200" in label
    lines, why = nccl_log_lines("no-such-log", ("x",))
    assert lines == [] and "no recorded NCCL log" in why


@pytest.mark.parametrize("lab", sorted(LABS.values()))
def test_markdown_is_not_indented_and_svg_is_well_formed(lab):
    import re
    import xml.etree.ElementTree as ET
    nb = json.loads((ROOT / "labs" / "source" / lab / f"{lab}.ipynb").read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = "".join(cell["source"])
        # four leading spaces would turn prose into a code block (fenced code may indent)
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        assert not [ln for ln in prose.splitlines() if ln.startswith("    ") and not ln.lstrip().startswith("<")], \
            f"indented markdown in {lab} cell {cell['id']}"
        for svg in re.findall(r"<svg.*?</svg>", text, flags=re.S):
            ET.fromstring(svg)  # raises on malformed markup
            assert "\n\n" not in svg, "a blank line inside inline SVG ends the HTML block in Markdown"


def test_registration_summary_hits_the_k20_bar1_wall():
    # CURRICULUM pitfall: K20's 256 MB BAR1 cannot hold a 256 MiB registration (the driver keeps part)
    t = lab03.registration_summary("kepler-snb-2013", [64 << 20, 256 << 20]).set_index("size")
    assert t.loc[64 << 20, "fits_bar1"] == "yes"
    assert t.loc[256 << 20, "fits_bar1"].startswith("no") and "12" in t.loc[256 << 20, "fits_bar1"]  # ENOMEM
    s = lab03.registration_summary("volta-dgx1", [4096, 65536, 1 << 20, 1 << 28])
    assert list(s["gpu_pages"]) == [1, 1, 16, 4096]
    assert s["breakeven_sends"].iloc[1] > 50            # small buffers need many reuses
    assert list(s["breakeven_sends"]) == sorted(s["breakeven_sends"], reverse=True)
    assert s.attrs["provenance"]["kind"] == "modelled"


@pytest.mark.rdma
def test_registrations_with_an_hca():
    verbs, st = lab03.verbs_status()
    if verbs is None or not st.get("devices"):
        pytest.skip("no RDMA device: " + st.get("reason", ""))
    rows = {r["attempt"]: r for r in lab03.try_registrations(1 << 20)}
    host = rows["host memory (ibv_reg_mr)"]
    assert host["outcome"] == "registered" and "lkey=" in host["detail"]
    status = lab03.peer_memory_status()
    raw = [r for a, r in rows.items() if a.startswith("GPU pointer")][0]
    if status["gpus"] and not status["nvidia_peermem"]:
        assert raw["outcome"] == "failed" and raw["errno"] == 14  # EFAULT: no client claims the address
    df, why = lab03.measure_registration([4096, 1 << 20], "host")
    assert df is not None, why
    assert (df["reg_us"] > 0).all()


def test_chunk_figure_from_recorded_or_reason():
    r = lab04.chunk_data(live=False)
    if r.data is None:
        assert r.why
        return
    assert r.data.attrs["provenance"]["kind"] == "recorded"
    fig = lab04.chunk_figure(r.data)
    assert "(bytes)" in fig.layout.xaxis.title.text and "(GB/s)" in fig.layout.yaxis.title.text
    assert "recorded" in fig.data[0].name and "modelled" in fig.layout.title.text


# ----------------------------------------------------------------------------- own device pairs
def test_own_pairs_classify_any_devices_with_nvidia_smi_codes(tmp_path):
    from sysfs_builder import BRIDGE_CLASS, INTEL, PLX, SysfsTree

    t = SysfsTree(tmp_path)
    t.numa_node(0, "0-3", socket=0)
    t.numa_node(1, "4-7", socket=1)
    # socket 0: a switch with an NVMe drive and a NIC below it; another NVMe on its own root port
    t.pci("0000:00:01.0", "pci0000:00", cls=BRIDGE_CLASS, vendor=INTEL, numa=0)
    t.pci("0000:01:00.0", "0000:00:01.0", cls=BRIDGE_CLASS, vendor=PLX, numa=0)
    t.pci("0000:02:01.0", "0000:01:00.0", cls=BRIDGE_CLASS, vendor=PLX, numa=0)
    t.pci("0000:02:02.0", "0000:01:00.0", cls=BRIDGE_CLASS, vendor=PLX, numa=0)
    nvme = t.pci("0000:03:00.0", "0000:02:01.0", cls=0x010802, vendor=0x144D, numa=0)
    (nvme / "nvme/nvme0").mkdir(parents=True)
    nic = t.pci("0000:04:00.0", "0000:02:02.0", cls=0x020000, vendor=0x8086, numa=0)
    (nic / "net/eth0").mkdir(parents=True)
    t.pci("0000:00:02.0", "pci0000:00", cls=BRIDGE_CLASS, vendor=INTEL, numa=0)
    t.pci("0000:05:00.0", "0000:00:02.0", cls=0x010802, vendor=0x144D, numa=0)
    # socket 1: an integrated-style display device on another host bridge
    t.pci("0000:80:01.0", "pci0000:80", cls=BRIDGE_CLASS, vendor=INTEL, numa=1)
    t.pci("0000:81:00.0", "0000:80:01.0", cls=0x030000, vendor=0x1002, numa=1)
    table, message = lab05.own_pairs(str(tmp_path))
    codes = {frozenset((r.a, r.b)): r.code for r in table.itertuples()}
    assert len(codes) == 6 and "4 devices, 6 pairs" in message
    assert codes[frozenset(("nvme0", "eth0"))] == "PIX", "one switch between them"
    assert codes[frozenset(("nvme0", "storage0"))] == "PHB", "they meet at the host bridge"
    assert codes[frozenset(("eth0", "display0"))] == "SYS", "different sockets"
    assert table.attrs["provenance"]["kind"] == "recorded"  # a tree under a test root is not this machine
    (tmp_path / "empty").mkdir()
    empty, why = lab05.own_pairs(str(tmp_path / "empty"))
    assert len(empty) == 0 and "no pair to classify" in why


# ----------------------------------------------------------------------------- Soft-RoCE and pyverbs
def _net(root: Path, name: str, state: str = "up", kind: str = "1", physical: bool = True) -> None:
    d = root / "sys/class/net" / name
    d.mkdir(parents=True)
    (d / "operstate").write_text(state + "\n")
    (d / "type").write_text(kind + "\n")
    if physical:
        (d / "device").mkdir()


def test_soft_roce_status_says_how_to_add_one_and_what_stands_in_the_way(tmp_path):
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.1.0-test\n")
    _net(tmp_path, "lo", state="unknown", kind="772", physical=False)
    _net(tmp_path, "docker0", physical=False)
    _net(tmp_path, "enp3s0")
    _net(tmp_path, "enp4s0", state="down")
    st = lab03.soft_roce_status(str(tmp_path))
    assert st["rdma_devices"] == [] and st["module"] == "unknown" and "container" in st["reason"]
    assert st["netdev"] == "enp3s0", "an up physical Ethernet interface, never lo or a down one"
    assert "sudo rdma link add rxe0 type rxe netdev enp3s0" in st["commands"]
    (tmp_path / "lib/modules/6.1.0-test/kernel/drivers/infiniband").mkdir(parents=True)
    st = lab03.soft_roce_status(str(tmp_path))
    assert st["module"] == "missing" and "no rdma_rxe module" in st["reason"]
    rxe_dir = tmp_path / "lib/modules/6.1.0-test/kernel/drivers/infiniband/sw/rxe"
    rxe_dir.mkdir(parents=True)
    (rxe_dir / "rdma_rxe.ko.xz").write_bytes(b"")
    st = lab03.soft_roce_status(str(tmp_path))
    assert st["module"] == "available" and "modprobe rdma_rxe" in st["reason"] and "enp3s0" in st["reason"]
    (tmp_path / "sys/module/rdma_rxe").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/rxe0").mkdir(parents=True)
    (tmp_path / "sys/class/infiniband/rxe0/parent").write_text("enp3s0\n")
    st = lab03.soft_roce_status(str(tmp_path))
    assert st["module"] == "loaded" and st["rdma_devices"] == ["rxe0"] and st["rxe_devices"] == ["rxe0"]
    assert st["reason"] == "RDMA device(s) here: rxe0 (Soft-RoCE)"


def _stub_pyverbs(where: Path, devices: list[bytes]) -> None:
    pkg = where / "pyverbs"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '50.0'\n")
    (pkg / "device.py").write_text(
        "class _D:\n    def __init__(self, n):\n        self.name = n\n"
        f"def get_device_list():\n    return [_D(n) for n in {devices!r}]\n")


@pytest.fixture
def no_pyverbs_left_behind():
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "pyverbs"}
    yield
    for k in [k for k in sys.modules if k.split(".")[0] == "pyverbs"]:
        del sys.modules[k]
    sys.modules.update(before)


@pytest.mark.parametrize("devices,usable", [([b"rxe0"], True), ([], False)])
def test_pyverbs_status_needs_an_import_and_a_device(tmp_path, monkeypatch, no_pyverbs_left_behind, devices, usable):
    from gdrlab.hw.pyverbs import pyverbs_status

    _stub_pyverbs(tmp_path, devices)
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("pyverbs", "pyverbs.device"):
        sys.modules.pop(mod, None)
    st = pyverbs_status()
    assert st["importable"] and st["version"] == "50.0" and st["usable"] is usable
    assert st["devices"] == [d.decode() for d in devices]
    assert ("sees rxe0" in st["reason"]) if usable else ("rdma link add rxe0 type rxe" in st["reason"])


def test_pyverbs_status_says_exactly_why_it_does_not_import(tmp_path, monkeypatch):
    from gdrlab.hw.pyverbs import pyverbs_status

    monkeypatch.setitem(sys.modules, "pyverbs", None)  # importing it raises ModuleNotFoundError
    st = pyverbs_status(str(tmp_path / "nothing"))
    assert not st["importable"] and not st["usable"] and "apt install python3-pyverbs" in st["reason"]
    system = tmp_path / "dist-packages/pyverbs"
    system.mkdir(parents=True)
    (system / "device.cpython-27-other.so").write_bytes(b"")
    st = pyverbs_status(str(tmp_path / "dist-packages"))
    assert "built for cpython-27-other" in st["reason"] and "this interpreter is" in st["reason"]
    (system / "device.cpython-27-other.so").unlink()
    st = pyverbs_status(str(tmp_path / "dist-packages"))
    assert "--system-site-packages" in st["reason"] and str(system) in st["reason"]


def test_pyverbs_registration_on_this_machine_or_the_reason():
    st = lab03.pyverbs_status()
    rows = lab03.pyverbs_registrations(1 << 16)
    if not st["usable"]:
        assert rows[0]["outcome"] == "not possible here" and rows[0]["detail"] == st["reason"]
        pytest.skip(f"pyverbs not usable here: {st['reason']}")
    assert {r["device"] for r in rows} == set(st["devices"])
    ok = [r for r in rows if r["outcome"] == "registered"]
    assert ok and all("lkey=0x" in r["detail"] and "rkey=0x" in r["detail"] for r in ok)


LIVE_REGISTRATION = r"""
import json
from gdrlab.labsupport import lab03
rows = lab03.try_registrations(1 << 16)
df, why = lab03.measure_registration([4096, 65536], "host")
print(json.dumps({"rows": rows, "why": why, "sizes": None if df is None else [int(s) for s in df["size"]],
                  "reg_us": None if df is None else [float(x) for x in df["reg_us"]]}))
"""


@pytest.fixture(scope="module")
def fake_verbs_lib(tmp_path_factory) -> str:
    import shutil
    import subprocess

    gxx = shutil.which("g++")
    if not gxx:
        pytest.skip("g++ is not installed: cannot build the stand-in libibverbs")
    src = ROOT / "tests" / "fake_verbs"
    out = tmp_path_factory.mktemp("fakeibv") / "libfakeibverbs.so"
    r = subprocess.run([gxx, "-std=c++17", "-shared", "-fPIC", "-O1", f"-I{ROOT / 'native' / 'src'}",
                        str(src / "fake_ibverbs.cc"), f"-Wl,--version-script={src / 'fake_ibverbs.map'}", "-o",
                        str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return str(out)


@pytest.mark.timeout(300)
def test_lab03_registers_host_memory_live_wherever_an_rdma_device_exists(fake_verbs_lib):
    import os
    import subprocess

    r = subprocess.run([sys.executable, "-c", LIVE_REGISTRATION], capture_output=True, text=True, timeout=240,
                       cwd=ROOT, env=dict(os.environ, GDRLAB_IBVERBS_LIB=fake_verbs_lib))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    host = out["rows"][0]
    assert host["attempt"] == "host memory (ibv_reg_mr)" and host["outcome"] == "registered", host
    assert "lkey=0x" in host["detail"] and "rkey=0x" in host["detail"]
    gpu_raw = out["rows"][1]
    assert gpu_raw["outcome"] == "not possible here" and "no CUDA GPU" in gpu_raw["detail"]
    assert out["why"] == "measured live" and out["sizes"] == [4096, 65536]
    assert all(us > 0 for us in out["reg_us"])


def test_lab03_says_why_nothing_registers_without_an_rdma_device(monkeypatch):
    monkeypatch.setattr(lab03, "verbs_status", lambda: (None, {"devices": [], "reason": "no RDMA device found"}))
    rows = lab03.try_registrations(1 << 16)
    assert rows[0]["outcome"] == "not possible here" and rows[0]["detail"] == "no RDMA device found"
    df, why = lab03.measure_registration([4096], "host")
    assert df is None and why == "no RDMA device found"


def test_pyverbs_status_when_libibverbs_cannot_list_devices(tmp_path, monkeypatch, no_pyverbs_left_behind):
    from gdrlab.hw.pyverbs import pyverbs_status

    pkg = tmp_path / "pyverbs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    # What rdma-core's pyverbs does on a machine with no RDMA device at all.
    (pkg / "device.py").write_text("def get_device_list():\n    raise RuntimeError('Failed to get devices list')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("pyverbs", "pyverbs.device"):
        sys.modules.pop(mod, None)
    st = pyverbs_status()
    assert st["importable"] and not st["usable"]
    if Path("/sys/class/infiniband").is_dir() and any(Path("/sys/class/infiniband").iterdir()):
        assert "cannot list RDMA devices" in st["reason"] and "Failed to get devices list" in st["reason"]
    else:
        assert "no RDMA device" in st["reason"] and "rdma link add rxe0" in st["reason"]


def test_crossover_explorer_redraws_as_a_whole_new_figure():
    pytest.importorskip("ipywidgets")
    box = lab04.crossover_explorer("kepler-snb-2013")
    first = box.children[2]
    assert (first.layout.xaxis.type, first.layout.yaxis.type) == ("log", "log")
    profile = box.children[0].children[0]
    profile.value = "kepler-ivb-2014"
    now = box.children[2]
    assert now is not first and first.comm is None, "the old figure is replaced and closed"
    assert (now.layout.xaxis.type, now.layout.yaxis.type) == ("log", "log")
    marks = [t for t in now.data if (t.name or "").startswith("gdr/pipelined crossover")]
    assert len(marks) == 1 and "kepler-ivb-2014" in now.layout.title.text


def test_lab05_real_dgx_a100_matrix():
    m, label = lab05.recorded_matrix("dgx-a100")
    assert "NVIDIA/nccl issue #1505" in label and "excerpt" in label
    frame = lab05.matrix_frame(m)
    assert list(frame.index) == ["GPU0", "GPU1", "GPU2", "GPU3"]
    # read off the posted matrix: GPU2 reaches NIC2/NIC3 through PCIe switches, NIC0 across sockets
    assert frame.loc["GPU2", "NIC2"] == "PXB" and frame.loc["GPU2", "NIC0"] == "SYS"
    assert frame.loc["GPU0", "NUMA Affinity"] == "3" and frame.loc["GPU3", "CPU Affinity"] == "16-31,144-159"
    with pytest.raises(KeyError, match="no recorded matrix"):
        lab05.recorded_matrix("no-such-machine")


def test_lab05_ib_gdr_lines_show_the_decision_and_the_gdrdma_channels():
    shown = dict(lab05.ib_gdr_lines())
    issue_1151 = next(lines for label, lines in shown.items() if "#1151" in label)
    assert len(issue_1151) == 1 and "distance 7 > 4" in issue_1151[0] and "does not use GPUDirect RDMA" in issue_1151[0]
    issue_707 = next(lines for label, lines in shown.items() if "#707" in label)
    assert issue_707 and all("NET/IB/GDRDMA" in line for line in issue_707)


def test_lab05_allreduce_figures_are_the_two_recordings():
    t = lab05.allreduce_figures()
    assert list(t["config"]) == ["default", "p2p_off", "p2p_shm_off"]
    assert set(t["size_bytes"]) == {256 << 20}
    # the dataset (gdrlab nccl --compare --json) and the logs' allreduce lines, read off both files
    assert [round(v, 2) for v in t["busbw_gbps_json"]] == [296.99, 26.93, 3.13]
    assert [round(v, 2) for v in t["busbw_gbps_log"]] == [299.14, 27.05, 3.20]
    assert t.attrs["provenance"]["kind"] == "recorded" and "H200" in t.attrs["provenance"]["hardware"]


def test_crossover_explorer_takes_the_profiles_a_lab_compares():
    """Lab 05 lists the 2026 machines in the explorer; the profile asked for is always a choice."""
    pytest.importorskip("ipywidgets")
    box = lab04.crossover_explorer("kepler-ivb-2014", profiles=lab05.AB_PROFILES)
    dropdown = box.children[0].children[0]
    assert list(dropdown.options) == list(lab05.AB_PROFILES)
    dropdown.value = "l40s-pcie"
    assert box.children[1].value == ""          # redrawn without an error
    assert "kepler-snb-2013" in lab04.crossover_explorer("kepler-snb-2013", profiles=("gh200",)).children[0].children[0].options
