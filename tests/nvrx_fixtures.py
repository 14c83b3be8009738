"""Helpers for the NVRx end-to-end tests: ports, running `resched wrap`, records."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.supervise_fixtures import REPO, child_env

PYTHON_BIN = Path(sys.executable).parent


def free_port_block(count: int) -> int:
    """A base port with ``count`` consecutive free ports on 127.0.0.1 (the example uses
    MASTER_PORT, +1 and +2; torchrun's store, the training's store, the Wrapper's)."""
    for _ in range(200):
        base = random.randint(20000, 60000 - count)
        with ExitStack() as stack:
            try:
                for offset in range(count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            return base
    raise AssertionError("no block of free ports found")


def wrap(state: Path, options: list[str], command: list[str], *, timeout: float = 240,
         **env: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state),
            "--node", "node-a", "--grace", "5", *options, "--", *command]
    environment = child_env(**env)
    environment["PATH"] = f"{PYTHON_BIN}:{environment.get('PATH', '')}"
    return subprocess.run(argv, cwd=REPO, env=environment, capture_output=True, text=True,
                          timeout=timeout, check=False)


def records(state: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted((state / "attempts").glob("*.json"))]
