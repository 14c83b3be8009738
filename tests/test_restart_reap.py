"""Event-driven reaping between attempts: the sweep wakes on exits, never on a timer.

Real processes (bash, python, setsid, a stubborn grandchild); the round counter of
``wait_group_gone`` shows whether the wait was woken by exits (a few rounds) or spun
on a tick (dozens), without any timing assertion.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.supervise_fixtures import PYTHON, assert_group_gone, pid_alive, wait_for_file
from wrapper import exitwatch
from wrapper.exitwatch import ExitWatch, open_pidfd, wait_readable
from wrapper.procgroup import (
    become_subreaper,
    forget_group,
    group_members,
    start_time,
    wait_group_gone,
)

pytestmark = pytest.mark.skipif(not exitwatch.pidfd_available(), reason="needs pidfd_open")

# The leftover exits this long after the wait starts: a 10 ms tick would count ~30
# rounds in that time, an exit-driven wait counts 2 (the first census, the last).
_LINGER_S = 0.3


def _orphan_tree(tmp_path: Path, *, ignore_term: bool) -> subprocess.Popen[bytes]:
    """A launcher whose child moves to a session of its own (like torchrun's ranks) and
    lingers after SIGTERM (saving a checkpoint, say), then the launcher exits."""
    trap = 'trap "" TERM; ' if ignore_term else ""
    program = (
        f"setsid bash -c '{trap}echo $$ > {tmp_path}/rank.pid; "
        f"while [ ! -e {tmp_path}/go ]; do sleep 0.01; done; "
        f"{PYTHON} -c \"import time; time.sleep({_LINGER_S})\"' &\n"
        f"while [ ! -e {tmp_path}/censused ]; do sleep 0.01; done\n"
    )
    become_subreaper()
    proc = subprocess.Popen(["bash", "-c", program], start_new_session=True)
    wait_for_file(tmp_path / "rank.pid")
    group_members(proc.pid)  # the census that remembers the rank before its parent dies
    (tmp_path / "censused").touch()
    assert proc.wait(timeout=30) == 0
    return proc


def test_the_sweep_wakes_when_the_last_member_exits_not_on_a_tick(tmp_path: Path) -> None:
    proc = _orphan_tree(tmp_path, ignore_term=True)
    rank = int((tmp_path / "rank.pid").read_text())
    assert [pid for pid, _, _ in group_members(proc.pid)], "the rank should still be a member"
    rounds: list[int] = []

    def each_round() -> None:
        rounds.append(1)
        (tmp_path / "go").touch()

    assert wait_group_gone(proc.pid, 60.0, each_round=each_round)
    assert not pid_alive(rank)
    assert_group_gone(proc.pid)
    # rank -> python child: the round after the rank's exit (bash execs nothing, so a
    # second member, its python, also has to go) may add one; a tick would add dozens.
    assert len(rounds) <= 4, f"{len(rounds)} rounds: the wait spun instead of sleeping"
    forget_group(proc.pid)


def test_without_pidfd_the_sweep_falls_back_to_polling_and_still_reaps_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(exitwatch, "_NO_PIDFD", True)
    proc = _orphan_tree(tmp_path, ignore_term=False)
    rank = int((tmp_path / "rank.pid").read_text())
    rounds: list[int] = []

    def each_round() -> None:
        rounds.append(1)
        (tmp_path / "go").touch()

    assert wait_group_gone(proc.pid, 60.0, each_round=each_round)
    assert not pid_alive(rank)
    assert_group_gone(proc.pid)
    assert len(rounds) > 4  # it really did poll: this is the path the other test avoids
    forget_group(proc.pid)


def test_a_timeout_reports_members_still_alive_and_sigkill_then_empties_the_task(
    tmp_path: Path,
) -> None:
    proc = _orphan_tree(tmp_path, ignore_term=True)
    rank = int((tmp_path / "rank.pid").read_text())
    os.kill(rank, signal.SIGTERM)  # ignored: still there after a short wait
    assert not wait_group_gone(proc.pid, 0.2)
    assert pid_alive(rank)
    assert wait_group_gone(proc.pid, 30.0, each_round=lambda: _kill_all(proc.pid))
    assert not pid_alive(rank)
    assert_group_gone(proc.pid)
    forget_group(proc.pid)


def _kill_all(pgid: int) -> None:
    for pid, state, _ in group_members(pgid):
        if state != "Z":
            # a member listed a moment ago may have ended since (what the wait is for):
            # seen once in CI as ProcessLookupError; procgroup's own kill ignores it too
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_pidfd_wakes_on_the_exit_of_a_process_that_is_not_our_child() -> None:
    """A rank re-parented to its launcher's parent is still watched by its pidfd."""
    outer = subprocess.Popen(
        [PYTHON, "-c", ("import subprocess, sys; p = subprocess.Popen(['sleep', '600']);"
                        "print(p.pid, flush=True); sys.stdin.read(); p.kill(); p.wait()")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert outer.stdout is not None and outer.stdin is not None
    grandchild = int(outer.stdout.readline())
    fd = open_pidfd(grandchild)
    assert fd is not None
    try:
        assert not wait_readable([fd], 0.0)  # alive: not readable
        outer.stdin.close()  # the outer process kills and reaps its sleep
        assert wait_readable([fd], 60.0)
    finally:
        os.close(fd)
        outer.wait(timeout=30)


def test_a_pid_whose_start_time_differs_is_not_watched() -> None:
    """The census saw (pid, start); if that pid was reaped and reused before the pidfd
    was opened, the fd names another process: it must be dropped, not waited on."""
    me = os.getpid()
    mine = start_time(me)
    assert mine is not None
    with ExitWatch(start_time) as watch:
        assert watch.track([(me, mine + 1)]) == 0
        assert watch.track([(me, mine)]) == 1
        assert watch.track([]) == 0  # no longer listed: its fd is closed


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_supervisor_sweep_keeps_the_grace_and_wakes_on_the_leftovers_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfd: bool,
) -> None:
    """A leftover that saves for a while on SIGTERM gets to finish (grace kept), and the
    sweep notices its exit without polling: few censuses, however long the save."""
    from tests.supervise_fixtures import child_env
    from wrapper import procgroup
    from wrapper.hang import HangSettings
    from wrapper.supervise import SignalRelay, SuperviseOptions, Supervisor

    saver = (
        "import signal, sys, time\n"
        "def save(signum, frame):\n"
        f"    time.sleep({_LINGER_S}); open({str(tmp_path / 'saved')!r}, 'w').write('ok')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        f"open({str(tmp_path / 'saver.pid')!r}, 'w').write(str(__import__('os').getpid()))\n"
        "time.sleep(600)\n"
    )
    (tmp_path / "saver.py").write_text(saver)
    program = (f"{PYTHON} {tmp_path / 'saver.py'} &\n"
               f"while [ ! -s {tmp_path}/saver.pid ]; do sleep 0.01; done\nexit 0\n")
    censuses: list[int] = []
    real = procgroup.group_members

    def counting(pgid: int) -> list[tuple[int, str, int]]:
        censuses.append(pgid)
        return real(pgid)

    monkeypatch.setattr(procgroup, "group_members", counting)
    monkeypatch.setattr(exitwatch, "_NO_PIDFD", not pidfd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        run = Supervisor(
            ["bash", "-c", program], env=child_env(), feed_text=lambda text, stream: None,
            relay=SignalRelay(),
            options=SuperviseOptions(grace_s=60.0, poll_s=0.02, hang=HangSettings(),
                                     stdout_fd=devnull, stderr_fd=devnull),
        ).run()
    finally:
        os.close(devnull)
    saver_pid = int((tmp_path / "saver.pid").read_text())
    assert run.exit_code == 0 and run.leftover_processes_killed == 1
    assert (tmp_path / "saved").read_text() == "ok"  # SIGTERM, then its grace: it saved
    assert not pid_alive(saver_pid)
    assert run.exit_seen_at is not None and run.sweep_s is not None
    # stop_group's two signals take a census each; the wait takes one per wake. Polling
    # (the fallback without pidfd, 10 ms ticks) takes one per tick over the save.
    if pidfd:
        assert len(censuses) <= 8, f"{len(censuses)} censuses during the sweep"
    else:
        assert len(censuses) > 8, f"only {len(censuses)} censuses: did the fallback poll?"
