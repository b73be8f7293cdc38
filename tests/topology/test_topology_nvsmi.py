"""``nvidia-smi topo -m`` text: the shipped real machine, the format's parts, hostile input.

The shipped sample is the first five lines of a DGX A100's matrix as its user posted it in
NVIDIA/nccl issue #1505 (gdrlab/data/topo-matrix/README.md). Expected values below are read off
that text by eye, not from the parser. The small matrices with legends are made up for these tests
(marked as such) to exercise the parts the excerpt does not hold: NIC rows and the NIC legend.
"""
from __future__ import annotations

import time

import pytest

from gdrlab.errors import InvalidArgument
from gdrlab.topology import TopoMatrix, parse_topo_matrix, recorded_matrices

DGX_A100 = "dgx-a100-nccl-issue-1505"

# Made up for this test (two GPUs, two NICs, legends in the format of nvidia-smi 5xx); not a machine.
MADE_UP = (
    "\x1b[4m\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tSYS\tPIX\tSYS\t0-15\t0\t\tN/A\n"
    "GPU1\tSYS\t X \tSYS\tNODE\t16-31\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \tSYS\n"
    "NIC1\tSYS\tNODE\tSYS\t X \n"
    "\n"
    "Legend:\n\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "\n"
    "NIC Legend:\n\n"
    "  NIC0: mlx5_0\n"
    "  NIC1: mlx5_1\n"
)


def _dgx() -> TopoMatrix:
    return parse_topo_matrix(recorded_matrices()[DGX_A100].read_text())


def test_the_real_dgx_a100_excerpt():
    m = _dgx()
    assert m.gpus == [f"GPU{i}" for i in range(8)]
    assert m.nics == [f"NIC{i}" for i in range(12)]
    assert m.rows == ["GPU0", "GPU1", "GPU2", "GPU3"]  # the excerpt stops after GPU3's row
    assert m.code("GPU0", "NIC0") == "PXB" and m.code("GPU1", "NIC1") == "PXB"
    assert m.code("GPU2", "NIC2") == "PXB" and m.code("GPU3", "NIC3") == "PXB"
    assert m.code("GPU0", "NIC2") == "SYS" and m.code("GPU3", "NIC11") == "SYS"
    assert m.code("GPU0", "GPU7") == "NV12" and m.code("GPU5", "GPU1") == "NV12"  # from GPU1's row
    assert m.code("GPU5", "NIC0") is None  # neither row is in the excerpt
    assert m.cpu_affinity == {"GPU0": "48-63,176-191", "GPU1": "48-63,176-191",
                              "GPU2": "16-31,144-159", "GPU3": "16-31,144-159"}
    assert m.numa_affinity == {"GPU0": "3", "GPU1": "3", "GPU2": "1", "GPU3": "1"}
    assert m.gpu_numa_id == {g: "N/A" for g in ("GPU0", "GPU1", "GPU2", "GPU3")}
    assert m.asymmetric_pairs() == []
    assert m.legend == {} and m.nic_legend == {} and m.nic_device("NIC0") == "NIC0"


def test_every_shipped_matrix_has_a_source_in_the_readme():
    readme = (next(iter(recorded_matrices().values())).parent / "README.md").read_text()
    for name in recorded_matrices():
        assert f"`{name}.txt`" in readme


def test_nic_rows_and_legends_tabs_and_terminal_underline():
    m = parse_topo_matrix(MADE_UP)
    assert m.columns == ("GPU0", "GPU1", "NIC0", "NIC1")
    assert m.rows == ["GPU0", "GPU1", "NIC0", "NIC1"]
    assert m.code("NIC1", "GPU1") == "NODE" and m.code("NIC0", "GPU0") == "PIX"
    assert m.nic_legend == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"} and m.nic_device("NIC1") == "mlx5_1"
    assert m.legend["PIX"] == "Connection traversing at most a single PCIe bridge"
    assert m.cpu_affinity == {"GPU0": "0-15", "GPU1": "16-31"} and m.numa_affinity == {"GPU0": "0", "GPU1": "1"}
    assert m.asymmetric_pairs() == []


def test_an_asymmetric_matrix_is_reported():
    m = parse_topo_matrix(MADE_UP.replace("NIC1\tSYS\tNODE", "NIC1\tSYS\tPIX"))
    assert m.asymmetric_pairs() == [("GPU1", "NIC1", "NODE", "PIX")]


def test_old_drivers_name_nics_by_device_and_say_soc():
    text = ("\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
            "GPU0\t X \tSOC\tPHB\t0-7\n"
            "GPU1\tSOC\t X \tSOC\t8-15\n"
            "mlx5_0\tPHB\tSOC\t X \t\n")
    m = parse_topo_matrix(text)
    assert m.nics == ["mlx5_0"] and m.code("GPU1", "mlx5_0") == "SOC"
    assert m.cpu_affinity == {"GPU0": "0-7", "GPU1": "8-15"} and m.numa_affinity == {}


@pytest.mark.parametrize("text, words", [
    ("", "no nvidia-smi topo -m header"),
    ("hello\nworld\n", "no nvidia-smi topo -m header"),
    ("\tGPU0\tGPU1\n", "no device row"),
    ("\tGPU0\tGPU1\nGPU0\t X \n", "row GPU0 has 1 codes for 2 devices"),
    ("\tGPU0\tGPU1\nGPU0\t X \tWAT\n", "'WAT' (row GPU0, column GPU1) is not an nvidia-smi topology code"),
    ("\tGPU0\tGPU1\nGPU0\tPIX\tPIX\n", "'X' belongs on the diagonal only"),
    ("\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU0\t X \tPIX\n", "a second row for GPU0"),
    ("\tGPU0\tGPU0\n", "appears twice"),
    ("\tGPU0\t$(rm\n", "is not a device name"),
])
def test_bad_input_is_one_clear_line(text, words):
    with pytest.raises(InvalidArgument) as err:
        parse_topo_matrix(text)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_not_text_and_too_long():
    with pytest.raises(InvalidArgument, match="needs the matrix's text"):
        parse_topo_matrix(b"GPU0")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="is not an nvidia-smi matrix"):
        parse_topo_matrix("x" * (2 << 20))


def test_unknown_device_name_is_a_clear_error():
    with pytest.raises(InvalidArgument, match="no device 'GPU9'"):
        _dgx().code("GPU9", "NIC0")


@pytest.mark.parametrize("hostile", [
    "GPU0 " + "NV" * 400_000,                                       # one huge almost-code token
    "\tGPU0\tGPU1\n" + "GPU0\t X \t" + "NV1" * 300_000,             # a huge almost-NV# code in a row
    "\x1b[" + "4;" * 400_000,                                       # an ANSI escape that never ends
    "\tGPU0\tGPU1\n" + "  NIC0: " * 100_000,                        # legend-like lines without a legend
    "Legend:\n" + "= " * 400_000,                                   # a legend line of separators
    "\t" + "GPU0\t" * 1 + "G" * 900_000,                            # a header token far too long
])
def test_hostile_input_stays_linear(hostile):
    assert len(hostile) <= 1 << 20
    start = time.perf_counter()
    try:
        parse_topo_matrix(hostile)
    except InvalidArgument as exc:
        assert "\n" not in str(exc)
    assert time.perf_counter() - start < 2.0
