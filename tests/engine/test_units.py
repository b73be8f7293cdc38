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


@pytest.mark.parametrize("text,message", [
    ("\uff18", "not a size: '\\uff18' (digits 0-9 and units in ASCII; examples: 8, 4K, 1M, 1G)"),  # full-width 8
    ("\u0668K", "not a size: '\\u0668K' (digits 0-9 and units in ASCII; examples: 8, 4K, 1M, 1G)"),  # Arabic-Indic
    ("8\uff2b", "not a size: '8\\uff2b' (digits 0-9 and units in ASCII; examples: 8, 4K, 1M, 1G)"),  # full-width K
    ("1\u00b2", "not a size: '1\\xb2' (digits 0-9 and units in ASCII; examples: 8, 4K, 1M, 1G)"),
    ("1_000", "not a size: '1_000' (examples: 8, 4K, 1M, 1G)"),
    ("9" * 5000, "99999999999999999999... (5000 digits) is too large (at most 9223372036854775807 bytes)"),
    ("9223372036854775808", "'9223372036854775808' is too large (at most 9223372036854775807 bytes)"),
    ("8589934592G", "'8589934592G' is too large (at most 9223372036854775807 bytes)"),
    (2**63, "9223372036854775808 is too large (at most 9223372036854775807 bytes)"),
    ("x" * 100, "not a size: '" + "x" * 39 + "... (100 characters) (examples: 8, 4K, 1M, 1G)"),
])
def test_parse_size_ascii_digits_and_a_bound(text, message):
    with pytest.raises(ValueError) as exc:
        parse_size(text)
    assert str(exc.value) == message


def test_parse_size_largest_and_leading_zeros():
    assert parse_size("9223372036854775807") == 2**63 - 1
    assert parse_size("0" * 5000 + "8K") == 8192
    with pytest.raises(ValueError, match="too large"):
        parse_sizes("8:" + "9" * 5000)
