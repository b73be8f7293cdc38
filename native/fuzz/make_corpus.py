"""Writes the seed corpus for the fuzz targets: a few valid frames and sessions, encoded here
from the layout documented in native/src/wire/frame.h (not with the engine), so a seed is also an
independent check of that layout. Run: python native/fuzz/make_corpus.py"""
from __future__ import annotations

import pathlib
import struct

MAGIC = 0x4C524447  # "GDRL" in memory order
VERSION = 1
HELLO, WELCOME, REJECT, SETUP, READY, ERROR, DATA, ACK, VERDICT, BYE, CONNECT = range(1, 12)
TOKEN = b"fuzz-token"
HERE = pathlib.Path(__file__).resolve().parent / "corpus"


def header(ftype: int, seq: int, length: int, magic: int = MAGIC, version: int = VERSION) -> bytes:
    return struct.pack("<IHHII", magic, version, ftype, seq, length)


def frame(ftype: int, seq: int, body: bytes = b"") -> bytes:
    return header(ftype, seq, len(body)) + body


def string(s: bytes) -> bytes:
    return struct.pack("<I", len(s)) + s


def hello(token: bytes = TOKEN, version: int = VERSION) -> bytes:
    return struct.pack("<I", version) + string(token)


def spec(path=0, mode=0, size=8, iters=1, warmup=0, window=1, chunk=0, depth=0, device=0, seed=5) -> bytes:
    return struct.pack("<BBQIIIQIIQ", path, mode, size, iters, warmup, window, chunk, depth, device, seed)


def session_client(mode: int, size: int, iters: int, window: int = 1) -> bytes:
    """What a well-behaved client sends for one test (payload bytes are arbitrary: the server
    reports a bad verdict, which is a valid outcome)."""
    out, seq = [frame(HELLO, 0, hello())], 1
    out.append(frame(SETUP, seq, spec(mode=mode, size=size, iters=iters, window=window))); seq += 1
    count = iters if mode == 0 else 0
    count += iters * window if mode == 1 else 0
    for _ in range(count + 1):  # the timed messages, then the verification message
        out.append(frame(DATA, seq, bytes(size))); seq += 1
    out.append(frame(BYE, seq))
    return b"".join(out)


def session_server(size: int) -> bytes:
    """What a well-behaved server answers to a latency test of `size` bytes with 2+1 iterations."""
    out, seq = [frame(WELCOME, 0, string(b"gdrlab wire v1; gpus=0"))], 1
    out.append(frame(READY, seq)); seq += 1
    for _ in range(3):
        out.append(frame(DATA, seq, bytes(size))); seq += 1
    out.append(frame(VERDICT, seq, struct.pack("<q", -1))); seq += 1
    out.append(frame(DATA, seq, bytes(size)))
    return b"".join(out)


def main() -> None:
    frame_seeds = {
        "header_hello": b"\x00" + header(HELLO, 0, 18) + struct.pack("<I", 0),
        "header_data": b"\x00" + header(DATA, 7, 1 << 20) + struct.pack("<I", 7),
        "header_badmagic": b"\x00" + header(HELLO, 0, 0, magic=0x12345678) + struct.pack("<I", 0),
        "hello": b"\x01" + hello(),
        "hello_empty_token": b"\x01" + hello(b""),
        "spec": b"\x02" + spec(),
        "spec_pipelined": b"\x02" + spec(path=3, mode=1, size=1 << 20, chunk=65536, depth=4, window=8),
        "reader": b"\x03" + bytes([5, 0, 1, 2, 3 + 5 * 10, 4]) + b"\x01" + b"\x00" * 12 + string(b"abc"),
        "error_bad_utf8": b"\x04" + bytes([6]) + string(b"peer \xff\xfe\xc3( text"),
        "error_unknown_kind": b"\x04" + bytes([200]) + string(b"kind past the sentinel"),
    }
    session_seeds = {
        "server_lat": b"\x00" + session_client(0, 8, 2),
        "server_bw": b"\x00" + session_client(1, 16, 2, window=2),
        "server_verify": b"\x00" + session_client(2, 33, 0),
        "server_bye": b"\x00" + frame(HELLO, 0, hello()) + frame(BYE, 1),
        "server_badtoken": b"\x00" + frame(HELLO, 0, hello(b"nope")),
        "client_lat": b"\x01" + session_server(8),
        "client_reject": b"\x01" + frame(REJECT, 0, string(b"wrong or missing token")),
        # Both ways (mode bit 0x80), then silence: the server's sender must stop when its
        # receiver meets the end of input; the trailing odd byte picks the concurrent server.
        "server_both_ways_silent": b"\x00" + frame(HELLO, 0, hello())
        + frame(SETUP, 1, spec(mode=0x81, size=4096, iters=1_000_000, window=4)) + b"\x01",
        "server_error_first": b"\x00" + frame(ERROR, 0, bytes([3]) + string(b"\xff\xfe not utf-8")),
    }
    for sub, seeds in (("frame", frame_seeds), ("session", session_seeds)):
        d = HERE / sub
        d.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (d / name).write_bytes(data)


if __name__ == "__main__":
    main()
