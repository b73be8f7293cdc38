"""`gdrlab bench` given hostile input: every refusal is one line on stderr that names the flag
(sizes, counts, the timeout, --peer, the token from --token, --token-file or $GDRLAB_TOKEN); only
ASCII digits make numbers; a token on the command line is warned about, on loopback too."""
from __future__ import annotations

import os

import pytest

from gdrlab.cli import build_parser, main
from gdrlab.commands import bench as bench_cmd

HUGE = "9" * 5000
U32 = 2**32 - 1
PREFIX = "gdrlab bench: InvalidArgument: "
TOKEN_WARNING = ("gdrlab bench: warning: --token puts the secret on the command line, where every user of this "
                 "machine can read it (ps, /proc/PID/cmdline): use --token-file FILE or $GDRLAB_TOKEN")
QUICK = ["--sizes", "8", "--iters", "3", "--warmup", "0", "--mode", "lat"]


def _refused(capsys, *argv: str) -> str:
    """The one line `gdrlab bench ARGV` says on stderr when it refuses ARGV (nothing on stdout)."""
    status = main(["bench", *argv])
    out = capsys.readouterr()
    assert status == 1 and out.out == "", (status, out)
    lines = out.err.splitlines()
    assert len(lines) == 1, out.err
    return lines[0]


# ------------------------------------------------------------------------------ sizes name their flag
@pytest.mark.parametrize("argv,message", [
    (["--path", "pipelined", "--chunk", "0", "--sizes", "8"], "--chunk: size must be at least 1 byte, got '0'"),
    (["--sizes", "0"], "--sizes: size must be at least 1 byte, got '0'"),
    (["--sizes", "8,0"], "--sizes: size must be at least 1 byte, got '0'"),
    (["--sizes", "4X"], "--sizes: not a size: '4X' (examples: 8, 4K, 1M, 1G)"),
    (["--chunk", "4X"], "--chunk: not a size: '4X' (examples: 8, 4K, 1M, 1G)"),
    (["--sizes", ","], "--sizes: no sizes given"),
    (["--sizes", "64:8"], "--sizes: range '64:8' runs backwards"),
    (["--chunk", "8,16"], "--chunk takes one size, got 8,16"),
])
def test_size_errors_name_their_flag(capsys, argv, message):
    assert _refused(capsys, *argv) == PREFIX + message


# ------------------------------------------------------------------------------ thousands of digits
@pytest.mark.parametrize("flag,text,message", [
    ("--sizes", HUGE, "--sizes: 99999999999999999999... (5000 digits) is too large (at most 9223372036854775807 bytes)"),
    ("--sizes", f"8:{HUGE}K", ("--sizes: 99999999999999999999... (5000 digits) is too large "
                               "(at most 9223372036854775807 bytes)")),
    ("--chunk", HUGE, "--chunk: 99999999999999999999... (5000 digits) is too large (at most 9223372036854775807 bytes)"),
    ("--sizes", "9223372036854775808", "--sizes: '9223372036854775808' is too large (at most 9223372036854775807 bytes)"),
    ("--iters", HUGE, f"--iters: 99999999999999999999... (5000 digits) is too large (at most {U32})"),
    ("--depth", HUGE, f"--depth: 99999999999999999999... (5000 digits) is too large (at most {U32})"),
    ("--timeout", HUGE, "--timeout: 99999999999999999999... (5000 digits) is too large (at most 86400)"),
    ("--iters", "4294967296", f"--iters 4294967296: must be 1..{U32}"),
    ("--peer", f"127.0.0.1:{HUGE}", "--peer port: 99999999999999999999... (5000 digits) is too large (at most 65535)"),
])
def test_huge_numbers_are_one_line(capsys, flag, text, message):
    assert _refused(capsys, flag, text) == PREFIX + message


# ------------------------------------------------------------------------------ ASCII digits only
NOT_WHOLE = "is not a whole number (digits 0-9)"


@pytest.mark.parametrize("flag", ["--iters", "--warmup", "--window", "--depth", "--device", "--tclass", "--sl",
                                  "--pkey-index"])
@pytest.mark.parametrize("text,shown", [
    ("\uff15", "\\uff15"),        # full-width 5
    ("\u0665", "\\u0665"),        # Arabic-Indic 5
    ("1\u00b2", "1\\xb2"),        # superscript two: str.isdigit() says yes, int() says no
    ("1_000", "1_000"), ("0x10", "0x10"), ("2.5", "2.5"), ("", ""), ("-", "-"), ("5\x1b[2J", "5\\x1b[2J"),
])
def test_counts_take_ascii_digits_only(capsys, flag, text, shown):
    assert _refused(capsys, flag, text) == PREFIX + f"{flag}: '{shown}' {NOT_WHOLE}"


@pytest.mark.parametrize("text,shown", [("\uff11", "\\uff11"), ("nan", "nan"), ("inf", "inf"), ("1e3", "1e3"),
                                        ("1_0", "1_0"), (".", "."), ("\u0661.5", "\\u0661.5")])
def test_timeout_takes_ascii_digits_only(capsys, text, shown):
    assert _refused(capsys, "--timeout", text) == \
        PREFIX + f"--timeout: '{shown}' is not a number (digits 0-9, e.g. 2.5)"


@pytest.mark.parametrize("flag,text", [("--sizes", "\uff18"), ("--sizes", "8:\uff16\uff14K"), ("--chunk", "\uff18K"),
                                       ("--sizes", "\u0668"), ("--chunk", "4\uff2b")])
def test_sizes_take_ascii_digits_only(capsys, flag, text):
    shown = ascii(text.rpartition(":")[2])
    assert _refused(capsys, flag, text) == \
        PREFIX + f"{flag}: not a size: {shown} (digits 0-9 and units in ASCII; examples: 8, 4K, 1M, 1G)"


@pytest.mark.parametrize("argv,message", [
    (["--window", "0"], f"--window 0: must be 1..{U32}"),
    (["--warmup", "-1"], f"--warmup -1: must be 0..{U32}"),
    (["--iters", "0"], f"--iters 0: must be 1..{U32}"),
    (["--sl", "16"], "--sl 16: must be 0..15"),
    (["--tclass", "256"], "--tclass 256: must be 0..255"),
    (["--pkey-index", "65536"], "--pkey-index 65536: must be 0..65535"),
    (["--timeout", "0"], "--timeout 0: must be more than 0 and at most 86400"),
    (["--timeout", "86400.5"], "--timeout 86400.5: must be more than 0 and at most 86400"),
    (["--peer", "127.0.0.1:\uff18\uff10"], "--peer port: '\\uff18\\uff10' is not a whole number (digits 0-9)"),
    (["--peer", "127.0.0.1:0"], "--peer port 0: must be 1..65535"),
    (["--peer", "nowhere"], "--peer must be HOST:PORT, got nowhere"),
])
def test_out_of_range_names_the_flag(capsys, argv, message):
    assert _refused(capsys, *argv) == PREFIX + message


def test_plain_numbers_are_read_as_before():
    args = build_parser().parse_args(["bench", "--iters", " 7", "--warmup", "0", "--window", "007", "--depth", "+2",
                                      "--device", "1", "--timeout", "2.5", "--sizes", "8,4K", "--chunk", "64K"])
    assert bench_cmd.check_numbers(args) == 64 << 10
    assert (args.iters, args.warmup, args.window, args.depth, args.device) == (7, 0, 7, 2, 1)
    assert args.timeout == 2.5 and args.sizes == [8, 4096]
    defaults = build_parser().parse_args(["bench"])
    assert bench_cmd.check_numbers(defaults) is None
    assert (defaults.iters, defaults.device, defaults.timeout, defaults.sizes[0]) == (None, 0, 10.0, 8)


# ------------------------------------------------------------------------------ the token
def test_token_on_the_command_line_is_warned_about_on_loopback_too(capsys):
    # no --peer: the local peer on 127.0.0.1; every user of the machine reaches it and reads ps
    assert main(["bench", *QUICK, "--token", "SECRET"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == TOKEN_WARNING and TOKEN_WARNING not in err[1:], err


def test_token_flag_reaches_the_peer_with_its_warning(capsys, serve_process):
    assert main(["bench", *QUICK, "--peer", serve_process.address, "--token", serve_process.token]) == 0
    assert capsys.readouterr().err.splitlines()[0] == TOKEN_WARNING


def test_token_file_reaches_the_peer_without_a_warning(capsys, serve_process, tmp_path):
    path = tmp_path / "token"
    path.write_text(f"  {serve_process.token}\n")
    path.chmod(0o600)
    assert main(["bench", *QUICK, "--peer", serve_process.address, "--token-file", str(path)]) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o660])
def test_token_file_others_can_read_is_warned_about(capsys, serve_process, tmp_path, mode):
    path = tmp_path / "token"
    path.write_text(serve_process.token)
    path.chmod(mode)
    assert main(["bench", *QUICK, "--peer", serve_process.address, "--token-file", str(path)]) == 0
    assert capsys.readouterr().err.splitlines()[0] == \
        f"gdrlab bench: warning: --token-file {path} can be read by other users: chmod 600 {path}"


def test_wrong_token_from_a_file_is_refused_by_the_peer(capsys, serve_process, tmp_path):
    path = tmp_path / "token"
    path.write_text("not-the-token")
    path.chmod(0o600)
    assert main(["bench", *QUICK, "--peer", serve_process.address, "--token-file", str(path)]) == 1
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("content,message", [
    (b"", "holds no token (it is empty or only whitespace): write the server's token into it"),
    (b" \n\t\n", "holds no token (it is empty or only whitespace): write the server's token into it"),
    (b"ab\xffcd\n", ": the token is not valid UTF-8 text"),
    (b"x" * 257, ": a token of more than 256 bytes is refused"),
])
def test_token_file_that_cannot_be_used(capsys, tmp_path, content, message):
    path = tmp_path / "token"
    path.write_bytes(content)
    path.chmod(0o600)
    line = _refused(capsys, "--peer", "127.0.0.1:1", "--token-file", str(path))
    assert line == PREFIX + f"--token-file {path}" + ("" if message.startswith(":") else " ") + message


def test_token_file_missing_and_undecodable_name(capsys, tmp_path):
    missing = tmp_path / "missing"
    assert _refused(capsys, "--peer", "127.0.0.1:1", "--token-file", str(missing)) == \
        PREFIX + f"--token-file {missing}: No such file or directory"
    odd = os.fsdecode(os.fsencode(tmp_path) + b"/a\xffb")
    assert _refused(capsys, "--peer", "127.0.0.1:1", "--token-file", odd) == \
        PREFIX + f"--token-file {tmp_path}/a\\xffb: No such file or directory"


def test_token_file_that_is_no_regular_file(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opened for reading without a writer it would block the command for ever
    assert _refused(capsys, "--peer", "127.0.0.1:1", "--token-file", str(fifo)) == \
        PREFIX + f"--token-file {fifo}: not a regular file"
    assert _refused(capsys, "--peer", "127.0.0.1:1", "--token-file", str(tmp_path)) == \
        PREFIX + f"--token-file {tmp_path}: Is a directory"


def test_token_and_token_file_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--token", "a", "--token-file", "f"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == \
        "gdrlab bench: error: argument --token-file: not allowed with argument --token"


# ------------------------------------------------------------------------------ undecodable bytes
def test_undecodable_token_and_peer_are_one_line_naming_them(capsys, monkeypatch):
    bad = os.fsdecode(b"ab\xffcd")
    assert _refused(capsys, "--peer", "127.0.0.1:1", "--token", bad).endswith(
        PREFIX + "--token is not valid UTF-8 text (ab\\xffcd)")
    assert _refused(capsys, "--peer", os.fsdecode(b"12\xff7.0.0.1:1")) == \
        PREFIX + "--peer is not valid UTF-8 text (12\\xff7.0.0.1:1)"
    monkeypatch.setenv("GDRLAB_TOKEN", bad)
    assert _refused(capsys, "--peer", "127.0.0.1:1") == PREFIX + "$GDRLAB_TOKEN is not valid UTF-8 text (ab\\xffcd)"
    monkeypatch.setenv("GDRLAB_TOKEN", "x" * 257)
    assert _refused(capsys, "--peer", "127.0.0.1:1") == PREFIX + "$GDRLAB_TOKEN: a token of more than 256 bytes is refused"
