"""The unit arithmetic the importers use (gdrlab.units additions), against figures worked by hand
from each tool's definition of its units."""
from __future__ import annotations

import pytest

from gdrlab import units


@pytest.mark.parametrize("value, unit, gbps", [
    (1000.0, "MiB/s", 1000 * 1048576 / 1e9),   # perftest "MB/sec" and ucx_perftest "MB/s": 2^20 bytes
    (1000.0, "MB/s", 1.0),                     # OSU "MB/s": 10^6 bytes
    (200.0, "Gb/s", 25.0),                     # perftest --report_gbits: 10^9 bits = 125e6 bytes
    (12.5, "GB/s", 12.5),                      # nccl-tests, nvbandwidth: already the kit's unit
    (0.0, "MiB/s", 0.0),
])
def test_to_gbps_by_each_tools_definition(value, unit, gbps):
    assert units.to_gbps(value, unit) == pytest.approx(gbps, rel=1e-12)


def test_mib_and_mb_differ_by_the_binary_factor():
    # the same printed number is 4.86% larger in perftest's MB than in OSU's
    assert units.to_gbps(100, "MiB/s") / units.to_gbps(100, "MB/s") == pytest.approx(1.048576)


@pytest.mark.parametrize("unit", ["Mb/s", "mib/s", "", "GiB/s", "MB/sec"])
def test_unknown_rate_unit_is_one_line(unit):
    with pytest.raises(ValueError) as err:
        units.to_gbps(1.0, unit)
    assert "unknown rate unit" in str(err.value) and "\n" not in str(err.value)


def test_rate_units_table_names_every_tool_unit():
    assert set(units.RATE_UNITS) == {"MiB/s", "MB/s", "Gb/s", "GB/s"}


def test_one_way_is_half_a_round_trip():
    assert units.one_way_us(13.76) == pytest.approx(6.88)
    assert units.one_way_us(0) == 0


def test_ns_to_us():
    assert units.ns_to_us(1500) == pytest.approx(1.5)
