"""``gdrlab serve``: the remote side of ``gdrlab bench``.

The shared token comes from ``--token-file FILE`` or ``$GDRLAB_TOKEN`` (neither shows in ``ps``);
``--token`` still works but is warned about off loopback, where a token must also be at least
16 characters; ``--gen-token`` makes a strong one and prints it once.
"""
from __future__ import annotations

import argparse
import ipaddress
import json
import os
import secrets
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Callable, TextIO

from ..errors import InvalidArgument
from ._common import Subparsers, add_command, utf8_text

if TYPE_CHECKING:
    from .._native import Server

MIN_TOKEN_CHARS = 16  # off loopback; 16 random hex digits are 64 bits, out of reach of online guessing
MAX_TOKEN_BYTES = 256  # the engine's limit for the token in its HELLO frame
DEFAULT_MAX_CLIENTS = 64
DEFAULT_MAX_HANDSHAKES = 512
HOST_BUDGET_CAP = GPU_BUDGET_CAP = 16 << 30


HELP = "serve bench clients (the remote side of `gdrlab bench --peer`)"
DESCRIPTION = ("Serve `gdrlab bench --peer HOST:PORT` clients, many at once (--max-clients). Listens on "
               "127.0.0.1 by default; any other address requires a token of at least 16 characters, from "
               "--token-file or $GDRLAB_TOKEN (--gen-token makes one).")


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "serve", HELP, DESCRIPTION)
    p.add_argument("--listen", default="127.0.0.1:18515", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:18515; IPv6 as [::]:PORT; port 0 picks a free port)")
    tok = p.add_mutually_exclusive_group()
    tok.add_argument("--token-file", metavar="FILE", default=None,
                     help="read the shared secret clients must present from FILE (default: $GDRLAB_TOKEN)")
    tok.add_argument("--gen-token", action="store_true",
                     help="generate a strong token and print it once (give it to clients as GDRLAB_TOKEN)")
    tok.add_argument("--token", default=None,
                     help="the shared secret on the command line: visible to every user in `ps`; "
                          "prefer --token-file or $GDRLAB_TOKEN")
    p.add_argument("--device", type=int, default=0, metavar="N",
                   help="the GPU every GPU test of this server uses, tcp and verbs wire alike, whatever a client "
                        "asks (default 0; one this machine does not have is refused at start-up)")
    p.add_argument("--max-clients", type=_count_between(1, 4096), default=DEFAULT_MAX_CLIENTS, metavar="N",
                   help=f"authenticated clients served at once; more are told 'server busy' (default {DEFAULT_MAX_CLIENTS})")
    p.add_argument("--max-handshakes", type=_count_between(1, 65536), default=DEFAULT_MAX_HANDSHAKES, metavar="N",
                   help="connections authenticating at once (no thread each); past this the oldest is told "
                        f"'server busy' and clients retry within their --timeout (default {DEFAULT_MAX_HANDSHAKES})")
    p.add_argument("--max-pinned", type=_size, default=None, metavar="BYTES",
                   help="host memory budget for all sessions' buffers on both wires (pinned, pageable and "
                        "registered, every landing slot and depth x chunk counted), e.g. 16G "
                        "(default: 25%% of MemTotal, at most 16 GiB)")
    p.add_argument("--max-gpu-mem", type=_size, default=None, metavar="BYTES",
                   help="GPU memory budget for all sessions' buffers (default: 25%% of the device's memory, "
                        "at most 16 GiB)")
    p.add_argument("--idle-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="close an authenticated session idle this long between tests (default 60)")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds any blocking call may wait (default 10)")
    p.add_argument("--max-test-seconds", type=float, default=600.0, metavar="SECONDS",
                   help="one test's limit, SETUP to verdict: a client that trickles its data cannot hold a place "
                        "and its memory longer (default 600)")
    p.add_argument("--once", action="store_true", help="serve one client, then exit")
    p.add_argument("--announce", action="store_true",
                   help='print {"port": N} on stdout once listening (for scripts)')
    return p


# --------------------------------------------------------------------------- argument checks
def _count_between(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number from lo to hi, one clear line otherwise."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {_printable(text)}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {value}")
        return value
    return parse


def _size(text: str) -> int:
    import argparse

    from ..units import parse_size
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(_printable(str(exc))) from None


def _printable(text: str, limit: int = 200) -> str:
    """``text`` safe for one terminal line: non-ASCII, undecodable bytes and control characters
    (newlines, escape codes) escaped; cut at ``limit`` characters."""
    shown = text.encode("unicode_escape").decode("ascii")
    return shown if len(shown) <= limit else shown[:limit] + f"... ({len(text)} characters)"


def _utf8(text: str, what: str) -> str:
    return utf8_text(what, text, _printable)


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[IPv6]:PORT`` -> (host, port), with one clear line for anything else."""
    listen = _utf8(listen, "--listen")
    if listen.startswith("["):
        host, sep, port = listen[1:].partition("]:")
        if not sep:
            raise InvalidArgument(f"--listen {listen!r}: an IPv6 address is written [ADDRESS]:PORT, e.g. [::]:18515")
    else:
        host, sep, port = listen.rpartition(":")
        if ":" in host:
            raise InvalidArgument(f"--listen {listen!r}: an IPv6 address goes in brackets, e.g. [::]:{port} "
                                  f"(every address) or [::1]:{port} (loopback)")
    if not sep or not host or not port.isascii() or not port.isdigit():
        raise InvalidArgument(f"--listen must be HOST:PORT, got {listen!r}")
    if int(port) > 65535:
        raise InvalidArgument(f"--listen {listen!r}: port {int(port)} is out of range (0-65535)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Only this machine can connect: 127.0.0.0/8, ::1 or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve anywhere


def resolve_token(args: argparse.Namespace, host: str) -> tuple[str, list[str], str | None]:
    """(token, warnings, generated token or None) from --token-file, --gen-token, --token or
    $GDRLAB_TOKEN; one clear line for a token that cannot be used."""
    loopback = is_loopback(host)
    warnings: list[str] = []
    generated = None
    if args.gen_token:
        token = generated = secrets.token_urlsafe(24)  # 192 random bits, 32 characters
        where = "--gen-token"
    elif args.token_file is not None:
        path = _utf8(args.token_file, "--token-file")
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_TOKEN_BYTES + 2)
                if os.fstat(f.fileno()).st_mode & 0o077:  # loopback too: every local user reaches 127.0.0.1
                    warnings.append(f"--token-file {_printable(path)} can be read by other users: "
                                    f"chmod 600 {_printable(path)}")
        except OSError as exc:
            raise InvalidArgument(f"--token-file {path}: {exc.strerror}") from None
        try:
            token = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InvalidArgument(f"--token-file {path}: the token is not valid UTF-8 text") from None
        if not token:  # asked for a token: never serve without one, on loopback either
            raise InvalidArgument(f"--token-file {_printable(path)} holds no token (it is empty or only "
                                  "whitespace): write one into it, or use --gen-token")
        where = f"--token-file {path}"
    elif args.token is not None:
        token = _utf8(args.token, "--token")
        where = "--token"
        # On loopback too: on a shared lab machine every local user reaches 127.0.0.1.
        warnings.append("--token puts the secret on the command line, where every user of this machine "
                        "can read it (ps, /proc/PID/cmdline): use --token-file FILE or $GDRLAB_TOKEN")
    else:
        token = _utf8(os.environ.get("GDRLAB_TOKEN", ""), "$GDRLAB_TOKEN")
        where = "$GDRLAB_TOKEN"
    if len(token.encode("utf-8")) > MAX_TOKEN_BYTES:
        raise InvalidArgument(f"{where}: a token of more than {MAX_TOKEN_BYTES} bytes is refused")
    if not loopback and len(token) < MIN_TOKEN_CHARS:
        got = "none" if not token else f"{len(token)} characters"
        raise InvalidArgument(f"listening on {host} (beyond this machine) requires a token of at least "
                              f"{MIN_TOKEN_CHARS} characters from --token-file or $GDRLAB_TOKEN (got {got} "
                              f"from {where}); --gen-token makes one")
    return token, warnings, generated


# --------------------------------------------------------------------------- the command
def run(args: argparse.Namespace) -> int:
    from ..engine import native

    host, port = parse_listen(args.listen)
    if not 0 <= args.device < 1024:
        raise InvalidArgument(f"--device must be a GPU ordinal (0 or more), got {args.device}")
    _check_device(args.device)
    if not 0 < args.timeout <= 86400:  # also refuses NaN
        raise InvalidArgument(f"--timeout must be between 0 and 86400 seconds, got {args.timeout!r}")
    if not 0 < args.idle_timeout <= 86400:
        raise InvalidArgument(f"--idle-timeout must be between 0 and 86400 seconds, got {args.idle_timeout!r}")
    if not 1 <= args.max_test_seconds <= 86400:
        raise InvalidArgument(f"--max-test-seconds must be between 1 and 86400 seconds, got {args.max_test_seconds!r}")
    token, warnings, generated = resolve_token(args, host)
    max_host = args.max_pinned if args.max_pinned is not None else default_host_budget()
    max_gpu = args.max_gpu_mem if args.max_gpu_mem is not None else default_gpu_budget(args.device)
    server = native().Server(host, port, token, int(args.timeout * 1000), max_clients=args.max_clients,
                             idle_ms=max(1, int(args.idle_timeout * 1000)), device=args.device,
                             max_host_bytes=max_host, max_gpu_bytes=max_gpu, max_handshakes=args.max_handshakes,
                             test_ms=int(args.max_test_seconds * 1000))
    # The server lowers --max-clients and the handshake places where this process's limits
    # (open files, threads) cannot hold them, and says so first.
    notes = list(server.limit_notes)
    notes += [f"up to {server.max_clients} clients at once; concurrent measurements share this host's "
              "CPU, memory, network and GPU, so they interfere with each other: for clean figures, "
              "measure one client at a time",
              f"memory budget: host {max_host / 2**30:.1f} GiB (--max-pinned), "
              f"GPU {max_gpu / 2**30:.1f} GiB (--max-gpu-mem); GPU tests use device {args.device} (--device)"]
    # From here on stderr is written without blocking and SIGTERM/Ctrl-C only set a flag: a stderr
    # nobody reads never delays serving or a stop.
    out = _LogWriter(sys.stderr)
    signalled: list[int] = []
    if not args.once:
        def _terminate(signum: int, frame: object) -> None:
            signalled.append(signum)

        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)
    lines = []
    if not args.json or sys.stderr.isatty():
        lines += [f"gdrlab serve: warning: {line}" for line in warnings]
        lines += [f"gdrlab serve: note: {line}" for line in notes]
    if not args.json:
        if generated and not args.announce:
            lines.append(f"gdrlab serve: generated token (shown once; clients set GDRLAB_TOKEN to it): {generated}")
        lines.append(f"gdrlab serve: listening on {host}:{server.port}" + (" (token required)" if token else ""))
    out.write(lines)
    # The announce document comes last: a reader that acts on it (stops the server at once, say)
    # finds the handlers installed and the warnings already written.
    if args.announce or args.json:
        doc: dict = {"port": server.port, "host": host}
        if generated:
            doc["token"] = generated
        if warnings:
            doc["warnings"] = warnings
        doc["notes"] = notes
        print(json.dumps(doc), flush=True)
    if args.once:
        out.close(5.0)
        return _serve_once(server)
    return _serve(server, out, signalled)


def _check_device(device: int) -> None:
    """Refuses a --device this machine does not have. Without a usable CUDA driver the server
    still serves host tests (GPU tests are then refused, naming why), so nothing is checked."""
    from ..engine import native
    usable, _, _ = native().cuda_probe()
    if not usable:
        return
    try:
        count = len(native().gpu_infos())
    except Exception:  # noqa: BLE001 - a driver that cannot list its GPUs: tests will say why
        return
    if device >= count:
        raise InvalidArgument(f"--device {device}: this machine has {count} GPU(s) (0..{count - 1})"
                              if count else f"--device {device}: this machine has no GPU")


def default_host_budget() -> int:
    """min(25 % of MemTotal, 16 GiB); 16 GiB where /proc/meminfo cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return min(int(line.split()[1]) * 1024 // 4, HOST_BUDGET_CAP)
    except (OSError, ValueError, IndexError):
        pass
    return HOST_BUDGET_CAP


def default_gpu_budget(device: int) -> int:
    """min(25 % of the device's memory, 16 GiB); 16 GiB where the driver cannot tell."""
    from ..engine import native
    try:
        for g in native().gpu_infos():
            if g["index"] == device and g["total_mem_bytes"]:
                return min(int(g["total_mem_bytes"]) // 4, GPU_BUDGET_CAP)
    except Exception:  # no driver, no GPU: the budget only matters where there is one
        pass
    return GPU_BUDGET_CAP


def _serve_once(server: Server) -> int:
    """One client in this thread, its outcome the exit status."""
    while True:
        try:
            came, error = server.serve_one(500)  # wake twice a second so Ctrl-C works
        except UnicodeDecodeError:
            came, error = True, "an error whose text is not UTF-8"
        if not came:
            continue
        if error:
            print(f"gdrlab serve: client ended with {_printable(error, 300)}", file=sys.stderr, flush=True)
        return 1 if error else 0


def _serve(server: Server, out: _LogWriter, signalled: list[int]) -> int:
    """Serves until SIGTERM or Ctrl-C (whose handlers only append to ``signalled``): the loop then
    stops the accepting thread, waits for it to leave the engine (a join nothing interrupts) and
    stops the server while Python is alive. Raising from the handler instead can interrupt
    Thread.join() and exit while that thread is still inside the engine (CPython 3.11 then marks
    the thread stopped, and the interpreter's exit kills it there: std::terminate)."""
    # Accepting runs on its own thread (the engine releases the GIL).
    stop = threading.Event()
    failed: list[BaseException] = []

    def accept() -> None:
        try:
            while not stop.is_set():
                server.serve_for(250)
        except Exception as exc:  # noqa: BLE001 - re-raised on the main thread, one clear line
            failed.append(exc)

    acceptor = threading.Thread(target=accept, name="gdrlab-serve-accept", daemon=True)
    acceptor.start()
    try:
        while acceptor.is_alive() and not signalled:
            stop.wait(0.25)
            out.write([f"gdrlab serve: {line}" for line in server.take_log()])  # escaped and capped by the engine
    finally:
        stop.set()
        while acceptor.is_alive():  # at most one serve_for round (250 ms); never interrupted
            acceptor.join(0.1)
        # Sessions end now and write their last line first (a stop while a test runs waits 2 s at most).
        server.stop(2000)
        out.write([f"gdrlab serve: {line}" for line in server.take_log(final=True)])
        out.close(0.5)
    if signalled:
        if signalled[0] == signal.SIGINT:
            out.write(["gdrlab: interrupted"])  # as every other command says it
            out.close(0.2)
        return 128 + signalled[0]
    if failed:
        raise failed[0]
    return 1


class _LogWriter:
    """Lines to a stream without ever blocking: what the stream does not take now waits in a
    bounded backlog (older lines are dropped and counted beyond it) and goes out on the next write."""

    MAX_BACKLOG = 1 << 20

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending = b""
        self._dropped = 0
        try:
            self._fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError):
            self._fd = None  # not a file (a test's capture): written plainly

    def write(self, lines: list[str]) -> None:
        if self._fd is None:
            for line in lines:
                print(line, file=self._stream, flush=True)
            return
        data = "".join(line + "\n" for line in lines).encode("utf-8", errors="replace")
        self._pending += data
        if len(self._pending) > self.MAX_BACKLOG:
            cut = self._pending.find(b"\n", len(self._pending) - self.MAX_BACKLOG)
            self._dropped += self._pending[:cut + 1].count(b"\n")
            self._pending = self._pending[cut + 1:]
        if self._dropped and len(self._pending) < self.MAX_BACKLOG // 2:
            self._pending += f"gdrlab serve: {self._dropped} log lines dropped (stderr was not read)\n".encode()
            self._dropped = 0
        self._flush()

    def _flush(self) -> None:
        if not self._pending or self._fd is None:
            return
        try:
            blocking = os.get_blocking(self._fd)
        except OSError:
            return
        try:
            os.set_blocking(self._fd, False)
            while self._pending:
                n = os.write(self._fd, self._pending)
                self._pending = self._pending[n:]
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:  # stderr closed: nothing more can be said
            self._pending = b""
        finally:
            try:
                os.set_blocking(self._fd, blocking)
            except OSError:
                pass

    def close(self, within_s: float) -> None:
        """Tries for within_s to write what waits, then drops it: a stop never hangs on stderr."""
        deadline = time.monotonic() + within_s
        self._flush()
        while self._pending and time.monotonic() < deadline:
            time.sleep(0.02)
            self._flush()
        self._pending = b""
