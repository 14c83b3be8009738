"""Test harness, not part of any training: a fault at a precise point of an UNMODIFIED
training, armed only when this folder is on PYTHONPATH and FAULT_SPEC is set.

FAULT_SPEC="<action>:<trigger>:<regex>" fires once (FAULT_ONCE names a flag file that
remembers it across restarts) in the process whose script ends with FAULT_SCRIPT (and,
under torchrun, whose RANK equals FAULT_RANK when set):

- trigger ``open`` (or any audit event, e.g. ``os.symlink``): the training is about to
  open a path matching the regex (Python's audit events; torch.save and the frameworks'
  own writers go through ``open``). The fault lands inside a save, before that file is
  written: a deterministic torn save. FAULT_COUNT=N: the N-th match fires.
- trigger ``line``: the training writes a line matching the regex to stdout / stderr (its
  framework's own log line), from within that write.
- action ``kill``: SIGKILL this process. ``term``: SIGTERM to the wrapper (the process
  FAULT_TERM_UP levels up, default 1), as an orchestrator stopping the pod would, then
  wait for the stop to arrive (a stop during a save when the trigger is inside one).
  ``podkill``: SIGKILL to the wrapper (FAULT_TERM_UP levels up), then to this process:
  the pod dies with the save half written and nothing gets to clean up (the executor
  ends what is left of the task, as a node that dies takes its processes with it).
- FAULT_DELAY=S: the process stops S seconds where the trigger hit before the action, so
  that the other ranks run on into what they write next (DeepSpeed's rank 0 writes its
  files and ``latest`` without waiting for the others: a rank that dies inside its save
  leaves ``latest`` naming the torn tag).
"""

import os
import re
import signal
import sys
import time

_SPEC = os.environ.get("FAULT_SPEC", "")


def _armed() -> bool:
    once = os.environ.get("FAULT_ONCE", "")
    if not _SPEC or not once or os.path.exists(once):
        return False
    if not sys.argv or not sys.argv[0].endswith(os.environ.get("FAULT_SCRIPT", "\0")):
        return False
    rank = os.environ.get("FAULT_RANK")
    return rank is None or os.environ.get("RANK", "0") == rank


def _ancestor(levels: int) -> int:
    pid = os.getpid()
    for _ in range(levels):
        with open(f"/proc/{pid}/stat", "rb") as stat:
            pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
    return pid


_FIRED = False


def _fire() -> None:
    global _FIRED
    if _FIRED or not _armed():
        return
    _FIRED = True
    fd = os.open(os.environ["FAULT_ONCE"], os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    action = _SPEC.split(":", 1)[0]
    time.sleep(float(os.environ.get("FAULT_DELAY", "0")))
    if action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    target = _ancestor(int(os.environ.get("FAULT_TERM_UP", "1")))
    if action == "podkill":
        os.kill(target, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
    os.kill(target, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the relayed stop ends this process
        time.sleep(0.05)


_SEEN = 0


def _match(text: str) -> None:
    """The FAULT_COUNT-th match fires (default: the first)."""
    global _SEEN
    if _FIRED or not _REGEX.search(text):
        return
    _SEEN += 1
    if _SEEN >= int(os.environ.get("FAULT_COUNT", "1")):
        _fire()


if _SPEC and _armed():
    _action, _trigger, _pattern = _SPEC.split(":", 2)
    _REGEX = re.compile(_pattern)
    if _trigger == "line":
        class _Tap:
            def __init__(self, stream):
                self._stream = stream

            def write(self, text):
                written = self._stream.write(text)
                if not _FIRED and _REGEX.search(text):
                    self._stream.flush()
                    _match(text)
                return written

            def __getattr__(self, name):
                return getattr(self._stream, name)

        sys.stdout, sys.stderr = _Tap(sys.stdout), _Tap(sys.stderr)
    else:
        def _hook(event: str, args: tuple) -> None:
            if event == _trigger and not _FIRED:
                _match(" ".join(os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a)
                                for a in args))

        sys.addaudithook(_hook)
