"""Defects of model v2 (issue 27), each pinned by a test that failed before the fix.

Expected values come from relations stated in docs/model.md (a CPU on the other socket copies
through BAR1 at ``gdrcopy_remote_eff`` of the local rate and pays one hop) or from evaluating the
model's own latency functions directly at every sample (an oracle for "every sign change")."""
from __future__ import annotations

import numpy as np
import pytest

from gdrlab import model
from gdrlab.cli import main

KiB, MiB = 1 << 10, 1 << 20


@pytest.mark.parametrize("stage", ["gdrcopy-write", "gdrcopy-read"])
def test_gdrcopy_stage_follows_a_cross_socket_placement(stage):
    local = model.get_profile("volta-dgx1", placement="same-host-bridge")
    remote = model.get_profile("volta-dgx1", placement="cross-socket")
    p = local.params
    s = 64 * MiB
    kind = stage.split("-")[1]
    t_local = float(model.stage_us(local, stage, [s])[0])
    t_remote = float(model.stage_us(remote, stage, [s])[0])
    fixed = p[f"gdrcopy_{kind}_us"]
    # docs/model.md: the remote CPU reaches gdrcopy_remote_eff of the local rate, plus one hop
    expected = fixed + p["xsocket_hop_us"] + (t_local - fixed) / p["gdrcopy_remote_eff"]
    assert t_remote == pytest.approx(expected, rel=1e-6)
    assert t_remote > t_local


def test_gdrcopy_path_is_its_stages_in_sequence_at_every_placement():
    for placement in model.PLACEMENTS:
        prof = model.get_profile("volta-dgx1", placement=placement)
        s = np.array([8.0, 4 * KiB, MiB])
        path = model.latency_us(prof, "gdrcopy", s, wire="verbs")
        parts = (model.stage_us(prof, "gdrcopy-read", s) + model.stage_us(prof, "wire-verbs", s)
                 + model.stage_us(prof, "gdrcopy-write", s) + prof.params["sw_overhead_us"])
        assert path == pytest.approx(parts, rel=1e-9), placement


def _faster_from(crossings, a, b, sizes):
    """The faster path at each size according to a crossing list."""
    out = np.full(sizes.shape, a, dtype=object)
    for c in crossings:
        out[sizes >= c["size"]] = c["faster"]
    return out


def test_crossings_find_the_narrow_windows_below_chunk_multiples():
    prof = model.get_profile("hopper-ndr", placement="cross-socket")
    chunk = prof.params["chunk_bytes"]
    found = model.crossings(prof, "gdr", "pipelined", lo=MiB, hi=16 * MiB)
    # Oracle: the latencies themselves, every 1 KiB and at both sides of every chunk multiple.
    k = np.arange(4, 65)
    sizes = np.unique(np.r_[np.arange(MiB, 16 * MiB, KiB), k * chunk, k * chunk + 1, k * chunk - 1])
    gdr = model.latency_us(prof, "gdr", sizes)
    pip = model.latency_us(prof, "pipelined", sizes)
    truth = np.where(pip < gdr, "pipelined", "gdr")
    got = _faster_from(found, "gdr", "pipelined", sizes)
    wrong = sizes[truth != got]
    assert wrong.size == 0, f"crossings disagree with the latencies at {wrong[:5]}"
    first = model.crossover(prof, "gdr", "pipelined")
    i = int(np.argmax(truth == "pipelined"))
    assert sizes[i - 1] < first <= sizes[i]  # between the oracle's last gdr win and first pipelined win
    assert first <= 20 * chunk  # 20 full chunks (5.24 MB): pipelined already wins there


def test_crossings_are_exact_to_the_byte():
    prof = model.get_profile("hopper-ndr", placement="cross-socket")
    for c in model.crossings(prof, "gdr", "pipelined", lo=MiB, hi=64 * MiB):
        x = np.array([c["size"] - 1, c["size"]], dtype=float)
        gdr, pip = model.latency_us(prof, "gdr", x), model.latency_us(prof, "pipelined", x)
        now = pip < gdr
        assert now[1] == (c["faster"] == "pipelined") and now[0] != now[1], c


def test_policy_and_crossover_say_the_steps_are_real(capsys):
    import json

    assert main(["model", "policy", "--profile", "hopper-ndr", "--placement", "cross-socket", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any("chunk" in n and "real" in n for n in doc["notes"])
    assert main(["model", "policy", "--profile", "hopper-ndr", "--placement", "cross-socket"]) == 0
    assert "real features of the pipelined schedule" in capsys.readouterr().out


def test_every_profile_rate_is_below_the_link_it_crosses():
    """A BAR1 write rate above the GPU's own link has no effect on anything (kepler-snb-2013 had
    9.6 GB/s on PCIe Gen2): raising or lowering it by 10 % must move the 1 MiB write on every profile."""
    for name in model.profiles():
        prof = model.get_profile(name)
        v = prof.params["gdrcopy_write_gbps"]
        t = [float(model.stage_us(prof.with_overrides(gdrcopy_write_gbps=v * f), "gdrcopy-write", [MiB])[0])
             for f in (0.9, 1.0, 1.1)]
        assert t[0] > t[1] > t[2], f"{name}: gdrcopy_write_gbps {v} has no effect (above its link?)"
