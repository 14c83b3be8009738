"""Where ``resched wrap`` keeps its state, and who may use it.

The state directory holds the outcome records and ``history.json`` (budgets spent,
nodes excluded). Three rules:

- **Keyed by run.** With ``--checkpoint-dir`` it is ``<checkpoint-dir>/.resched``: it
  travels with the checkpoint, and a checkpoint belongs to one run. Without one it is
  ``./.resched/wrap/<name>-<key>``, the key a hash of the command line (or of
  ``RESCHED_RUN_ID`` when set), so an unrelated run started in the same directory is not
  judged by another run's history (it used to be refused as "node excluded by an earlier
  attempt" because every run shared ``./.resched``).
- **One wrapper per node at a time.** A wrapper holds an exclusive ``flock`` on
  ``wrap.<node>.lock`` for its whole life: a second wrapper with the same state dir and
  node name would write the same attempt record names, so it is refused with one line.
  Wrappers on other nodes sharing the directory (a multi-node job on a shared file
  system) take other locks and go on; their records carry the node in their names.
  (With ``--checkpoint-url`` the checkpoint directory's own lock, taken before the
  start-up restore, comes first: wrapper/checkpoint/dirlock.py.)
- **Read-only is not fatal.** A state dir that exists but cannot be written (a checkpoint
  mounted read-only) is read for its history, and this run's records go to a private
  temporary directory, with one warning line: the training still starts.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from wrapper.errors import ReschedError

RUN_ID_ENV = "RESCHED_RUN_ID"
STATE_HELP = (
    "Outcome records and history. Default: <checkpoint-dir>/.resched (travels with the "
    "checkpoint), else ./.resched/wrap/<command>-<key>, one per command line "
    f"(${RUN_ID_ENV} names the run instead). Delete that directory to forget earlier "
    "attempts (budgets spent, nodes excluded).")
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class StateDirBusy(ReschedError):
    """Another wrapper of the same node uses the state directory."""


def default_state_dir(checkpoint_dir: Path | None, command: Sequence[str] = (),
                      environ: Mapping[str, str] | None = None) -> Path:
    """The state dir of a run: see the module docstring."""
    if checkpoint_dir is not None:
        return checkpoint_dir / ".resched"
    env = os.environ if environ is None else environ
    identity = env.get(RUN_ID_ENV) or json.dumps(list(command))
    key = hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    program = Path(command[0]).name if command else "run"
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", env.get(RUN_ID_ENV) or program)[:40].strip("._")
    return Path.cwd() / ".resched" / "wrap" / f"{name or 'run'}-{key}"


@dataclass
class StateClaim:
    """The state dir this wrapper writes to (maybe a private fallback) and its lock."""

    path: Path
    lock_fd: int | None
    fallback_from: Path | None = None

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing drops the flock
            self.lock_fd = None


def claim_state_dir(state_dir: Path, node: str, warn: Callable[[str], None]) -> StateClaim:
    """Lock ``state_dir`` for ``node``; fall back to a private copy when it is read-only.

    Raises :class:`StateDirBusy` when another live wrapper of this node holds it.
    """
    try:
        return StateClaim(state_dir, _lock(state_dir, node))
    except OSError as error:
        if error.errno not in _UNWRITABLE:
            raise _clear(error, state_dir) from None
        problem = error.strerror or str(error)
    private = Path(tempfile.mkdtemp(prefix="resched-state-"))
    copied = _copy_history(state_dir, private)
    warn(f"warning: state dir {state_dir} cannot be written ({problem}); "
         f"this run's records go to {private}"
         + (" (starting from a copy of its history)" if copied else ""))
    return StateClaim(private, _lock(private, node), fallback_from=state_dir)


def _lock(state_dir: Path, node: str) -> int:
    safe_node = re.sub(r"[^A-Za-z0-9_.-]+", "_", node)[:100] or "node"
    path = state_dir / f"wrap.{safe_node}.lock"
    # A probe first: on a read-only mount opening an existing lock file O_RDWR fails with
    # EROFS, but a lock file we may open and no directory we may write to is no better.
    probe = tempfile.NamedTemporaryFile(dir=state_dir, prefix=".resched-probe-", delete=True)
    probe.close()
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateDirBusy(
            f"another resched wrap on node {node} is using this state directory",
            where=str(state_dir),
            fix="give each concurrent run its own --state-dir (or a distinct --node), or "
                "wait for the other one to end") from None
    except OSError:
        os.close(fd)
        raise
    return fd


def _clear(error: OSError, state_dir: Path) -> ReschedError:
    return ReschedError(f"cannot use the state directory: {error.strerror or error}",
                        where=str(state_dir),
                        fix="choose a writable directory with --state-dir")


def _copy_history(source: Path, target: Path) -> bool:
    history = source / "history.json"
    try:
        shutil.copyfile(history, target / "history.json", follow_symlinks=False)
    except OSError:
        return False
    return True
