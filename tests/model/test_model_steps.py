"""Chunk steps are explained, not printed as facts (issue 34 item 8): a pipelined latency steps up
at every multiple of its chunk size, so near a crossover the faster path can change hands several
times within a few chunks. crossover and policy show such a stretch as one band, say why, and give
how close the two paths stay there; --exact still lists every change."""
from __future__ import annotations

import json

import numpy as np
import pytest

from gdrlab import model
from gdrlab.cli import main

CHUNK = 256 * 1024


def test_hopper_cross_socket_band_holds_every_alternation():
    pol = model.hybrid_policy("hopper-ndr", placement="cross-socket")
    assert len(pol) > 3                                   # the exact answer alternates (9 changes)
    bands = model.step_bands(pol, CHUNK)
    assert len(bands) == 1
    b = bands[0]
    assert (b["lo"], b["before"], b["after"]) == (pol[1]["lo"], "gdr", "pipelined")
    assert b["hi"] == pol[-2]["hi"] and b["changes"] == len(pol) - 1
    assert all(m % CHUNK == 0 and b["lo"] - 1 <= m <= b["hi"] for m in b["chunk_multiples"])
    settled = model.settled_policy(pol, bands)
    assert [r["path"] for r in settled] == ["gdr", None, "pipelined"]
    # the two paths stay close in the band: the gap is under 5 % of either latency
    gap = model.band_margin_us("hopper-ndr", b["paths"], b, placement="cross-socket")
    lat = model.latency_us("hopper-ndr", "gdr", [b["lo"]], placement="cross-socket")[0]
    assert 0 < gap < 0.05 * lat


def test_a_band_needs_a_chunked_path_and_narrow_islands():
    pol = [{"lo": 1, "hi": 99, "path": "gdr"}, {"lo": 100, "hi": 5000, "path": "pipelined"},
           {"lo": 5001, "hi": 10**6, "path": "gdr"}]
    assert model.step_bands(pol, None) == []
    assert model.step_bands(pol, 4096) == []              # the island (4901 B) is wider than a chunk
    assert len(model.step_bands(pol, 8192)) == 1


def test_near_ties_are_not_changes():
    """Pipelined of one chunk is the shared schedule summed another way: rounding once made
    'shared beats pipelined from 4 bytes' with 46,022 changes below 271,366 B on kepler-snb-2013."""
    found = model.crossings("kepler-snb-2013", "pipelined", "shared")
    assert len(found) <= 2
    assert found[0]["size"] == CHUNK + 1                 # one byte past a chunk: a second chunk to pay for


def test_crossover_text_shows_one_band_not_every_change(capsys):
    assert main(["model", "crossover", "--profile", "hopper-ndr", "--placement", "cross-socket",
                 "--a", "gdr", "--b", "pipelined"]) == 0
    out = capsys.readouterr().out
    assert "faster again" not in out                       # the old output listed 8 such lines
    assert "trade the lead 9 times" in out and "chunk" in out
    assert "pipelined is faster at every size from 6045499 bytes" in out
    assert main(["model", "crossover", "--profile", "hopper-ndr", "--placement", "cross-socket",
                 "--a", "gdr", "--b", "pipelined", "--exact"]) == 0
    assert capsys.readouterr().out.count("faster again") == 8


def test_crossover_json_keeps_every_crossing_and_adds_the_band(capsys):
    assert main(["model", "crossover", "--profile", "hopper-ndr", "--placement", "cross-socket",
                 "--a", "gdr", "--b", "pipelined", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["crossings"]) == 9 and doc["crossover_bytes"] == doc["crossings"][0]["size"]
    assert doc["settled_bytes"] == doc["crossings"][-1]["size"]
    (band,) = doc["step_bands"]
    assert band["lo"] == doc["crossover_bytes"] and band["hi"] == doc["settled_bytes"] - 1
    assert band["margin_us"] > 0


def test_policy_text_has_no_island_row(capsys):
    """kepler-snb-2013's exact policy holds a 9 KB 'shared' range just above one chunk; the table
    shows it as a band of pipelined or shared, with the reason."""
    assert main(["model", "policy", "--profile", "kepler-snb-2013"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line[:1].isdigit()]
    assert not any(r[2:] == ["shared"] for r in rows)
    assert any(r[:2] == ["262145", "271366"] and "chunk" in " ".join(r) for r in rows)
    assert "262144 bytes (256K)" in out
    assert main(["model", "policy", "--profile", "kepler-snb-2013", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert any(r["path"] == "shared" for r in doc["policy"])          # the exact ranges are kept
    assert [r["path"] for r in doc["settled"]] == ["gdr", "pipelined", None, "pipelined"]


@pytest.mark.parametrize("prof", ["hopper-ndr", "kepler-snb-2013", "volta-dgx1"])
def test_every_band_sits_at_chunk_multiples(prof):
    chunk = model.get_profile(prof).params["chunk_bytes"]
    for placement in model.PLACEMENTS:
        pol = model.hybrid_policy(prof, placement=placement)
        for b in model.step_bands(pol, chunk):
            assert b["chunk_multiples"], (prof, placement, b)
            assert np.all(np.diff([b["lo"], *b["chunk_multiples"], b["hi"]]) >= -1)
