"""bench/record_h200.py's storage stage runs bench/record_storage.py's own code (imported, not
copied) and leaves the recording with its provenance. Without a GPU here it writes an empty CSV
whose sidecar says why; on the GPU machine the same call records the rows."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "record_h200.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, check=False)


def test_storage_only_writes_the_recording_with_provenance(tmp_path):
    p = run(str(tmp_path), "--storage-only", "--quick", "--prefix", "here")
    assert p.returncode == 0, p.stderr
    doc = json.loads((tmp_path / "here-storage-reads.json").read_text())
    prov = doc["provenance"]
    assert prov["kind"] == "recorded" and prov["hardware"] and prov["date"]
    assert prov["command"].startswith("python3 bench/record_storage.py") and prov["csv"] == "here-storage-reads.csv"
    header = (tmp_path / "here-storage-reads.csv").read_text().splitlines()[0]
    assert header.startswith("storage,cache,method,size")
    rows = (tmp_path / "here-storage-reads.csv").read_text().splitlines()[1:]
    if not rows:                                   # no GPU here: the sidecar says what could not run
        assert any("GPU" in c or "libcuda" in c for c in doc["report"]["could_not"])
    assert "storage reads:" in p.stderr


def test_the_stage_is_imported_not_copied():
    text = SCRIPT.read_text()
    assert "record_storage.py" in text and "def measure(" not in text and "StorageReader" not in text


def test_contradictory_flags_are_one_clear_line(tmp_path):
    p = run(str(tmp_path), "--storage-only", "--no-storage")
    assert p.returncode != 0 and "contradict" in p.stderr.strip().splitlines()[-1]
