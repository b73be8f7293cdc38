import pytest

from gdrlab.units import format_size, parse_size, parse_sizes


@pytest.mark.parametrize("text,expected", [
    ("8", 8), ("4K", 4096), ("4k", 4096), ("1M", 1048576), ("1MiB", 1048576), ("2G", 2147483648), (" 16 ", 16),
    (64, 64),
])
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "0", "-8", "4X", "K", "1.5M", True, 0, -1])
def test_parse_size_rejects(bad):
    with pytest.raises(ValueError):
        parse_size(bad)


def test_list_and_range():
    assert parse_sizes("8,4K,1M") == [8, 4096, 1 << 20]
    assert parse_sizes("8:64") == [8, 16, 32, 64]
    # Ends that are not powers of two are kept, with the powers of two between them.
    assert parse_sizes("3:20") == [3, 4, 8, 16, 20]
    assert parse_sizes("1K:4K,8") == [8, 1024, 2048, 4096]
    assert len(parse_sizes("8:64M")) == 24  # 2^3 .. 2^26


def test_range_backwards_and_empty():
    with pytest.raises(ValueError):
        parse_sizes("64:8")
    with pytest.raises(ValueError):
        parse_sizes("")


def test_format_size():
    assert format_size(4096) == "4K"
    assert format_size(3 << 20) == "3M"
    assert format_size(1536) == "1536"
