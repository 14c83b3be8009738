"""Linux pipe syscalls that move output without copying it through Python.

``splice(2)`` moves pages from a pipe to another fd (``os.splice``, Python 3.10+);
``tee(2)`` duplicates a pipe's pages into a second pipe without consuming them. Python's
os module has no ``tee``, so it is called through ctypes on the C library. Both are
optional: :func:`zero_copy_available` says whether this platform has them, and every
caller keeps a plain read/write path for when it does not (other systems, old libcs,
``RESCHED_NO_SPLICE=1``, a target that refuses splice with EINVAL).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import stat
import struct
import sys
import termios
from collections.abc import Callable

# Forces the read/write path (debugging, or a kernel whose splice misbehaves).
NO_SPLICE_ENV = "RESCHED_NO_SPLICE"
SPLICE_F_MOVE = 1
SPLICE_F_NONBLOCK = 2
F_SETPIPE_SZ = 1031
F_GETPIPE_SZ = 1032

TeeFunction = Callable[[int, int, int, int], int]


def _load_tee() -> TeeFunction | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        function = libc.tee
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint)
    function.restype = ctypes.c_ssize_t
    return function  # type: ignore[no-any-return]


_TEE: TeeFunction | None = _load_tee()


def tee(fd_in: int, fd_out: int, length: int, flags: int = 0,
        *, function: TeeFunction | None = None) -> int:
    """Duplicate up to ``length`` bytes from pipe ``fd_in`` into pipe ``fd_out``.

    Returns the bytes duplicated (0: ``fd_in`` is empty and its writers are gone).
    Raises OSError with the C errno (BlockingIOError for EAGAIN, InterruptedError for
    EINTR), like os.read; OSError(ENOSYS) when the C library has no tee.
    """
    call = function if function is not None else _TEE
    if call is None:
        raise OSError(errno.ENOSYS, "tee(2) is not available on this system")
    result = call(fd_in, fd_out, length, flags)
    if result < 0:
        code = ctypes.get_errno() or errno.EIO
        raise OSError(code, os.strerror(code))
    return int(result)


def zero_copy_available(environ: dict[str, str] | None = None) -> bool:
    """splice and tee exist here and were not switched off."""
    env = os.environ if environ is None else environ
    if env.get(NO_SPLICE_ENV, "") not in ("", "0"):
        return False
    return _TEE is not None and hasattr(os, "splice")


def may_splice_into(fd: int) -> bool:
    """Whether splicing into ``fd`` is safe and worth trying (a failure still falls back).

    Pipes and sockets (and /dev/null). Not regular files: splice(2) moves the file
    position without the lock write(2) takes, so with ``> log 2>&1`` the stdout and
    stderr pumps (or the wrapper's own notes) could write at the same offset and
    overwrite each other. Not terminals and other devices (EINVAL), nor O_APPEND files
    (EINVAL always)."""
    try:
        status = os.fstat(fd)
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    if flags & os.O_APPEND:
        return False
    mode = status.st_mode
    if stat.S_ISCHR(mode):
        try:
            return os.path.samestat(status, os.stat(os.devnull))
        except OSError:
            return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def pipe_size(fd: int, size: int) -> int:
    """Ask for a ``size``-byte pipe buffer (best effort); return the size it has."""
    try:
        fcntl.fcntl(fd, F_SETPIPE_SZ, size)
    except OSError:
        pass  # over /proc/sys/fs/pipe-max-size for an unprivileged user: keep the default
    try:
        return int(fcntl.fcntl(fd, F_GETPIPE_SZ))
    except OSError:
        return 64 * 1024


def pending_bytes(fd: int) -> int:
    """Bytes waiting in a pipe (FIONREAD); 0 when it cannot be asked."""
    try:
        raw = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int(struct.unpack("i", raw)[0])
