"""README's list of the seed articles' errors: each correction is really taught where README says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# README item -> (where, a phrase the correction cannot be taught without)
TAUGHT = {
    1: [("labs/src/04-crossover.py", "MV2_GPUDIRECT_LIMIT")],
    2: [("labs/src/01-bar1-exposure.py", "cudaHostRegister()"), ("labs/src/03-peer-memory.py", "cudaHostRegister")],
    3: [("labs/src/00-setup-check.py", "iWARP"), ("labs/src/04-crossover.py", "RFC 5040")],
    4: [("labs/src/03-peer-memory.py", "nv_peer_mem"), ("labs/src/03-peer-memory.py", "dma-buf is the way forward")],
    5: [("labs/src/02-p2p-dma.py", "about 24 GB/s"), ("labs/src/05-topology.py", "9-10"),
        ("labs/src/02-p2p-dma.py", '380, "Gb/s"')],
    6: [("labs/src/01-bar1-exposure.py", "Since Linux 3.3")],
    7: [("labs/src/02-p2p-dma.py", "never touch BAR1")],
    8: [("labs/src/01-bar1-exposure.py", "a 64-bit BAR occupies two of the six slots")],
    9: [("labs/src/06-siblings.py", 'id="06-seed-correction"')],
    10: [("docs/cluster.md", "rm_peer_mem=1")],
}


def _readme_items() -> dict[int, str]:
    text = (ROOT / "README.md").read_text()
    block = text[text.index('calls them "the seed articles"'):text.index("docs/claims.md")]
    items = re.split(r"^ ?(\d{1,2})\. ", block, flags=re.M)[1:]
    return {int(n): " ".join(body.split()) for n, body in zip(items[::2], items[1::2])}


def test_readme_lists_every_correction_taught():
    assert sorted(_readme_items()) == sorted(TAUGHT)


@pytest.mark.parametrize("item", sorted(TAUGHT))
def test_each_correction_is_taught_where_readme_says(item):
    line = _readme_items()[item]
    for path, phrase in TAUGHT[item]:
        assert phrase in (ROOT / path).read_text(), (item, path, phrase)
        lab = re.match(r"labs/src/(\d\d)-", path)
        if lab and item != 5:
            assert f"lab {lab[1]}" in line or f"labs {lab[1]}" in line or f" {lab[1]})" in line, (item, line)
