"""Supervision with real processes: exits, signals, hangs, process groups, byte-exact output."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from tests.supervise_fixtures import (
    PYTHON,
    assert_group_gone,
    child_env,
    pid_alive,
    wait_for_file,
    write_script,
)
from wrapper.hang import HangSettings
from wrapper.supervise import SignalRelay, SupervisedRun, SuperviseOptions, Supervisor


class Collected:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def __call__(self, text: str, stream: str) -> None:
        assert text.endswith("\n")  # whole lines only, each ended by a newline
        self.lines.extend((stream, line) for line in text.split("\n")[:-1])


def supervise(
    argv: list[str], tmp_path: Path, *, grace_s: float = 5.0, hang_grace_s: float = 5.0,
    hang: HangSettings | None = None,
    relay: SignalRelay | None = None, heartbeat: bool = False, env: dict[str, str] | None = None,
) -> tuple[SupervisedRun, Collected, Supervisor]:
    collected = Collected()
    heartbeat_file = tmp_path / "heartbeat" if heartbeat else None
    environment = env or child_env()
    if heartbeat_file is not None:
        heartbeat_file.write_bytes(b"")
        environment = {**environment, "RESCHED_HEARTBEAT_FILE": str(heartbeat_file),
                       "RESCHED_HEARTBEAT_MIN_INTERVAL": "0"}
    out = open(tmp_path / "out.bin", "wb")  # noqa: SIM115 - closed below
    err = open(tmp_path / "err.bin", "wb")  # noqa: SIM115
    try:
        supervisor = Supervisor(
            argv, env=environment, feed_text=collected, relay=relay or SignalRelay(),
            options=SuperviseOptions(grace_s=grace_s, hang_grace_s=hang_grace_s,
                                     hang=hang or HangSettings(),
                                     heartbeat_file=heartbeat_file, poll_s=0.02,
                                     stdout_fd=out.fileno(), stderr_fd=err.fileno()),
        )
        run = supervisor.run()
    finally:
        out.close()
        err.close()
    return run, collected, supervisor


@pytest.mark.parametrize("code", [0, 1, 3, 16, 255])
def test_exit_code_is_reported(tmp_path: Path, code: int) -> None:
    run, _, _ = supervise(["sh", "-c", f"exit {code}"], tmp_path)
    assert (run.exit_code, run.signal, run.hung, run.launch_error) == (code, None, False, None)


def test_death_by_signal_is_reported_as_signal(tmp_path: Path) -> None:
    run, _, _ = supervise(["sh", "-c", "kill -SEGV $$"], tmp_path)
    assert run.exit_code is None
    assert run.signal == signal.SIGSEGV


def test_command_not_found_is_127_with_a_clear_message(tmp_path: Path) -> None:
    run, _, _ = supervise(["resched-no-such-command-xyz", "--flag"], tmp_path)
    assert run.exit_code == 127
    assert run.launch_error == "command not found: resched-no-such-command-xyz"


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    script.chmod(0o644)
    run, _, _ = supervise([str(script)], tmp_path)
    assert run.exit_code == 126
    assert run.launch_error is not None and "cannot execute" in run.launch_error


def test_binary_output_passes_through_byte_exactly(tmp_path: Path) -> None:
    blob = bytes(range(256)) * 2000 + b"\xff\xfe invalid utf-8 \xc3\x28 \r\n\x00no newline at end"
    (tmp_path / "blob.bin").write_bytes(blob)
    program = (
        "import sys\n"
        f"data = open({str(tmp_path / 'blob.bin')!r}, 'rb').read()\n"
        "for i in range(0, len(data), 777):\n"
        "    sys.stdout.buffer.write(data[i:i + 777]); sys.stdout.buffer.flush()\n"
        "    sys.stderr.buffer.write(data[i:i + 333]); sys.stderr.buffer.flush()\n"
    )
    run, _collected, _ = supervise([PYTHON, "-c", program], tmp_path)
    assert run.exit_code == 0
    assert (tmp_path / "out.bin").read_bytes() == blob
    expected_err = b"".join(blob[i:i + 333] for i in range(0, len(blob), 777))
    assert (tmp_path / "err.bin").read_bytes() == expected_err
    assert run.stdout_tail[-1] == "\x00no newline at end"  # the last partial line is scanned


def test_every_line_is_scanned_in_order_per_stream(tmp_path: Path) -> None:
    program = (
        "import sys\n"
        "for i in range(2000):\n"
        "    print(f'out {i}')\n"
        "    print(f'err {i}', file=sys.stderr)\n"
        "print('x' * 200000)\n"  # one very long line: scanned by its prefix, still one line
        "print('after')\n"
    )
    run, collected, _ = supervise([PYTHON, "-c", program], tmp_path)
    assert run.exit_code == 0
    out = [line for stream, line in collected.lines if stream == "stdout"]
    err = [line for stream, line in collected.lines if stream == "stderr"]
    assert out[:2000] == [f"out {i}" for i in range(2000)]
    assert err == [f"err {i}" for i in range(2000)]
    assert len(out) == 2002 and out[-1] == "after" and set(out[2000]) == {"x"}
    assert len(run.stdout_tail) == 200 and run.stdout_tail[-1] == "after"


def test_hang_with_heartbeats_then_silence_is_detected(tmp_path: Path) -> None:
    # Heartbeats for a while, then the loop stops stepping while a thread keeps logging:
    # once heartbeats were seen, output alone is not progress.
    program = (
        "import threading, time\n"
        "from wrapper import heartbeat\n"
        "def chatter():\n"
        "    while True:\n"
        "        print('watchdog: still alive', flush=True); time.sleep(0.1)\n"
        "threading.Thread(target=chatter, daemon=True).start()\n"
        "for step in range(30):\n"
        "    heartbeat(); time.sleep(0.05)\n"
        "time.sleep(600)\n"
    )
    run, _, supervisor = supervise([PYTHON, "-c", program], tmp_path, grace_s=2.0,
                                   hang=HangSettings(fixed_s=1.0), heartbeat=True)
    assert run.hung is True
    assert run.signal == signal.SIGTERM
    assert supervisor.hang_detector is not None and supervisor.hang_detector.heartbeat_seen


def test_regular_heartbeats_are_not_a_hang(tmp_path: Path) -> None:
    program = (
        "import time\nfrom wrapper import heartbeat\n"
        "for step in range(30):\n    heartbeat(); time.sleep(0.1)\n"  # 3 s > the timeout
    )
    run, _, _ = supervise([PYTHON, "-c", program], tmp_path,
                          hang=HangSettings(fixed_s=2.0), heartbeat=True)
    assert (run.exit_code, run.hung) == (0, False)


def test_output_only_progress_hang_is_detected(tmp_path: Path) -> None:
    program = "for i in 1 2 3 4 5; do echo step $i; sleep 0.2; done; sleep 600"
    run, collected, _ = supervise(["bash", "-c", program], tmp_path, grace_s=2.0,
                                  hang=HangSettings(fixed_s=1.0))
    assert run.hung is True
    assert [line for _, line in collected.lines] == [f"step {i}" for i in range(1, 6)]


def test_output_only_progress_keeps_a_slow_but_steady_command_alive(tmp_path: Path) -> None:
    program = "for i in $(seq 8); do echo step $i; sleep 0.5; done"  # total > the timeout
    run, _, _ = supervise(["bash", "-c", program], tmp_path, hang=HangSettings(fixed_s=3.0))
    assert (run.exit_code, run.hung) == (0, False)


def _spawn_stubborn_grandchild(tmp_path: Path) -> Path:
    # "grandchild up" on stdout once its pid is written: the first output, so a hang
    # clock of the tests below starts only then (a short start-up allowance once ran out
    # on a loaded machine before bash had started it: no pid file, a vacuous test)
    return write_script(tmp_path / "parent.sh", (
        "#!/bin/bash\n"
        f"bash -c 'trap \"\" TERM; echo $$ > {tmp_path}/grandchild.pid; echo grandchild up; "
        f"while true; do echo x >> {tmp_path}/alive; sleep 0.1; done' &\n"
        "wait\n"
    ))


def test_a_rank_in_a_session_of_its_own_is_killed_when_its_launcher_exits(
    tmp_path: Path,
) -> None:
    """torchrun starts its ranks in new sessions: a group kill misses them, and when the
    launcher dies they would run on, holding the GPUs. The wrapper tracks the tree."""
    script = write_script(tmp_path / "launcher.sh", (
        "#!/bin/bash\n"
        f"setsid bash -c 'trap \"\" TERM; echo $$ > {tmp_path}/rank.pid; "
        "while true; do sleep 0.1; done' &\n"
        f"while [ ! -s {tmp_path}/rank.pid ]; do sleep 0.05; done\n"
        "sleep 1.5\n"  # the wrapper's census sees the rank before the launcher dies
        "exit 1\n"
    ))
    run, _, _ = supervise([str(script)], tmp_path, grace_s=0.5)
    rank = int(wait_for_file(tmp_path / "rank.pid"))
    assert os.getsid(os.getpid()) != rank  # the rank really was in a session of its own
    assert run.exit_code == 1
    assert run.leftover_processes_killed >= 1
    assert not pid_alive(rank)


def test_hang_kill_reaches_a_grandchild_that_ignores_sigterm(tmp_path: Path) -> None:
    script = _spawn_stubborn_grandchild(tmp_path)
    run, _, _ = supervise([str(script)], tmp_path, grace_s=0.5,
                          hang=HangSettings(fixed_s=0.5, startup_s=30.0))
    grandchild = int(wait_for_file(tmp_path / "grandchild.pid"))
    assert run.hung
    assert not pid_alive(grandchild)


@pytest.mark.timeout(60)
def test_a_hung_group_gets_the_short_hang_grace_not_the_preemption_grace(
    tmp_path: Path,
) -> None:
    """A hung rank cannot checkpoint: waiting the 1-hour preemption grace would only
    burn the allocation. The pytest timeout fails the test if the long grace is used."""
    script = _spawn_stubborn_grandchild(tmp_path)
    run, _, _ = supervise([str(script)], tmp_path, grace_s=3600.0, hang_grace_s=0.5,
                          hang=HangSettings(fixed_s=0.5, startup_s=30.0))
    grandchild = int(wait_for_file(tmp_path / "grandchild.pid"))
    assert run.hung
    assert not pid_alive(grandchild)


def test_stop_signal_is_forwarded_then_group_killed_after_grace(tmp_path: Path) -> None:
    script = _spawn_stubborn_grandchild(tmp_path)
    relay = SignalRelay()
    relay.install()
    try:
        alive_at_sigterm: list[int] = []

        def preempt() -> None:
            wait_for_file(tmp_path / "grandchild.pid")
            wait_for_file(tmp_path / "alive")
            alive_at_sigterm.append(len((tmp_path / "alive").read_text().split()))
            os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=preempt, daemon=True).start()
        run, _, _supervisor = supervise([str(script)], tmp_path, grace_s=1.0, relay=relay)
    finally:
        relay.uninstall()
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert run.stop_signal == "SIGTERM"
    assert run.signal == signal.SIGTERM  # the bash parent honoured the forwarded SIGTERM
    assert not pid_alive(grandchild)  # ignored it: killed after the grace period ...
    beats_after_sigterm = len((tmp_path / "alive").read_text().split()) - alive_at_sigterm[0]
    assert beats_after_sigterm > 1  # ... which it lived through (it kept writing)


def test_stop_signal_lets_a_cooperative_child_finish_within_grace(tmp_path: Path) -> None:
    program = (
        "import signal, sys, time\n"
        "def on_term(signum, frame):\n"
        "    print('saving checkpoint', flush=True); time.sleep(0.3); sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, on_term)\n"
        f"open({str(tmp_path / 'ready')!r}, 'w').write('ready')\n"
        "time.sleep(600)\n"
    )
    relay = SignalRelay(signal.SIGUSR1)  # a Lightning training: --stop-signal USR1
    relay.install()
    try:
        def stop_once_ready() -> None:
            wait_for_file(tmp_path / "ready")
            os.kill(os.getpid(), signal.SIGUSR1)

        threading.Thread(target=stop_once_ready, daemon=True).start()
        run, collected, _ = supervise([PYTHON, "-c", program], tmp_path, grace_s=10.0,
                                      relay=relay)
    finally:
        relay.uninstall()
    assert (run.exit_code, run.stop_signal) == (0, "SIGUSR1")
    assert ("stdout", "saving checkpoint") in collected.lines


def test_grandchild_outliving_its_parent_is_swept(tmp_path: Path) -> None:
    program = (
        f"(trap '' TERM; echo $BASHPID > {tmp_path}/orphan.pid; exec sleep 600) "
        "> /dev/null 2>&1 &\n"
        f"while [ ! -s {tmp_path}/orphan.pid ]; do sleep 0.02; done\nexit 0\n"
    )
    run, _, _ = supervise(["bash", "-c", program], tmp_path, grace_s=0.5)
    orphan = int((tmp_path / "orphan.pid").read_text())
    assert run.exit_code == 0
    assert run.leftover_processes_killed >= 1
    assert not pid_alive(orphan)


def test_no_process_of_the_group_survives_any_path(tmp_path: Path) -> None:
    script = _spawn_stubborn_grandchild(tmp_path)
    pgids: list[int] = []

    class Recording(Supervisor):
        def _start_pumps(self, proc):  # type: ignore[no-untyped-def]
            pgids.append(proc.pid)
            return super()._start_pumps(proc)

    supervisor = Recording(
        [str(script)], env=child_env(), feed_text=Collected(), relay=SignalRelay(),
        options=SuperviseOptions(grace_s=0.3, poll_s=0.02,
                                 hang=HangSettings(fixed_s=0.5, startup_s=0.5),
                                 stdout_fd=os.open(os.devnull, os.O_WRONLY),
                                 stderr_fd=os.open(os.devnull, os.O_WRONLY)),
    )
    run = supervisor.run()
    assert run.hung
    assert_group_gone(pgids[0])


def test_an_output_burst_is_forwarded_whole_and_its_end_is_scanned(tmp_path: Path) -> None:
    # 40 MB as fast as Python can write, then the line that explains the failure.
    program = (
        "import sys\n"
        "block = b''.join(b'noise line %d of a flood\\n' % i for i in range(40000))\n"
        "for _ in range(40):\n    sys.stdout.buffer.write(block)\n"
        "sys.stdout.buffer.write(b'RuntimeError: the root cause\\n')\n"
    )
    slow_scan: list[tuple[str, str]] = []

    def slow_collect(text: str, stream: str) -> None:
        if text.strip("\n"):
            import time

            time.sleep(len(text) / 20e6)  # a scanner of 20 MB/s
        slow_scan.extend((stream, line) for line in text.split("\n")[:-1])

    out_fd = os.open(tmp_path / "out", os.O_WRONLY | os.O_CREAT)
    try:
        run = Supervisor(
            [PYTHON, "-c", program], env=child_env(), feed_text=slow_collect, relay=SignalRelay(),
            options=SuperviseOptions(stdout_fd=out_fd),
        ).run()
    finally:
        os.close(out_fd)
    expected_lines = 40 * 40000 + 1
    block = b"".join(b"noise line %d of a flood\n" % i for i in range(40000))
    assert run.exit_code == 0
    assert (tmp_path / "out").read_bytes() == block * 40 + b"RuntimeError: the root cause\n"
    assert len(slow_scan) == expected_lines  # every line counted, in order
    assert slow_scan[-1] == ("stdout", "RuntimeError: the root cause")
    assert run.stdout_tail[-1] == "RuntimeError: the root cause"
    scanned = sum(1 for _, line in slow_scan if line)
    assert scanned + run.unscanned_lines == expected_lines


def test_an_exception_in_the_watch_loop_still_kills_the_group(tmp_path: Path) -> None:
    script = _spawn_stubborn_grandchild(tmp_path)

    def broken_hang_report(silent: float, timeout: float) -> None:
        raise RuntimeError("a bug in the wrapper")

    supervisor = Supervisor(
        [str(script)], env=child_env(), feed_text=Collected(), relay=SignalRelay(),
        options=SuperviseOptions(grace_s=0.3, poll_s=0.02,
                                 hang=HangSettings(fixed_s=0.3, startup_s=0.3),
                                 stdout_fd=os.open(os.devnull, os.O_WRONLY),
                                 stderr_fd=os.open(os.devnull, os.O_WRONLY)),
        on_hang=broken_hang_report,
    )
    with pytest.raises(RuntimeError, match="a bug in the wrapper"):
        supervisor.run()
    grandchild = int(wait_for_file(tmp_path / "grandchild.pid"))
    assert not pid_alive(grandchild)


@pytest.mark.parametrize("flood_mb", [0, 40])
def test_real_scanner_line_numbers_survive_blank_lines_partial_writes_and_bursts(
    tmp_path: Path, flood_mb: int
) -> None:
    from wrapper.classifier.rules import load_rules
    from wrapper.classifier.scanner import LineScanner

    # Blank lines, a line split across writes, CRLF, an optional flood, then the root cause.
    program = (
        "import sys, time\nout = sys.stdout.buffer\n"
        "out.write(b'first\\n\\n\\nsecond\\r\\n'); out.flush(); time.sleep(0.05)\n"
        "out.write(b'half of a '); out.flush(); time.sleep(0.05)\n"
        "out.write(b'line\\n\\n'); out.flush()\n"
        "block = b'noise\\n' * 100000\n"
        f"for _ in range({flood_mb} * 10 // 6):\n    out.write(block)\n"
        "out.write(b'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\\n')\n"
        "out.write(b'after\\n')\n"
    )
    expected_lineno = 6 + (flood_mb * 10 // 6) * 100000 + 1
    scanner = LineScanner(load_rules())
    out_fd = os.open(os.devnull, os.O_WRONLY)
    try:
        run = Supervisor([PYTHON, "-c", program], env=child_env(), relay=SignalRelay(),
                         feed_text=scanner.feed_text,
                         options=SuperviseOptions(stdout_fd=out_fd)).run()
    finally:
        os.close(out_fd)
    assert run.exit_code == 0
    (hit,) = [h for h in scanner.hits if h.rule_id == "cuda-oom"]
    assert (hit.stream, hit.lineno) == ("stdout", expected_lineno)
    assert scanner.lines_seen("stdout") == expected_lineno + 1
    assert run.stdout_tail[-2:] == (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB", "after")
    if not flood_mb:
        assert run.stdout_tail[:6] == ("first", "", "", "second", "half of a line", "")


def test_a_stopped_command_is_continued_so_it_can_handle_sigterm(tmp_path: Path) -> None:
    script = write_script(tmp_path / "stopped.sh", (
        "#!/bin/bash\n"
        f"trap 'echo graceful > {tmp_path}/graceful; exit 0' TERM\n"
        "echo working\nkill -STOP $$\nsleep 600\n"
    ))
    run, _, _ = supervise([str(script)], tmp_path, grace_s=5.0,
                          hang=HangSettings(fixed_s=0.5, startup_s=30.0))
    assert run.hung
    assert (tmp_path / "graceful").read_text() == "graceful\n"
    assert run.exit_code == 0  # it shut down by itself, no SIGKILL needed
