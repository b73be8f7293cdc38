"""The ucx wire: the same bench rows through UCX (its UCP API), the library production codes use.

The engine opens ``libucp.so.0`` with dlopen (no UCX headers at build time): the libucx wheel's
(``pip install 'gdrlab[ucx]'`` installs libucx-cu12), else the system's. A session is the engine's
own: the tcp handshake with the token gates everything, and the two UCX worker addresses travel
over that authenticated control connection, so no UCX listener is opened. Each test then moves its
messages with UCX tagged sends between one worker per side; UCX chooses transports and protocol.

Rows carry ``path`` = ``"ucx"`` (DESIGN.md: a library wire's rows are named after the wire) and
UCX's own protocol choice in the ``protocol`` column (from ``ucp_request_query`` on the
verification message; ``unknown`` where UCX completed it at once and said nothing), with the
transports it named in ``ucx_transports``. Memory: ``--path host`` moves host (pageable) memory
on both sides; device memory (``src_mem``/``dst_mem`` = ``"device"``) goes through UCX's
cuda_copy transport where a GPU and UCX's CUDA module are there.

Transports: ``$UCX_TLS`` when set (UCX reads it in each process); otherwise this side asks for
``tcp`` (and ``cuda_copy`` for device memory), the like-for-like counterpart of the tcp wire.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._engine import ucx_wheel_library as wheel_library
from ..errors import InvalidArgument, Unavailable
from ..ucx import parse_proto_info
from ..vocab import MEMORY_KINDS, MODES
from .buffers import cuda_status, native
from .peers import ThreadPeer, check_timeout

__all__ = [
    "PROBE_MEMORY",
    "PROBE_SIZES",
    "VERBS_TLS",
    "WIRE",
    "UcxConnection",
    "default_tls",
    "entry",
    "probe_output",
    "require_ucx",
    "split_protocol",
    "status",
    "ucx_library",
    "wheel_library",
]

#: The wire's name: the ``wire`` and ``path`` of its rows.
WIRE = "ucx"
#: UCX transport names that need its verbs module (libuct_ib): what the PyPI wheel lacks.
VERBS_TLS = ("rc", "dc", "ud", "rc_x", "dc_x", "ud_x", "rc_v", "ud_v", "rc_mlx5", "dc_mlx5", "ud_mlx5", "ib")
#: What the verification message's protocol is called when UCX said nothing about it.
UNKNOWN = "unknown"


def _ucx() -> Any:
    """The engine's ucx module (:func:`gdrlab._engine.native` points it at the wheel's libucp)."""
    return native().ucx


def status() -> dict[str, Any]:
    """What UCX is here: ``loaded``, ``version``, ``library``, ``reason`` (when not loaded),
    ``modules`` (its transport modules), ``has_verbs`` (rc/dc/ud possible) and ``has_cuda``."""
    st = dict(_ucx().status())
    st["verbs_note"] = ("" if not st["loaded"] or st["has_verbs"] else
                        f"built without verbs (no libuct_ib in {st['module_dir']}): no rc/dc/ud, so no "
                        "GPUDirect RDMA through this UCX; the PyPI wheel is built this way, conda-forge's ucx "
                        "and rdma-core builds are not")
    return st


def ucx_library() -> dict[str, Any]:
    """UCX as ``gdrlab doctor`` lists a library: ``found``, ``version`` (with where it was loaded
    from and whether it has verbs) or ``reason``, and ``has_verbs``/``has_cuda``."""
    try:
        st = status()
    except Unavailable as exc:  # no engine
        return {"found": False, "reason": str(exc)}
    if not st["loaded"]:
        return {"found": False, "reason": st["reason"], "has_verbs": False, "has_cuda": False}
    verbs = "with verbs (rc, dc, ud)" if st["has_verbs"] else st["verbs_note"]
    return {"found": True, "version": f"{st['version']} ({st['library']}); {verbs}", "ucx_version": st["version"],
            "library": st["library"], "has_verbs": st["has_verbs"], "has_cuda": st["has_cuda"],
            "modules": st["modules"]}


def _tls_env() -> str:
    return os.environ.get("UCX_TLS", "")


def default_tls(src_mem: str, dst_mem: str) -> str:
    """The transports this side asks UCX for: ``""`` (UCX's own configuration) when ``$UCX_TLS``
    is set, else tcp, with cuda_copy when either side's buffer is device memory."""
    if _tls_env():
        return ""
    return "tcp,cuda_copy" if "device" in (src_mem, dst_mem) else "tcp"


def require_ucx(path: str, src_mem: str = "pageable", dst_mem: str = "pageable", tls: str | None = None) -> None:
    """Unavailable (one line saying why) unless UCX can run this test here: the library, the
    transports ``$UCX_TLS`` names (rc/dc need a UCX built with verbs) and, for device memory, a
    GPU and UCX's CUDA module. ``tls``: the transport list asked for (``None``: ``$UCX_TLS``).
    InvalidArgument for a path the wire does not take."""
    if path != "host":
        raise InvalidArgument(f"the {WIRE} wire takes --path host: UCX chooses how the bytes move; GPU memory "
                              "is asked for as the memory kind (src_mem/dst_mem 'device'), not as a path")
    for side, kind in (("src_mem", src_mem), ("dst_mem", dst_mem)):
        if kind not in MEMORY_KINDS:
            raise InvalidArgument(f"{side} must be one of {', '.join(MEMORY_KINDS)}, got {kind!r}")
    st = status()
    if not st["loaded"]:
        raise Unavailable(f"the {WIRE} wire needs UCX: {st['reason']}")
    tls = _tls_env() if tls is None else tls
    if any(t in VERBS_TLS for t in tls.split(",")) and not st["has_verbs"]:
        raise Unavailable(f"UCX_TLS={tls} asks for verbs transports, and the UCX at {st['library']} is "
                          f"{st['verbs_note']}")
    if "device" in (src_mem, dst_mem) or "pinned" in (src_mem, dst_mem):
        cs = cuda_status()
        if not cs["usable"]:
            raise Unavailable(f"{'device' if 'device' in (src_mem, dst_mem) else 'pinned'} memory over the "
                              f"{WIRE} wire needs CUDA: {cs['reason']}")
        if "device" in (src_mem, dst_mem) and not st["has_cuda"]:
            raise Unavailable(f"device memory over the {WIRE} wire needs UCX's CUDA module (libuct_cuda), "
                              f"which is not in {st['module_dir']}")


_DESCRIPTION = re.compile(r"\blength \d+ (?P<desc>.*?)(?: [\d.]+ [KMGT]?B/s(?: [\d.]+ us)?)?\s*$")


def split_protocol(text: str) -> tuple[str, str]:
    """(protocol, transports) from UCX's description of a request, e.g. ``"{proto|init|rk_use}
    tag_send from host memory length 4194304 rendezvous fragmented copy-in copy-out tcp/lo 12.0
    MB/s 332724.15 us"`` -> ``("rendezvous fragmented copy-in copy-out", "tcp/lo")``; words
    naming a transport/device pair (``tl/dev``) are the transports. ``(UNKNOWN, "")`` for ``""``."""
    m = _DESCRIPTION.search(text or "")
    if not m:
        return (UNKNOWN, "") if not text else (text.strip(), "")
    words = m.group("desc").split()
    lanes = [w.rstrip(",") for w in words if "/" in w]
    proto = " ".join(w for w in words if "/" not in w)
    return proto or UNKNOWN, ",".join(lanes)


class UcxConnection:
    """A session with a ``gdrlab serve`` peer whose tests move over UCX.

    ``src_mem``/``dst_mem``: this side's and the server's memory kind (``pageable``, ``pinned`` or
    ``device``); ``tls``: the transports this side asks UCX for (``None``: :func:`default_tls`)."""

    wire = WIRE

    def __init__(self, host: str, port: int, token: str = "", timeout_s: float = 10.0, *, src_mem: str = "pageable",
                 dst_mem: str = "pageable", tls: str | None = None) -> None:
        check_timeout(timeout_s)
        self.src_mem, self.dst_mem = src_mem, dst_mem
        self.tls = default_tls(src_mem, dst_mem) if tls is None else tls
        self._c = _ucx().Client(host, int(port), token or "", int(timeout_s * 1000))
        self.peer = f"{host}:{port}"

    @property
    def server_description(self) -> str:
        """What the peer says about itself (host, GPU) in the handshake."""
        return str(self._c.server_description)

    def measure(self, path: str, size: int, *, mode: str = "lat", iters: int = 100, warmup: int = 10,
                window: int = 1, device: int = 0, seed: int | None = None,
                **_path_options: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """One test: ``(samples_s, bytes_per_sample, verified, info)``, as every wire's
        ``measure``; ``info`` holds UCX's description of the protocol (``protocol``, raw),
        its version on both sides and the transports asked for. Chunk and depth (the pipelined
        path's) do not apply: UCX fragments by itself."""
        if mode not in MODES:
            raise InvalidArgument(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
        if path != "host":
            raise InvalidArgument(f"the {WIRE} wire takes path 'host' (memory kinds say where the buffers are)")
        if isinstance(size, bool) or int(size) != size or size <= 0:
            raise InvalidArgument(f"size must be a positive integer, got {size!r}")
        for name, value, least in (("iters", iters, 0), ("warmup", warmup, 0), ("window", window, 1),
                                   ("device", device, 0)):
            if not least <= int(value) <= 2**32 - 1:
                raise InvalidArgument(f"{name} must be {least}..{2**32 - 1}, got {value}")
        seed = secrets.randbits(63) if seed is None else seed
        out = self._c.run(self.src_mem, self.dst_mem, MODES.index(mode), int(size), int(iters), int(warmup),
                          int(window), int(device), int(seed), self.tls)
        return out[0], out[1], bool(out[2]), dict(out[3])

    def close(self) -> None:
        """End the session (the peer learns it at once)."""
        self._c.close()

    def __enter__(self) -> "UcxConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Link:
    conn: UcxConnection
    stack: contextlib.ExitStack
    protocols: dict[int, tuple[str, str]]
    table: list[dict[str, Any]] | None = None  # UCX_PROTO_INFO's tagged-send rows, read once when needed


def _from_table(link: _Link, size: int) -> tuple[str, str]:
    """(protocol, transports) UCX's own table gives for a tagged send of ``size`` bytes from this
    link's memory over its transports (:func:`probe_output`, once per link); (UNKNOWN, "") where
    the table cannot be had."""
    if link.table is None:
        mem = "cuda" if link.conn.src_mem == "device" else "host"
        try:
            text, _ = probe_output(mem, link.conn.tls or None)
            link.table = [r for r in parse_proto_info(text)
                          if r["operation"].startswith("tagged message") and r["variant"] == ""]
        except (Unavailable, InvalidArgument):
            link.table = []
    for r in link.table:
        if r["min_bytes"] <= size and (r["max_bytes"] is None or size <= r["max_bytes"]):
            return str(r["protocol"]), str(r["transports"])
    return UNKNOWN, ""


def _memory(opts: Any) -> tuple[str, str]:
    """The two sides' memory kinds a bench asks for (``--src-mem``/``--dst-mem``), host
    (pageable) memory where it names none."""
    par = getattr(opts, "parity", None)
    return (getattr(par, "src_mem", None) or "pageable", getattr(par, "dst_mem", None) or "pageable")


def entry(wire_cls: Any, connect: Callable[..., Any], measure_size: Callable[..., Any]) -> Any:
    """The wire table's entry (:class:`gdrlab.transfer.driver.Wire`) for ucx, built from the
    driver's own session opener (``connect``: a local peer when none is given) and its one-size
    measurement (``measure_size``), so the ucx rows are the other wires' rows, renamed."""

    def require(path: str) -> None:
        require_ucx(path)

    def open_(opts: Any, peer: str | None, token: str | None, local_peer: str) -> tuple[_Link, str]:
        src, dst = _memory(opts)
        require_ucx(opts.path, src, dst)
        if getattr(getattr(opts, "parity", None), "lanes", 1) > 1:
            raise InvalidArgument(f"the {WIRE} wire makes its own lanes (UCX_NET_DEVICES, UCX_MAX_RNDV_RAILS): "
                                  "leave --streams unset")
        stack = contextlib.ExitStack()

        def cls(host: str, port: int, tok: str, timeout_s: float) -> UcxConnection:
            return UcxConnection(host, port, tok, timeout_s, src_mem=src, dst_mem=dst)

        try:
            conn, name = connect(stack, cls, opts, peer, token, local_peer)
            # Warm both processes and UCX's context before the first measured size.
            conn.measure("host", min(max(opts.sizes), 1 << 20), mode="lat", iters=50, warmup=20, device=opts.device)
        except BaseException:
            stack.close()
            raise
        return _Link(conn, stack, {}), name

    def run(link: _Link, opts: Any, size: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        row, kept, info = measure_size(link.conn, opts, size)
        proto, lanes = split_protocol(str(info.get("protocol", "")))
        source = "ucp_request_query"
        if proto == UNKNOWN:  # UCX completed the message at once and said nothing: ask its table
            proto, lanes = _from_table(link, size)
            source = "UCX_PROTO_INFO" if proto != UNKNOWN else ""
        link.protocols[size] = (proto, lanes)
        row["path"] = WIRE
        row["protocol"] = proto
        row["protocol_source"] = source
        row["ucx_transports"] = lanes
        return row, kept, info

    def describe(link: _Link | None, info: dict[str, Any]) -> dict[str, Any]:
        st = status()
        src, dst = (link.conn.src_mem, link.conn.dst_mem) if link is not None else ("", "")
        return {"peer_description": link.conn.server_description if link is not None else "",
                "ucx_version": st.get("version"), "ucx_library": st.get("library"),
                "peer_ucx_version": info.get("peer_ucx_version"),
                "ucx_tls": (link.conn.tls if link is not None and link.conn.tls else f"$UCX_TLS={_tls_env()}"),
                "ucx_net_devices": os.environ.get("UCX_NET_DEVICES", ""),
                "src_mem": src, "dst_mem": dst,
                "protocol_source": "per row: ucp_request_query on the size's verification message, or where UCX "
                                   "completed that at once, UCX_PROTO_INFO's table for a tagged send of this "
                                   "memory over these transports (a probe process, `gdrlab ucx protocols`)",
                "ucx_verbs": st.get("verbs_note") or "verbs transports present"}

    return wire_cls(require, open_, run, lambda link: link.stack.close(), describe)


#: ``gdrlab ucx protocols --mem`` names and the memory kind each side's buffer then is.
PROBE_MEMORY = {"host": "pageable", "cuda": "device"}
#: Message sizes the probe moves: one per protocol class UCX has (short, eager, rendezvous).
PROBE_SIZES = (8, 64 << 10, 4 << 20)


def probe_output(mem: str = "host", tls: str | None = None, timeout_s: float = 60.0) -> tuple[str, dict[str, Any]]:
    """UCX's log of a small transfer with ``UCX_PROTO_INFO=y``: a process of its own (UCX reads
    the variable once, at start) moves :data:`PROBE_SIZES` between two workers (this process's
    thread peer), ``mem`` memory on both sides, over ``tls`` (``None``: :func:`default_tls`).
    Returns (stdout and stderr together, what was run)."""
    if mem not in PROBE_MEMORY:
        raise InvalidArgument(f"--mem must be one of {', '.join(PROBE_MEMORY)}, got {mem!r}")
    kind = PROBE_MEMORY[mem]
    require_ucx("host", kind, kind, tls)
    env = dict(os.environ, UCX_PROTO_INFO="y")
    env.pop("UCX_LOG_FILE", None)
    if tls:
        env["UCX_TLS"] = tls
    cmd = [sys.executable, "-m", "gdrlab.transfer.ucx_wire", kind]
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True, errors="replace", env=env,
                              timeout=timeout_s, cwd=pkg_root, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise Unavailable(f"the UCX probe did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise Unavailable(f"the UCX probe failed: {last}")
    st = status()
    meta = {"ucx_version": st["version"], "ucx_library": st["library"], "memory": mem,
            "ucx_tls": tls or (f"$UCX_TLS={_tls_env()}" if _tls_env() else default_tls(kind, kind)),
            "ucx_net_devices": os.environ.get("UCX_NET_DEVICES", ""), "sizes": list(PROBE_SIZES),
            "peer": "a second UCX worker in a thread of the probe process"}
    return proc.stdout + proc.stderr, meta


def _probe(kind: str) -> None:
    """The probe process: a thread peer and one verified latency test per probe size."""
    with ThreadPeer(timeout_s=30.0) as peer, \
            UcxConnection("127.0.0.1", peer.port, peer.token, 30.0, src_mem=kind, dst_mem=kind) as conn:
        for size in PROBE_SIZES:
            if not conn.measure("host", size, mode="lat", iters=2, warmup=1)[2]:
                raise SystemExit(f"size {size} was not verified")


if __name__ == "__main__":
    _probe(sys.argv[1] if len(sys.argv) > 1 else "pageable")
