"""The verification pattern against its definition, computed here byte by byte: word w of a
message is splitmix64(seed ^ w), byte i is byte i % 8 of word i // 8 (little-endian). Fills and
checks at unaligned offsets and lengths, and a flipped byte is reported at its exact index."""
from __future__ import annotations

import ctypes
import random

from gdrlab import engine

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def expected(seed: int, n: int) -> bytes:
    return bytes((splitmix64(seed ^ (i // 8)) >> (8 * (i % 8))) & 0xFF for i in range(n))


def test_fill_and_check_match_the_definition_at_any_offset_and_length():
    rng = random.Random(5)
    buf = engine.native().Buffer("pageable", 8192)
    for _ in range(200):
        off, n, seed = rng.randrange(0, 64), rng.randrange(1, 3000), rng.randrange(0, 1 << 64)
        buf.fill_pattern(seed, off, n)
        got = ctypes.string_at(buf.address + off, n)
        assert got == expected(seed, n), (off, n)
        assert buf.check_pattern(seed, off, n) == -1
        k = rng.randrange(0, n)
        ctypes.memset(buf.address + off + k, got[k] ^ 0x20, 1)
        assert buf.check_pattern(seed, off, n) == k, (off, n, k)


def test_a_message_over_many_words_reports_its_first_bad_byte():
    # Long enough for the checker's blocks of words; the damage at the end of a block, in the
    # middle of one, and in the unaligned tail.
    n = 64 * 8 * 5 + 3
    buf = engine.native().Buffer("pageable", n)
    for k in (64 * 8 - 1, 64 * 8 * 2 + 100, n - 1):
        buf.fill_pattern(9, 0, n)
        ctypes.memset(buf.address + k, ctypes.string_at(buf.address + k, 1)[0] ^ 1, 1)
        assert buf.check_pattern(9, 0, n) == k
