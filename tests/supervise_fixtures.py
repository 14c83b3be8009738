"""Shared helpers for the SUPERVISE area's tests (real processes, no mocks)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from wrapper.procgroup import group_members

PYTHON = sys.executable
REPO = Path(__file__).resolve().parent.parent


def write_script(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(0o755)
    return path


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2:].split()[0] != b"Z"


def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.02)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def assert_group_gone(pgid: int) -> None:
    assert group_members(pgid) == [], f"group {pgid} still has {group_members(pgid)}"
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"killpg({pgid}, 0) still finds a process")


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env
