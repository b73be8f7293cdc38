"""Claims of labs 03-05 recomputed from the data they rest on (issue 25, item 2).

Each test recomputes a figure or relation from the recording, matrix or model the lab uses, and
checks the lab's text (labs/src) against it: a sentence that disagrees with its data fails here.
The N-numbers are those of the 2026-12-03 expert review.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from gdrlab import grading, model
from gdrlab.labsupport import lab04

ROOT = Path(__file__).resolve().parents[2]


def _src(stem: str) -> str:
    (path,) = (ROOT / "labs" / "src").glob(f"{stem}-*.py")
    return path.read_text(encoding="utf-8")


def _p50(name: str, size: int) -> float:
    df = grading.dataset(name)
    return float(df.loc[df["size"] == size, "lat_p50_us"].median())


# ----------------------------------------------------------------------------- lab 04
def test_n1_the_small_message_floor_is_mostly_copy_launches():
    """N1: at 8 B the two pinned copy launches cost more than the TCP wire alone, so the text may
    not say the wire sets the floor; the sentence the lab prints carries the recorded parts."""
    wire = _p50("h200-bench-host", 8)
    copies = _p50("h200-copy-h2d-pinned", 8) + _p50("h200-copy-d2h-pinned", 8)
    staged = _p50("h200-bench-staged", 8)
    assert copies > wire and copies / staged > 0.5
    text = _src("04")
    assert "set by the wire" not in text and "Over TCP that floor is tens of µs" not in text
    assert "lab04.floor_note()" in text
    note = lab04.floor_note()
    for figure in (f"{wire:.2f} µs", f"{copies:.1f} µs", f"{staged:.1f} µs"):
        assert figure in note
    assert "copy launches set the floor" in note


def test_n2_pipelined_against_shared_below_one_chunk():
    """N2: the recorded pipelined path is slower than shared only up to the last size before
    the first one where it is faster; the lab prints that range from the recording."""
    df = lab04.pipelined_vs_shared()
    first_faster = int(df.loc[df["extra_us"] <= 0, "size"].min())
    slower = df[df["size"] < first_faster]
    assert (slower["extra_us"] > 0).all()
    assert first_faster < 256 * 1024        # before one chunk fills: neither "equal" nor "slower below one chunk"
    text = _src("04")
    assert "at every size up\n#   to 8 KiB" not in text and "3-5 µs (20-25 %)" not in text
    note = lab04.pipelined_vs_shared_note()
    assert f"{slower['extra_us'].min():.1f}-{slower['extra_us'].max():.1f} µs" in note
    assert lab04._b(first_faster) in note


def test_lab04_compares_the_2026_profiles_and_allows_no_crossing():
    """Issue 27 item 4: A100 + HDR and GH200 beside the historic profiles, named in the text with
    their level; at default placement they (and Hopper) have no gdr/pipelined crossing."""
    assert {"a100-hdr", "gh200"} <= set(lab04.HISTORIC_PROFILES)
    x = lab04.crossovers()
    assert x["a100-hdr"] is None and x["gh200"] is None and x["hopper-ndr"] is None
    assert x["kepler-snb-2013"] and x["kepler-ivb-2014"]
    text = _src("04")
    for name in lab04.HISTORIC_PROFILES:
        assert f"`{name}`" in text
    assert "three platforms" not in text


def test_n17_the_cross_socket_note_comes_from_the_model_and_names_its_assumption():
    """N17 and issue 34 item 8: the cross-socket crossings on hopper-ndr are printed from
    model.crossings, the inter-socket bound is labelled an assumption, and the steps explained."""
    note = lab04.crossings_note("hopper-ndr", "cross-socket")
    for chunk in (1 << 20, 256 * 1024):
        xs = model.crossings("hopper-ndr", "gdr", "pipelined", placement="cross-socket", chunk=chunk)
        assert f"{xs[0]['size']:,} B" in note and f"{xs[-1]['size']:,} B" in note
    assert "assumption" in note and "quantisation" in note
    text = _src("04")
    assert "4,815,172" not in text and "bounded by the 32 GB/s inter-socket link" not in text


def test_lab04_hides_the_direction_until_after_exercise_2():
    """Issue 25 item 4 (P-04): no "what wins it" column, no direction in Exercise 1's statement
    or visible asserts, the explorer (which marks the crossing) only after Exercise 2."""
    text = _src("04")
    before = text[: text.index('id="04-seed-correction"')]
    assert "what wins it" not in before
    assert "GDR wins longer" not in before
    assert "pipelined` staging becomes faster than `gdr`" not in before
    assert "crossover_explorer" not in before.split('id="ex1-crossover"')[0].split('id="04-small-messages-gdr-large"')[1]
    assert text.index('id="04-crossover-explorer"') > text.index('id="ex2-policy-tests"')
    assert 'id="ex0-predict-tests"' not in text     # the prediction is not autograded


def test_n6_and_n15_lab04_corrections():
    """N6: iWARP does run RDMA over an offloaded TCP; N15: gdrcopy's 0.1 µs is a write to the
    GPU, the sender reads."""
    text = _src("04")
    assert "RDMA does not run TCP/IP at all" not in text and "iWARP" in text
    assert "gdr_copy_from_mapping" in text and "0.9-1.7 µs" in text


def test_no_graded_crossing_is_printed_in_labs_04_and_05():
    """Issue 24 item 2: the crossings Exercise 1 grades appear in no text of labs 04 and 05."""
    for stem in ("04", "05"):
        text = _src(stem)
        for figure in ("16,359", "16359", "450,884", "450884", "451,720", "451720", "4,138", "about 16 KB"):
            assert figure not in text, (stem, figure)


# ----------------------------------------------------------------------------- lab 05
def test_n3_dgx2_gpu_pairs_are_not_all_pix_or_pxb():
    """N3: the recorded DGX-2H's PCIe matrix has NODE and SYS GPU pairs; the lab prints the counts
    from the matrix and no longer says every pair is PIX or PXB."""
    from gdrlab.labsupport import lab05

    dgx2 = lab05.recorded_topology("DGX2")
    counts = lab05.pair_code_counts(dgx2)
    assert counts.get("NODE", 0) > 0 and counts.get("SYS", 0) > 0
    assert sum(counts.values()) == len(dgx2.gpus) * (len(dgx2.gpus) - 1) // 2
    note = lab05.pair_code_note(dgx2)
    for code, n in counts.items():
        assert f"{n} {code}" in note
    text = _src("05")
    assert "every GPU pair is `PIX` or `PXB`" not in text and "lab05.pair_code_note(dgx2)" in text


def test_n7_sys_within_one_socket_on_the_dgx_a100():
    """N7: on the graded DGX A100, GPU0-NIC2 is SYS although GPU0 and NIC2's GPU2 sit on NUMA
    nodes of one socket (CPU affinities below 64 on a 2 x 64-core EPYC); the code table says so."""
    from gdrlab.labsupport import lab05

    dgx, _ = lab05.recorded_matrix("dgx-a100")
    assert dgx.code("GPU0", "NIC2") == "SYS" and dgx.code("GPU2", "NIC2") == "PXB"
    assert dgx.numa_affinity["GPU0"] != dgx.numa_affinity["GPU2"]
    for gpu in ("GPU0", "GPU2"):
        first_range = dgx.cpu_affinity[gpu].split(",")[0]
        assert int(first_range.split("-")[-1]) < 64
    assert "NUMA nodes of one socket" in lab05.sys_within_one_socket_note(dgx)
    text = _src("05")
    assert "| the inter-socket link (QPI/UPI) |" not in text and "NPS2/NPS4" in text


def test_n4_n5_nccl_version_statements():
    """N4: the per-pair GDR line's level, subsystems and form by NCCL version come from the version
    table (read in NCCL's source at each tag), printed by the lab, not typed; TRACE-only from
    2.30.3; N5: GDR reads default on for Ampere and newer since 2.19."""
    from gdrlab.labsupport import lab05
    from gdrlab.nccl import versions

    text = _src("05")
    assert "From NCCL 2.27 these per-pair lines are printed only by" not in text
    assert "through 2.28" not in text and "lab05.gdr_line_history()" in text
    assert "NCCL_DEBUG_SUBSYS" in text and "from 2.30" in text
    history = lab05.gdr_line_history()
    assert len(history) == len(versions.TABLE["gdr_pair_line"])
    trace = [row for row in history if ": TRACE," in row]
    assert trace and trace[0].startswith("NCCL 2.30.3 ")          # NCCL's paths.cc at v2.30.3-1
    assert all(": INFO," in row for row in history[:-1]) and "GPU {busId:x} / HCA" in history[0]
    assert "NCCL turns it on by default only on NVLink-based platforms" not in text
    assert "since NCCL 2.19" in text and "Ampere" in text


def test_n16_fdr_data_rate_and_the_prediction_window():
    """N16 and issue 24 item 3: FDR x4 carries 6.82 GB/s after 64b/66b encoding; the feedback on
    lab 05's A/B prediction accepts the honest FDR estimate (6.8) and rejects the seed's 9.5; the
    plotted profile is the K40m + Connect-IB, not a K20."""
    from gdrlab.labsupport import lab05

    assert lab05.FDR_X4_DATA_GBPS == pytest.approx(56.25 * 64 / 66 / 8)
    table = lab05.config_ab_table("kepler-ivb-2014", sizes=[1 << k for k in range(3, 27)])
    assert "within what the link carries" in lab05.prediction_feedback("pipelined", 6.8, table)
    assert "more than an FDR x4 port can carry" in lab05.prediction_feedback("pipelined", 9.5, table)
    top_a = float(table[(table["config"] == "A") & (table["path"] == "gdr")]["bw_gbps"].max())
    assert top_a < lab05.FDR_X4_DATA_GBPS
    assert f"{top_a:.1f} GB/s in A" in lab05.ab_note(table)
    text = _src("05")
    assert "K20 GPUs, ConnectX-3 FDR" not in text and "8 GB/s raw" not in text and "K40m" in text


def test_lab05_seed_figures_come_after_the_prediction():
    """P-05 (issue 25 item 4): the seed's 9-10 GB/s and "about 1 GB/s" appear only after the
    prediction cell; the prediction carries no autograded points."""
    text = _src("05")
    cut = text.index('id="ex5-predict-ab"')
    assert "9-10 GB/s" not in text[:cut] and "about 1 GB/s" not in text[:cut] and "1 GB/s or less" not in text[:cut]
    assert "ex4-predict-ab-tests" not in text


def test_lab05_compares_the_2026_profiles():
    """Issue 27 item 4: aws-p5-efa and l40s-pcie beside kepler-ivb-2014; EFA crosses across
    sockets, the L40S server does not."""
    from gdrlab.labsupport import lab05

    df = lab05.ab_summary()
    rows = {r["profile"].split(" ")[0]: r for r in df.to_dict("records")}
    assert set(rows) == {"kepler-ivb-2014", "aws-p5-efa", "l40s-pcie"}
    assert rows["aws-p5-efa"]["B crossing (B)"] == model.crossover("aws-p5-efa", "gdr", "pipelined", placement="cross-socket")
    assert rows["l40s-pcie"]["faster in B"] == "gdr"
    assert "lab05.ab_summary()" in _src("05")


def test_n13_n19_lab05_sources():
    """N13: no citation of a file the repository does not ship; N19: the DGX-2H export's trimmed
    CPU list is said next to the numactl output."""
    text = _src("05")
    assert "CURRICULUM" not in text and "gearshifft PR #82" in text
    xml = (ROOT / "gdrlab" / "data" / "hwloc" / "nvidiaDGX2.xml").read_text(encoding="utf-8")
    assert 'type="Machine" os_index="0" cpuset="0x03000003"' in xml
    assert "`0x03000003`" in text and "24-core Xeon Platinum 8174" in text


# ----------------------------------------------------------------------------- lab 03
def test_n11_break_even_range_from_the_recording():
    """N11: (1300 + 677) / (copy - 0.5) with the recorded 64 KiB copies gives 240-277 sends; the
    lab's summary no longer states the old 250-280 (and, being graded, states no count)."""
    import math

    counts = sorted(math.ceil((1300.0 + 677.0) / (_p50(name, 65536) - 0.5))
                    for name in ("h200-copy-d2h-pinned", "h200-copy-h2d-pinned"))
    assert counts == [240, 277]
    text = _src("03")
    assert "250-280" not in text and "240-277" not in text


def test_n12_large_buffer_break_even_rests_on_an_assumed_slope():
    """N12: "about ten sends" came from the illustrative per-page slope; the text says so."""
    text = _src("03")
    assert "about ten sends" not in text
    assert "assumed" in text[text.index('id="03-amortization-tests-note"'):text.index('id="03-registration-explorer"')]


def test_lab03_exercise_0_comes_first_and_is_not_autograded():
    """Issue 25 item 4 and issue 24 item 3: Exercise 0 precedes Exercise 1; no autograded
    prediction; its reason keeps its question in a locked cell."""
    text = _src("03")
    assert text.index('id="ex0-predict"') < text.index('id="ex1-registration-route"')
    assert 'id="ex0-predict-tests"' not in text
    assert 'id="explain-prediction-registration-question"' in text
    assert "within a **factor of 5** of the published figure below" not in text


def test_lab03_presents_dmabuf_as_the_way_forward():
    """Issue 25 anchor finding: CUDA 13.0 deprecates the NV-P2P API nvidia-peermem relies on."""
    text = _src("03")
    assert "dma-buf is the way forward" in text and "legacy" in text and "CUDA 13.0" in text


def test_lab04_intro_copy_launches_match_the_recording():
    """N1's smaller point: the intro's copy-launch figures are the recorded 8-byte pinned copies
    (lab 02's recording), not 6-8 µs."""
    text = _src("04")
    intro = text[: text.index('id="04-cuda-status"')]
    assert "6-8 µs" not in intro
    assert f"{_p50('h200-copy-h2d-pinned', 8):.1f} µs H2D" in intro
    assert f"{_p50('h200-copy-d2h-pinned', 8):.1f} µs D2H" in intro


def test_lab03_copy_and_bar1_figures_match_the_recordings():
    """Issue 25 item 2: lab 03's 64 KiB copy times and the H200's BAR1 are the recorded ones."""
    text = _src("03")
    d2h, h2d = _p50("h200-copy-d2h-pinned", 65536), _p50("h200-copy-h2d-pinned", 65536)
    assert f"recorded {d2h:.1f} µs\n# D2H and {h2d:.1f} µs H2D" in text
    assert round((d2h + h2d) / 2) == 8 and "at about 8 µs" in text
    bar1 = grading.dataset("h200-copy-h2d-pinned").attrs["provenance"]["hardware_detail"]["bar1_total_bytes"]
    assert bar1 == 256 << 30 and "an H200 has 256 GiB" in text


def test_lab03_exercise_1_applies_conditions_instead_of_recall():
    """Issue 25 (review: "Ex1 is recall"): Exercise 1 grades a rule applied to machines the
    learner has not seen, over a grid of kernels, CUDA versions, module flavours and RDMA stacks,
    and the conditions it applies are stated in the lab before it."""
    text = _src("03")
    ex1 = text[text.index('id="ex1-registration-route-tests"'):text.index('id="03-exercise-1-note"')]
    assert "itertools.product" in ex1 and "HIDDEN TESTS" in ex1
    before = text[:text.index('id="03-exercise-1-registration-route"')]
    for condition in ("Linux 5.12+", "CUDA 11.7+", "open GPU kernel modules", "MLNX_OFED/DOCA-OFED"):
        assert condition in before, condition
    assert "peer_module_today" not in text


def test_lab04_what_you_saw_and_the_crossover_rubric_agree_with_the_model():
    """Lab 04's summary and the `explain-crossover` rubric state a direction (GDR wins small
    messages on every platform; pipelined overtakes on Sandy/Ivy Bridge at default placement and
    on the 2020s profiles only across sockets): recomputed from the model, profile by profile."""
    small, large = 8, 1 << 26
    for prof in lab04.HISTORIC_PROFILES:
        gdr = model.latency_us(prof, "gdr", [small, large])
        pipe = model.latency_us(prof, "pipelined", [small, large])
        assert gdr[0] < pipe[0], prof                       # small messages: GDR on every platform
    default = lab04.crossovers()
    across = lab04.crossovers(placement="cross-socket")
    assert default["kepler-snb-2013"] and default["kepler-ivb-2014"]
    for prof in ("a100-hdr", "hopper-ndr", "gh200"):
        assert default[prof] is None and across[prof], prof
    saw = _src("04")
    saw = saw[saw.index('id="04-you-saw"'):saw.index('id="04-on-your-cluster"')]
    assert "wins small messages on every platform" in saw
    assert "Sandy Bridge and Ivy Bridge; on A100 + HDR, Hopper and GH200\n#   only across sockets" in saw
    rubric = (Path(__file__).resolve().parents[2] / "docs" / "instructor.md").read_text()
    rubric = rubric[rubric.index("### `explain-crossover`"):]
    rubric = rubric[:rubric.index("\n### ", 5)]
    assert "small messages" in rubric and "pipelined staging winning on Hopper" in rubric


def test_lab04_ucx_switch_is_computed_from_the_table():
    """Issue 30 item 2: lab 04 shows UCX's protocol table beside the policy; the sentence about
    where UCX stops sending eagerly comes from the table's ranges (here the H200 recording)."""
    from gdrlab.labsupport import lab04_ucx
    from gdrlab.recorded import load

    df = load("h200-ucx-protocols-cuda")
    note = lab04_ucx.ucx_protocols_note(df)
    eager_max = int(df.loc[df["protocol"].str.startswith("eager"), "max_bytes"].max())
    assert f"eagerly up to {eager_max:,} B" in note and f"from {eager_max + 1:,} B" in note
    text = _src("04")
    cell = text[text.index('id="04-ucx-protocols-table"'):text.index('id="04-written-question"')]
    assert "lab04_ucx.ucx_protocols_note(ucx_table)" in cell and "1,513" not in cell
    assert text.index('id="04-ucx-protocols"') > text.index('id="ex2-policy-tests"')   # after Ex2: no direction given away


def test_lab05_efa_logs_say_whether_gpu_memory_can_cross():
    """Issue 30 item 5: lab 05 reads the posted EFA logs; the old EFA device's log says no FI_HMEM."""
    from gdrlab import nccl

    no_hmem = nccl.parse_log(nccl.plugin_logs()["ofi-issue-161-efa-no-hmem"].read_text())
    p5en = nccl.parse_log(nccl.plugin_logs()["nccl-issue-1597-efa-p5en"].read_text())
    assert no_hmem["ofi"]["provider"] == "efa" and no_hmem["ofi"]["gdr"] is False
    assert p5en["ofi"]["provider"] == "efa" and p5en["ofi"]["nics"] == 16
    text = _src("05")
    assert 'id="05-efa-logs"' in text and "SRD" in text and "IEEE Micro" in text
