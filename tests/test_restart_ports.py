"""Can an immediate relaunch of torchrun bind the MASTER_PORT its killed attempt used?

The question behind restarting without a timer: after a SIGKILL, the store's port is
left with TIME_WAIT connections. A listener without SO_REUSEADDR could not bind it for
about a minute (EADDRINUSE). c10d's TCPStore sets SO_REUSEADDR on its listening socket
(both backends), so the relaunch binds at once; the wrapper only has to wait until the
processes themselves are gone (their listening sockets close when they exit), which the
sweep does already. These tests pin both facts on the installed torch.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.example_training_fixtures import free_port, kill_launcher

pytestmark = pytest.mark.torch
BIN = Path(sys.executable).parent

TRAIN = """\
import time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(1)
for step in range(1_000_000):
    dist.all_reduce(value)
    if dist.get_rank() == 0:
        print(f"step {step}", flush=True)
    time.sleep(0.05)
"""

_TIME_WAIT = "06"
_LISTEN = "0A"


def _sockets_on_port(port: int) -> list[str]:
    """TCP states (hex, as in /proc/net/tcp) of the sockets whose local port is ``port``."""
    states = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                states.append(fields[3])
    return states


def _listening_fd(port: int) -> int:
    """The fd of this process that is listening on ``port`` (matched by socket inode)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == _LISTEN:
                inodes.add(fields[9])
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return int(name)
    raise AssertionError(f"no listening socket of this process on port {port}")


@pytest.mark.parametrize("use_libuv", [True, False])
def test_the_tcpstore_listener_sets_so_reuseaddr(use_libuv: bool) -> None:
    from torch.distributed import TCPStore

    port = free_port()
    store = TCPStore("127.0.0.1", port, world_size=1, is_master=True, use_libuv=use_libuv,
                     wait_for_workers=False)
    try:
        dup = socket.socket(fileno=os.dup(_listening_fd(port)))
        try:
            assert dup.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR) == 1
        finally:
            dup.close()
    finally:
        del store


def _launch(script: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "torchrun"), "--nnodes", "1", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(port), str(script)],
        stdout=subprocess.PIPE, stderr=log.open("wb"), start_new_session=True)


def _wait_for_step(proc: subprocess.Popen[bytes], step: int, log: Path) -> None:
    assert proc.stdout is not None
    for raw in proc.stdout:  # ends at EOF, i.e. when torchrun exits
        if raw.strip() == f"step {step}".encode():
            return
    raise AssertionError(f"torchrun exited {proc.wait()} before step {step}:\n"
                         + log.read_text(errors="replace")[-3000:])


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_torchrun_relaunched_at_once_on_the_same_port_rendezvouses(tmp_path: Path) -> None:
    """2 gloo ranks, SIGKILL of the launcher (the store's server) and its ranks, then a
    relaunch on the same MASTER_PORT with no pause while TIME_WAIT sockets hold it."""
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    port = free_port()
    first = _launch(script, port, tmp_path / "first.log")
    second: subprocess.Popen[bytes] | None = None
    try:
        _wait_for_step(first, 2, tmp_path / "first.log")
        kill_launcher(first)  # the server dies first: its side of each connection gets TIME_WAIT
        deadline = time.monotonic() + 60.0
        while _TIME_WAIT not in _sockets_on_port(port):
            assert time.monotonic() < deadline, f"no TIME_WAIT on {port}: {_sockets_on_port(port)}"
            time.sleep(0.01)
        assert _LISTEN not in _sockets_on_port(port)  # every holder exited: port unheld
        second = _launch(script, port, tmp_path / "second.log")
        _wait_for_step(second, 2, tmp_path / "second.log")
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                kill_launcher(proc)
    log = (tmp_path / "second.log").read_text(errors="replace")
    assert "EADDRINUSE" not in log and "address already in use" not in log.lower()
