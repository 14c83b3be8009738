"""The sandboxed Jinja worker: renders templates in its own interpreter, under limits.

OSMO renders templates in worker processes with a time limit (0.5 s) and a memory limit
(100 MiB on top of what the worker already uses). This file is that worker for resched.
It runs as a separate interpreter (started by :mod:`workflows.render` with
``python -c <bootstrap> this-file``), imports only the standard library and jinja2, and
never imports ``workflows``.

Limits, set before EACH render and lifted after it:

* CPU time: ``ITIMER_PROF`` fires after ``cpu_seconds`` of CPU time (user + system) and
  the handler raises :class:`CpuLimitExceeded` (a ``BaseException``, so no
  ``except Exception`` in Jinja swallows it). For work that never returns to the
  interpreter (one huge C-level operation) ``RLIMIT_CPU`` is a backstop: the kernel's
  SIGXCPU ends the worker about a second later, and the parent reports the same limit.
* Memory: the soft ``RLIMIT_AS`` is the worker's CURRENT virtual size plus
  ``memory_bytes``, so the template itself gets ``memory_bytes`` of address space,
  whatever the interpreter and jinja2 already take (measured at each render).

Protocol (binary, on stdin/stdout): each message is an 8-byte big-endian length and a
payload. Requests are pickles of ``{"template", "data", "cpu_seconds", "memory_bytes"}``.
Replies are a JSON header, then (for a success) a second frame with the UTF-8 text
(``surrogatepass``, so every Python string comes back exactly).
"""

from __future__ import annotations

import atexit
import json
import os
import pickle
import resource
import select
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

_LENGTH = struct.Struct(">Q")
MIB = 1024 * 1024


class CpuLimitExceeded(BaseException):
    """Raised by the CPU-time alarm inside a render."""


def _on_cpu_alarm(signum: int, frame: Any) -> None:
    raise CpuLimitExceeded()


def _vm_size() -> int:
    """This process's virtual size in bytes (what RLIMIT_AS counts)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _read_exact(stream: BinaryIO, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _send(stream: BinaryIO, payload: bytes) -> None:
    stream.write(_LENGTH.pack(len(payload)))
    stream.write(payload)


def _template_lineno(error: BaseException, template: Any) -> int | None:
    """The template line an error happened on.

    Jinja rewrites the traceback of an ``Exception`` so that its '<template>' frames carry
    template lines; a ``BaseException`` (the CPU alarm) keeps the generated code's
    frames, whose lines the compiled template maps back itself.
    """
    lineno = getattr(error, "lineno", None)
    if isinstance(lineno, int):
        return lineno
    found = None
    for frame, line in traceback.walk_tb(error.__traceback__):
        if frame.f_code.co_filename == "<template>":
            found = line
    if found is not None and isinstance(error, CpuLimitExceeded) and template is not None:
        return int(template.get_corresponding_lineno(found))
    return found


def _classify(error: BaseException, template: Any) -> dict[str, Any]:
    import jinja2.exceptions
    import jinja2.sandbox

    if isinstance(error, CpuLimitExceeded):
        kind = "cpu"
    elif isinstance(error, MemoryError):
        kind = "memory"
    elif isinstance(error, RecursionError):
        kind = "recursion"
    elif isinstance(error, jinja2.sandbox.SecurityError):
        kind = "security"
    elif isinstance(error, jinja2.exceptions.UndefinedError):
        kind = "undefined"
    elif isinstance(error, jinja2.exceptions.TemplateSyntaxError):
        kind = "syntax"
    else:
        kind = "error"
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 - an exception whose str() fails: still one line
        message = ""
    return {
        "ok": False,
        "kind": kind,
        "type": type(error).__name__,
        "message": message[:2000],
        "lineno": _template_lineno(error, template),
    }


def _set_limits(cpu_seconds: float, memory_bytes: int) -> None:
    _, as_hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_size() + memory_bytes
    if as_hard != resource.RLIM_INFINITY:
        limit = min(limit, as_hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, as_hard))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    cpu_soft = int(usage.ru_utime + usage.ru_stime + cpu_seconds) + 2
    if cpu_hard != resource.RLIM_INFINITY:
        cpu_soft = min(cpu_soft, cpu_hard)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_soft, cpu_hard))
    signal.setitimer(signal.ITIMER_PROF, cpu_seconds)


def _lift_limits() -> None:
    signal.setitimer(signal.ITIMER_PROF, 0)
    _, as_hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (as_hard, as_hard))
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_hard, cpu_hard))


def render_once(request: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """Render one request under the limits; returns (header, text or None)."""
    import jinja2
    import jinja2.sandbox

    environment = jinja2.sandbox.SandboxedEnvironment(undefined=jinja2.StrictUndefined)
    text = template = None
    header: dict[str, Any]
    try:
        _set_limits(float(request["cpu_seconds"]), int(request["memory_bytes"]))
        try:
            template = environment.from_string(request["template"])
            text = template.render(request["data"])
        finally:
            _lift_limits()
        header = {"ok": True}
    except BaseException as error:  # every failure becomes one reply
        _lift_limits()
        if isinstance(error, (KeyboardInterrupt, SystemExit)):
            raise
        header = _classify(error, template)
        del error  # drop the frames (and any huge locals) before replying
    return header, text


def _serve(requests: BinaryIO, replies: BinaryIO) -> None:
    # Warm up so that lazy imports and first-use costs are not charged to a template.
    render_once({"template": "{{ x }}", "data": {"x": 1}, "cpu_seconds": 5, "memory_bytes": 1 << 30})
    ready = {"ready": True, "vm_bytes": _vm_size(), "rss_bytes": _rss(), "pid": os.getpid()}
    _send(replies, json.dumps(ready).encode())
    replies.flush()
    while True:
        size = _read_exact(requests, _LENGTH.size)
        if size is None:
            return
        payload = _read_exact(requests, _LENGTH.unpack(size)[0])
        if payload is None:
            return
        header, text = render_once(pickle.loads(payload))
        if text is not None:
            body = text.encode("utf-8", "surrogatepass")
            header["vm_bytes"] = _vm_size()
            _send(replies, json.dumps(header).encode())
            _send(replies, body)
        else:
            _send(replies, json.dumps(header).encode())
        replies.flush()



# ---- the parent side -----------------------------------------------------------------

CPU_LIMIT_S = 0.5  # OSMO's DEFAULT_MAX_TIME
MEMORY_LIMIT_BYTES = 100 * 1024 * 1024  # OSMO's DEFAULT_JINJA_MEMORY
WALL_LIMIT_S = 30.0  # backstop only: the CPU limit is what stops a template
_WORKER_FILE = Path(__file__).resolve()
# Run the worker file by path, without the current directory on sys.path, so that
# nothing next to the user's files can shadow jinja2 or the standard library.
_BOOTSTRAP = (
    "import runpy, sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
    "runpy.run_path(sys.argv[1], run_name='__main__')"
)


@dataclass(frozen=True)
class SandboxFailure:
    """Why a render failed: ``kind`` is undefined | syntax | security | recursion |
    error | cpu | memory | crashed; ``lineno`` is the line in the rendered template."""

    kind: str
    message: str
    error_type: str = ""
    lineno: int | None = None


@dataclass(frozen=True)
class SandboxResult:
    text: str | None
    failure: SandboxFailure | None = None


class WorkerStartError(RuntimeError):
    """The worker interpreter could not be started."""


class _Worker:
    def __init__(self) -> None:
        self.pid_owner = os.getpid()
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP, str(_WORKER_FILE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            close_fds=True,
        )
        ready = self._read_message(WALL_LIMIT_S)
        if ready is None:
            self.close()
            raise WorkerStartError(f"the render worker did not start: {self.stderr_tail()}")
        self.info: dict[str, Any] = json.loads(ready)

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else f"exit status {self.process.poll()}"

    def _read_exact(self, size: int, deadline: float) -> bytes | None:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        chunks = []
        while size:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, min(size, 1 << 20))
            if not chunk:
                return None
            chunks.append(chunk)
            size -= len(chunk)
        return b"".join(chunks)

    def _read_message(self, timeout: float) -> bytes | None:
        deadline = time.monotonic() + timeout
        size = self._read_exact(_LENGTH.size, deadline)
        if size is None:
            return None
        return self._read_exact(_LENGTH.unpack(size)[0], deadline)

    def render(self, template: str, data: Mapping[str, Any], cpu_s: float, memory: int) -> SandboxResult:
        request = {"template": template, "data": dict(data), "cpu_seconds": cpu_s,
                   "memory_bytes": memory}
        payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(_LENGTH.pack(len(payload)) + payload)
            self.process.stdin.flush()
            header_bytes = self._read_message(WALL_LIMIT_S)
            header = json.loads(header_bytes) if header_bytes is not None else None
            body = self._read_message(WALL_LIMIT_S) if header and header.get("ok") else None
        except TimeoutError:
            self.close()
            return SandboxResult(None, SandboxFailure(
                "cpu", f"rendering took longer than {WALL_LIMIT_S:g} s of wall time"))
        except BrokenPipeError:
            header = None
        if header is None or (header.get("ok") and body is None):
            return SandboxResult(None, self._death())
        if header["ok"]:
            assert body is not None
            return SandboxResult(body.decode("utf-8", "surrogatepass"))
        return SandboxResult(None, SandboxFailure(
            header["kind"], header["message"], header.get("type", ""), header.get("lineno")))

    def _death(self) -> SandboxFailure:
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.close()
            status = self.process.returncode
        if status == -signal.SIGXCPU:
            return SandboxFailure("cpu", "the render worker was stopped at its CPU-time limit")
        return SandboxFailure("crashed", f"the render worker died ({self.stderr_tail()})")

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - kill cannot be refused
            pass
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()


_lock = threading.Lock()
_worker: _Worker | None = None


def _get_worker() -> _Worker:
    global _worker
    if _worker is not None and (_worker.pid_owner != os.getpid() or not _worker.alive()):
        if _worker.pid_owner == os.getpid():
            _worker.close()
        _worker = None  # a forked child never touches its parent's worker
    if _worker is None:
        _worker = _Worker()
    return _worker


def render_in_sandbox(
    template: str,
    data: Mapping[str, Any],
    *,
    cpu_seconds: float = CPU_LIMIT_S,
    memory_bytes: int = MEMORY_LIMIT_BYTES,
) -> SandboxResult:
    """Render ``template`` with ``data`` in the sandboxed worker, under the limits."""
    global _worker
    with _lock:
        for attempt in (1, 2):
            worker = _get_worker()
            result = worker.render(template, data, cpu_seconds, memory_bytes)
            if result.failure is None or result.failure.kind not in ("cpu", "memory", "crashed"):
                return result
            worker.close()  # a fresh worker for the next render, with a clean heap
            _worker = None
            if result.failure.kind != "crashed" or attempt == 2:
                return result
            # A reused worker that died (killed from outside, say) gets one retry in a fresh
            # one: rendering has no side effects.
        return result


def worker_info() -> dict[str, Any]:
    """What the worker measured about itself when it started (vm/rss bytes, pid)."""
    with _lock:
        return dict(_get_worker().info)


def shutdown() -> None:
    """Stop the worker (it would also exit by itself when this process closes its pipe)."""
    global _worker
    with _lock:
        if _worker is not None and _worker.pid_owner == os.getpid():
            _worker.close()
        _worker = None


atexit.register(shutdown)


def measure() -> None:
    """``python workflows/render_worker.py --measure``: what the limits leave a template."""
    info = worker_info()
    print(f"worker after start: vm {info['vm_bytes'] / MIB:.1f} MiB, rss {info['rss_bytes'] / MIB:.1f} MiB")
    low, high = 1, 200  # MiB of one string the template builds (its output is its length)
    while low < high:
        middle = (low + high + 1) // 2
        result = render_in_sandbox(f"{{{{ ('x' * {middle} * 1048576) | length }}}}", {})
        low, high = (middle, high) if result.failure is None else (low, middle - 1)
    print(f"largest string a template can build: {low} MiB (limit: vm at render + "
          f"{MEMORY_LIMIT_BYTES // MIB} MiB)")
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    result = render_in_sandbox(loop, {})
    wall = time.monotonic() - started
    shutdown()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    kind = result.failure.kind if result.failure else "none"
    print(f"endless loop: stopped by {kind} after {wall:.2f} s wall; the worker's whole life "
          f"used {cpu:.2f} s CPU (limit {CPU_LIMIT_S} s per render)")


def main() -> None:
    if sys.argv[1:] == ["--measure"]:
        measure()
        return
    signal.signal(signal.SIGPROF, _on_cpu_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C reaches it
    # The protocol gets its own copy of fd 1; fd 1 itself becomes stderr, so that a stray
    # print can never corrupt a reply.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _serve(sys.stdin.buffer, replies)


if __name__ == "__main__":
    main()
