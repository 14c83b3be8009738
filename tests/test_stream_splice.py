"""Zero-copy forwarding of output bursts (issue 14 item 1): splice + tee, and its fallback.

Real processes: plain producers with no resched import write through a Supervisor whose
feed is the wrapper's own (the real rule scanner); the output goes to a pipe read by a
thread, to a file, or to a pipe nobody reads. Output is compared by hash, the failure
after the burst must still be classified, its position must be honest (a line number
counted from an exact byte offset, checked against the bytes themselves), and the
read/write fallback must give the same bytes. Unit tests cover the ctypes tee wrapper.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import pty
import re
import threading
from pathlib import Path

import pytest

from tests.supervise_fixtures import PYTHON, child_env
from wrapper.attempt import _ScanFeed
from wrapper.classifier.classify import EvidenceLine
from wrapper.hang import HangSettings
from wrapper.classifier.rules import load_rules
from wrapper.classifier.scanner import LineScanner
from wrapper.splice_tap import SpliceTap
from wrapper.supervise import SignalRelay, SupervisedRun, SuperviseOptions, Supervisor
from wrapper.zerocopy import SPLICE_F_NONBLOCK, may_splice_into, tee, zero_copy_available

needs_splice = pytest.mark.skipif(not zero_copy_available({}), reason="Linux splice/tee only")

# A real failure line, from https://github.com/carolchenyx/MGFN./issues/35 (the corpus).
FIXTURE = Path(__file__).parent / "fixtures/corpus/logs/carolchenyx-mgfn-35-cuda-oom.log"
OOM = FIXTURE.read_bytes().rstrip(b"\n") + b"\n"
TRACEBACK = (b"Traceback (most recent call last):\n"
             b'  File "train.py", line 88, in <module>\n'
             b"    loss.backward()\n" + OOM)

# ~1 MB of numbered log lines per block, written `blocks` times as fast as Python can,
# then the traceback; exit 1. No resched import: a plain training-like script.
PRODUCER = """
import sys
out = sys.stdout.buffer
block = b"".join(b"iteration %07d | lm loss 2.345 | grad norm 0.87\\n" % i for i in range(20000))
for _ in range(int(sys.argv[1])):
    out.write(block)
out.write(open(sys.argv[2], "rb").read())
out.flush()
sys.exit(1)
"""


def expected_output(blocks: int) -> bytes:
    block = b"".join(b"iteration %07d | lm loss 2.345 | grad norm 0.87\n" % i
                     for i in range(20000))
    return block * blocks + TRACEBACK


def _producer(tmp_path: Path, blocks: int) -> list[str]:
    script, tail = tmp_path / "producer.py", tmp_path / "traceback.log"
    script.write_text(PRODUCER)
    tail.write_bytes(TRACEBACK)
    return [PYTHON, str(script), str(blocks), str(tail)]


def _supervise(argv: list[str], stdout_fd: int, *, env: dict[str, str] | None = None,
               hang: HangSettings | None = None) -> tuple[SupervisedRun, _ScanFeed]:
    feed = _ScanFeed(LineScanner(load_rules()))
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        run = Supervisor(argv, env=env or child_env(), feed_text=feed, relay=SignalRelay(),
                         options=SuperviseOptions(stdout_fd=stdout_fd, stderr_fd=devnull,
                                                  poll_s=0.02, hang=hang or HangSettings()),
                         ).run()
    finally:
        os.close(devnull)
    return run, feed


class PipeReader:
    """A pipe whose read end a thread hashes to EOF (what `| tee log` would see)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.digest = hashlib.sha256()
        self.size = 0
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while chunk := os.read(self.read_fd, 1 << 16):
            self.digest.update(chunk)
            self.size += len(chunk)

    def finish(self) -> str:
        os.close(self.write_fd)
        self._thread.join(timeout=60)
        os.close(self.read_fd)
        return self.digest.hexdigest()


def _oom_hit(feed: _ScanFeed):  # type: ignore[no-untyped-def]
    hits = [hit for hit in feed.scanner.hits if hit.rule_id == "cuda-oom"]
    assert hits, [hit.rule_id for hit in feed.scanner.hits]
    return hits[-1]


def _assert_position_is_honest(hit, output: bytes) -> None:  # type: ignore[no-untyped-def]
    """The hit's line, counted from its byte offset in the real output, is the OOM line."""
    if hit.after_byte is None:  # exact: counted from the stream's start
        line = output.split(b"\n")[hit.lineno - 1]
    else:
        assert hit.after_byte == 0 or output[hit.after_byte - 1:hit.after_byte] == b"\n"
        line = output[hit.after_byte:].split(b"\n")[hit.lineno - 1]
    assert line + b"\n" == OOM


@needs_splice
@pytest.mark.e2e
def test_a_burst_into_a_pipe_is_byte_exact_and_its_traceback_still_classified(
        tmp_path: Path) -> None:
    blocks = 100  # ~100 MB: well past the side pipe and one 64 MiB sample
    reader = PipeReader()
    run, feed = _supervise(_producer(tmp_path, blocks), reader.write_fd)
    digest = reader.finish()
    output = expected_output(blocks)
    assert (reader.size, digest) == (len(output), hashlib.sha256(output).hexdigest())
    assert run.exit_code == 1
    hit = _oom_hit(feed)
    assert hit.after_byte is not None  # bytes went by unseen before it
    _assert_position_is_honest(hit, output)
    assert run.stdout_tail[-4:] == tuple(TRACEBACK.decode().splitlines())
    # the unseen bytes are counted exactly; their lines are not claimed
    assert 0 < run.unscanned_bytes < len(output) and run.unscanned_lines is None


@needs_splice
@pytest.mark.e2e
def test_a_burst_into_one_file_for_both_streams_is_byte_exact(tmp_path: Path) -> None:
    # `> log 2>&1`: one open file for stdout and stderr, while stderr writes too
    blocks = 64
    out = tmp_path / "out.log"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    argv = ["bash", "-c", 'for i in $(seq 2000); do echo "stderr line $i" >&2; done & '
            '"$@"; status=$?; wait; exit $status', "sh", *_producer(tmp_path, blocks)]
    feed = _ScanFeed(LineScanner(load_rules()))
    try:
        run = Supervisor(argv, env=child_env(), feed_text=feed, relay=SignalRelay(),
                         options=SuperviseOptions(stdout_fd=fd, stderr_fd=fd, poll_s=0.02)).run()
    finally:
        os.close(fd)
    output = expected_output(blocks)
    written = out.read_bytes()
    stderr_lines = b"".join(b"stderr line %d\n" % i for i in range(1, 2001))
    assert len(written) == len(output) + len(stderr_lines)  # nothing overwritten
    # Each stream's bytes are all there, in order. They interleave by chunk, and a
    # stderr chunk (whole echo lines: each is one small atomic write) may land inside a
    # stdout line, so the stderr lines are cut out wherever they are.
    assert re.findall(rb"stderr line (\d+)\n", written) == [b"%d" % i for i in range(1, 2001)]
    stdout_only = re.sub(rb"stderr line \d+\n", b"", written)
    assert hashlib.sha256(stdout_only).hexdigest() == hashlib.sha256(output).hexdigest()
    _assert_position_is_honest(_oom_hit(feed), output)
    assert run.stdout_tail[-1] == OOM.decode().rstrip("\n")


@needs_splice
@pytest.mark.e2e
def test_a_closed_target_keeps_draining_without_sigpipe(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    os.close(read_fd)  # nobody reads our stdout any more
    try:
        run, feed = _supervise(_producer(tmp_path, 40), write_fd)
    finally:
        os.close(write_fd)
    assert (run.exit_code, run.signal) == (1, None)  # its own exit, not SIGPIPE
    _assert_position_is_honest(_oom_hit(feed), expected_output(40))


@pytest.mark.e2e
@pytest.mark.parametrize("how", ["env-switch", "append-file"])
def test_the_fallback_path_is_byte_exact_with_exact_line_numbers(
        tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # RESCHED_NO_SPLICE=1, or a target that takes no spliced pages (O_APPEND: EINVAL).
    blocks = 40
    out = tmp_path / "out.log"
    out.write_bytes(b"kept: written before the run\n")
    fd = os.open(out, os.O_WRONLY | os.O_APPEND)
    if how == "env-switch":
        monkeypatch.setenv("RESCHED_NO_SPLICE", "1")  # read by the pump, in this process
    try:
        run, feed = _supervise(_producer(tmp_path, blocks), fd)
    finally:
        os.close(fd)
    output = expected_output(blocks)
    assert out.read_bytes() == b"kept: written before the run\n" + output
    hit = _oom_hit(feed)
    if how == "env-switch":  # no unseen bytes: line numbers stay exact from the start
        assert hit.after_byte is None and run.unscanned_lines is not None
    _assert_position_is_honest(hit, output)


@needs_splice
@pytest.mark.e2e
def test_a_burst_into_a_terminal_is_byte_exact(tmp_path: Path) -> None:
    # A terminal takes no spliced pages: the tap writes instead, the side pipe still works.
    import tty

    primary, secondary = pty.openpty()
    tty.setraw(secondary)  # no "\n" -> "\r\n": compare bytes as written
    digest, received = hashlib.sha256(), [0]

    def drain() -> None:
        while True:
            try:
                chunk = os.read(primary, 1 << 16)
            except OSError:  # EIO: the secondary side is closed
                return
            if not chunk:
                return
            digest.update(chunk)
            received[0] += len(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    blocks = 20
    try:
        run, feed = _supervise(_producer(tmp_path, blocks), secondary)
    finally:
        os.close(secondary)
    reader.join(timeout=60)
    os.close(primary)
    output = expected_output(blocks)
    assert (received[0], digest.hexdigest()) == (len(output), hashlib.sha256(output).hexdigest())
    _assert_position_is_honest(_oom_hit(feed), output)


@needs_splice
@pytest.mark.e2e
def test_output_without_newlines_counts_as_progress_for_the_hang_detector(
        tmp_path: Path) -> None:
    # A progress bar: bytes every 0.1 s but no newline for 2.5 s; timeout 1 s.
    program = ("import os, time\nfor _ in range(25):\n"
               "    os.write(1, b'#'); time.sleep(0.1)\nos.write(1, b'\\n')\n")
    reader = PipeReader()
    run, _ = _supervise([PYTHON, "-c", program], reader.write_fd,
                        hang=HangSettings(fixed_s=1.0, startup_s=1.0))
    reader.finish()
    assert not run.hung and run.exit_code == 0
    assert reader.size == 26


# --- SpliceTap, unit level (real pipes, no subprocess) -------------------------------


@needs_splice
def test_a_target_that_refuses_splice_at_run_time_falls_back_to_write(tmp_path: Path) -> None:
    source_r, source_w = os.pipe()
    out = tmp_path / "append.log"
    target = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    payload = os.urandom(3 * 1024 * 1024)  # more than the side pipe keeps
    tap = SpliceTap(source_r, target)
    tap.target_splices = True  # as if fstat had said yes: the kernel's EINVAL must decide

    def produce() -> None:
        os.write(source_w, payload)  # blocks until the tap has taken it all
        os.close(source_w)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        assert tap.forward_burst(lambda: None, quiet_s=5.0, sample_every=1 << 40) is True
        assert tap.target_splices is False and tap.moved == len(payload)
        assert out.read_bytes() == payload
        # the side pipe kept the end of it, in order; what it dropped is counted
        held = tap.side_held
        assert held > 0 and tap.discarded + held == len(payload)
        assert b"".join(tap.read_side()) == payload[len(payload) - held:]
        producer.join(timeout=30)
    finally:
        tap.close()
        os.close(source_r)
        os.close(target)


@needs_splice
def test_a_full_pipe_moves_its_bulk_untouched_and_keeps_the_newest_bytes(tmp_path: Path) -> None:
    """A round that finds more waiting than TEE_BYTES moves the older part on without
    tee; the side pipe still ends up holding the burst's newest bytes, in order."""
    from wrapper.splice_tap import TEE_BYTES
    from wrapper.zerocopy import pipe_size

    source_r, source_w = os.pipe()
    capacity = pipe_size(source_w, 1 << 20)
    assert capacity > TEE_BYTES  # else the bulk path cannot be reached here
    out_r, out_w = os.pipe()
    pipe_size(out_w, 1 << 20)
    payload = b"".join(b"line %07d\n" % i for i in range(capacity // 13))[:capacity]
    os.write(source_w, payload)  # the whole pipe at once: one round sees all of it
    os.close(source_w)
    tap = SpliceTap(source_r, out_w)
    received = bytearray()

    def collect() -> None:
        while chunk := os.read(out_r, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    try:
        assert tap.forward_burst(lambda: None, quiet_s=5.0, sample_every=1 << 40) is True
        held = tap.side_held
        assert TEE_BYTES <= held < len(payload)
        assert tap.discarded == 0  # nothing was duplicated only to be dropped again
        assert b"".join(tap.read_side()) == payload[len(payload) - held:]
        os.close(out_w)
        out_w = -1
        reader.join(timeout=30)
        assert bytes(received) == payload and tap.moved == len(payload)
    finally:
        tap.close()
        os.close(source_r)
        if out_w >= 0:
            os.close(out_w)
        os.close(out_r)


# --- tee(2) through ctypes ------------------------------------------------------------


@needs_splice
def test_tee_duplicates_without_consuming_and_reports_end_of_input() -> None:
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    try:
        os.write(a_w, b"hello\n")
        assert tee(a_r, b_w, 1 << 16) == 6
        assert os.read(b_r, 100) == b"hello\n"
        assert os.read(a_r, 100) == b"hello\n"  # still there: tee does not consume
        with pytest.raises(BlockingIOError):  # empty, writer alive, non-blocking
            tee(a_r, b_w, 1 << 16, SPLICE_F_NONBLOCK)
        os.close(a_w)
        a_w = -1
        assert tee(a_r, b_w, 1 << 16) == 0  # empty and no writer: end of input
    finally:
        for fd in (a_r, a_w, b_r, b_w):
            if fd >= 0:
                os.close(fd)


@needs_splice
def test_tee_into_something_that_is_not_a_pipe_raises_einval(tmp_path: Path) -> None:
    a_r, a_w = os.pipe()
    target = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        os.write(a_w, b"x")
        with pytest.raises(OSError) as raised:
            tee(a_r, target, 1)
        assert raised.value.errno == errno.EINVAL
        with pytest.raises(OSError) as raised:
            tee(987654, a_w, 1)  # not an open fd
        assert raised.value.errno == errno.EBADF
    finally:
        for fd in (a_r, a_w, target):
            os.close(fd)


def test_tee_turns_the_c_errno_into_the_matching_oserror() -> None:
    def failing(code: int):  # type: ignore[no-untyped-def]
        def call(fd_in: int, fd_out: int, length: int, flags: int) -> int:
            ctypes.set_errno(code)
            return -1
        return call

    with pytest.raises(BlockingIOError):
        tee(0, 1, 1, function=failing(errno.EAGAIN))
    with pytest.raises(InterruptedError):
        tee(0, 1, 1, function=failing(errno.EINTR))
    with pytest.raises(OSError) as raised:
        tee(0, 1, 1, function=failing(errno.ENOMEM))
    assert raised.value.errno == errno.ENOMEM
    with pytest.raises(OSError) as raised:  # -1 with errno 0: still an error, never a count
        tee(0, 1, 1, function=failing(0))
    assert raised.value.errno == errno.EIO
    assert tee(0, 1, 5, function=lambda *_: 5) == 5


def test_without_tee_or_with_the_switch_off_zero_copy_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import wrapper.zerocopy as zerocopy

    assert zero_copy_available({"RESCHED_NO_SPLICE": "1"}) is False
    monkeypatch.setattr(zerocopy, "_TEE", None)
    assert zero_copy_available({}) is False
    with pytest.raises(OSError) as raised:
        tee(0, 1, 1)
    assert raised.value.errno == errno.ENOSYS


def test_which_targets_are_offered_spliced_pages(tmp_path: Path) -> None:
    read_fd, write_fd = os.pipe()
    plain = os.open(tmp_path / "plain", os.O_WRONLY | os.O_CREAT, 0o600)
    append = os.open(tmp_path / "append", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_WRONLY)
    primary, secondary = pty.openpty()
    try:
        assert may_splice_into(write_fd) and may_splice_into(null)
        # a file gets write(2): splice moves the file position without write's lock, so
        # `> log 2>&1` could have both streams write at one offset
        assert not may_splice_into(plain)
        assert not may_splice_into(append)  # splice(2): EINVAL for O_APPEND
        assert not may_splice_into(secondary)  # a terminal: read/write
        assert not may_splice_into(98765)  # not open
    finally:
        for fd in (read_fd, write_fd, plain, append, null, primary, secondary):
            os.close(fd)


# --- honest positions after a gap -------------------------------------------------------


def test_scanner_numbers_lines_from_the_gap_and_says_so() -> None:
    scanner = LineScanner(load_rules())
    scanner.feed_text("ok\n" + OOM.decode(), "stdout")
    scanner.mark_gap(4096, "stdout")
    scanner.feed_text("noise\n" + OOM.decode(), "stdout")
    before, after = [hit for hit in scanner.hits if hit.rule_id == "cuda-oom"]
    assert (before.lineno, before.after_byte) == (2, None)
    assert (after.lineno, after.after_byte) == (2, 4096)
    assert scanner.lines_seen("stderr") == 0  # the other stream is untouched


def test_evidence_says_where_a_line_is_counted_from() -> None:
    exact = EvidenceLine("stdout", 12, "x")
    relative = EvidenceLine("stdout", 3, "x", after_byte=1048576)
    assert exact.where() == "stdout line 12"
    assert relative.where() == "stdout line 3 counted from byte 1048576"
    assert EvidenceLine("status", 0, "exit 1").where() == "status"
    assert relative.to_dict() == {"source": "stdout", "line": 3, "after_byte": 1048576,
                                  "text": "x"}
    assert "after_byte" not in exact.to_dict()
