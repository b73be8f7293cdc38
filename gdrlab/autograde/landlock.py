"""The grading kernel's sandbox: a Landlock ruleset, applied before the kernel starts.

``python -m gdrlab.autograde.landlock --rw DIR [--ro PATH ...] -- COMMAND...`` restricts itself
and then execs COMMAND, which inherits the restriction (and so does everything it starts). Files
may be read only beneath the ``--ro`` paths (the Python installation and its packages, system
libraries, /proc, /sys, /dev) and written only beneath ``--rw`` (the kernel's own temporary
folder, which holds a copy of the one submission); the course folder with the instructor's
notebooks, the gradebook and other learners' submissions is in neither, so a read there fails
with EACCES. Signals to processes outside the sandbox are refused too where the kernel supports
that scope (Landlock ABI 6, Linux 6.12).

Landlock (Linux 5.13 and later, enabled in most distributions' kernels) needs no privilege and
behaves the same for root: root's capabilities do not lift a Landlock rule. In a container it
needs the runtime's seccomp profile to allow the three landlock system calls (Docker's default
profile does from 20.10.13; older ones answer ENOSYS or EPERM). Where it is unavailable,
:func:`available` says why and the grading step refuses to grade unless told otherwise.
"""
from __future__ import annotations

import argparse
import ctypes
import errno
import os
import platform
import sys

__all__ = ["available", "main", "restrict"]

# System call numbers: the generic table (x86_64 and aarch64 share them for these calls).
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# include/uapi/linux/landlock.h, filesystem access rights
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_REMOVE_DIR, _REMOVE_FILE, _MAKE_CHAR, _MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_MAKE_REG, _MAKE_SOCK, _MAKE_FIFO, _MAKE_BLOCK, _MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_REFER, _TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_SCOPE_SIGNAL = 1 << 1  # ABI 6
_READ = _EXECUTE | _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE  # the rights a rule on a file may hold


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; OSError with the kernel's answer where there is none."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "aarch64"):
        raise OSError(errno.ENOSYS, f"Landlock is a Linux feature; this is {platform.system()} on {platform.machine()}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if version < 0:
        err = ctypes.get_errno()
        why = {errno.ENOSYS: "the kernel has no Landlock (Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK), "
                             "or a container's seccomp profile refuses its system calls",
               errno.EOPNOTSUPP: "Landlock is built in but not enabled (add landlock to the lsm= boot parameter)",
               errno.EPERM: "a seccomp profile refuses Landlock's system calls"}.get(err, os.strerror(err))
        raise OSError(err, why)
    return int(version)


def available() -> tuple[bool, str]:
    """(True, 'Landlock ABI N') where the sandbox can be applied; (False, why) where not."""
    try:
        return True, f"Landlock ABI {abi_version()}"
    except OSError as exc:
        return False, exc.strerror or str(exc)


def restrict(read_only: list[str], read_write: list[str]) -> int:
    """Restricts this process (and what it execs) to reading beneath ``read_only`` and
    ``read_write`` and writing beneath ``read_write``. Returns the ABI used; OSError if it cannot."""
    abi = abi_version()
    handled = (_READ | _WRITE_FILE | _REMOVE_DIR | _REMOVE_FILE | _MAKE_CHAR | _MAKE_DIR | _MAKE_REG | _MAKE_SOCK
               | _MAKE_FIFO | _MAKE_BLOCK | _MAKE_SYM)
    if abi >= 2:
        handled |= _REFER
    if abi >= 3:
        handled |= _TRUNCATE
    attr = _RulesetAttr(handled, 0, _SCOPE_SIGNAL if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else 8  # older kernels know only the first field
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    try:
        for paths, rights in ((read_only, _READ), (read_write, handled)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # a path this machine lacks (/lib32, say) grants nothing
                try:
                    allowed = rights & handled
                    if not os.path.isdir(path):
                        allowed &= _FILE_RIGHTS
                    rule = _PathBeneathAttr(allowed, fd)
                    if libc.syscall(_SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                    ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"landlock_add_rule {path}: {os.strerror(err)}")
                finally:
                    os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        if libc.syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"landlock_restrict_self: {os.strerror(err)}")
    finally:
        os.close(ruleset)
    return abi


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gdrlab.autograde.landlock",
                                     description="Run COMMAND able to read only beneath --ro and --rw paths "
                                                 "and to write only beneath --rw paths (Landlock).")
    parser.add_argument("--ro", action="append", default=[], metavar="PATH", help="a path that may be read")
    parser.add_argument("--rw", action="append", default=[], metavar="PATH", help="a path that may be read and written")
    parser.add_argument("--home", metavar="DIR", help="a writable folder that becomes HOME, TMPDIR, IPYTHONDIR and "
                                                      "the Jupyter and cache folders (its subfolders are made)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (after --)")
    if args.home:
        places = {"HOME": "home", "TMPDIR": "tmp", "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "tmp",
                  "JUPYTER_CONFIG_DIR": "jupyter", "JUPYTER_DATA_DIR": "jupyter", "XDG_CACHE_HOME": "cache",
                  "XDG_CONFIG_HOME": "config"}
        for var, sub in places.items():
            path = os.path.join(args.home, sub)
            os.makedirs(path, exist_ok=True)
            os.environ[var] = path
        args.rw.append(args.home)
    try:
        restrict(args.ro, args.rw)
    except OSError as exc:
        print(f"gdrlab grading sandbox: cannot apply Landlock: {exc.strerror or exc}", file=sys.stderr)
        return 3
    os.execvp(command[0], command)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    raise SystemExit(main())
