"""Hang detector logic with injected time, heartbeat(), launcher detection (pure units)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wrapper.hang import HangDetector, HangSettings, HangTimeoutError, parse_hang_timeout
from wrapper.launchers import count_in_job_restarts, detect_launcher, launcher_env, tracker_file


def test_parse_hang_timeout_forms() -> None:
    assert parse_hang_timeout(None).enabled is False
    assert parse_hang_timeout("off").enabled is False
    assert parse_hang_timeout("auto").auto is True
    assert parse_hang_timeout("90").fixed_s == 90.0
    assert parse_hang_timeout("10m").fixed_s == 600.0
    with pytest.raises(HangTimeoutError, match="--hang-timeout"):
        parse_hang_timeout("soon")
    tuned = parse_hang_timeout("auto,initial=20m,later=2m,factor=4,min=10s,warmup=5")
    assert (tuned.auto, tuned.initial_timeout_s, tuned.subsequent_timeout_s) == (True, 1200.0, 120.0)
    assert (tuned.safety_factor, tuned.min_calibrated_s, tuned.warmup_intervals) == (4.0, 10.0, 5)
    with pytest.raises(HangTimeoutError, match="unknown auto setting"):
        parse_hang_timeout("auto,sometimes=3")
    with pytest.raises(HangTimeoutError, match="not a number"):
        parse_hang_timeout("auto,warmup=many")


def test_fixed_timeout_counts_from_the_last_progress() -> None:
    detector = HangDetector(HangSettings(fixed_s=10.0, startup_s=10.0), started_at=100.0)
    assert not detector.expired(110.0)
    assert detector.expired(110.5)
    detector.observe_output(109.0)
    assert not detector.expired(118.0)
    assert detector.expired(119.5)


def test_fixed_timeout_gives_a_quiet_start_up_its_allowance() -> None:
    # A tight step timeout (3 s) killed quiet start-ups of 4-9 s: before the first
    # progress the start-up allowance applies, then the fixed timeout.
    detector = HangDetector(parse_hang_timeout("3,startup=60"), started_at=0.0)
    assert detector.timeout_s() == 60.0 and not detector.expired(9.0)
    assert detector.expired(60.5)
    detector.observe_heartbeat(20.0)
    assert detector.timeout_s() == 3.0
    assert not detector.expired(22.9) and detector.expired(23.5)
    default = HangDetector(parse_hang_timeout("3"), started_at=0.0)
    assert default.timeout_s() == HangSettings().initial_timeout_s  # auto's initial timeout
    assert not default.expired(600.0)
    # the allowance never undercuts the fixed timeout itself
    assert HangDetector(parse_hang_timeout("2h,startup=1m"), started_at=0).timeout_s() == 7200.0


@pytest.mark.parametrize("bad", ["3,startup=", "3,startup=-1", "3,startup=soon", "3,later=5",
                                 "-3", "nan", "inf"])
def test_bad_fixed_timeouts_are_one_clear_error(bad: str) -> None:
    with pytest.raises(HangTimeoutError, match="--hang-timeout"):
        parse_hang_timeout(bad)


def test_output_stops_counting_once_heartbeats_are_seen() -> None:
    detector = HangDetector(HangSettings(fixed_s=10.0), started_at=0.0)
    detector.observe_heartbeat(5.0)
    detector.observe_output(14.0)  # a logging thread, not the training loop
    assert detector.expired(15.5)


def test_disabled_detector_never_expires() -> None:
    detector = HangDetector(HangSettings(), started_at=0.0)
    assert detector.timeout_s() is None
    assert not detector.expired(1e9)


def test_auto_uses_generous_timeouts_until_calibrated() -> None:
    settings = HangSettings(auto=True, initial_timeout_s=1800.0, subsequent_timeout_s=300.0)
    detector = HangDetector(settings, started_at=0.0)
    assert detector.timeout_s() == 1800.0
    assert not detector.expired(1799.0)
    detector.observe_heartbeat(1000.0)
    assert detector.timeout_s() == 300.0
    assert detector.expired(1300.5)


def test_auto_calibrates_after_warmup_and_carries_to_the_next_attempt() -> None:
    settings = HangSettings(auto=True, warmup_intervals=2, safety_factor=5.0, min_calibrated_s=1.0)
    detector = HangDetector(settings, started_at=0.0)
    for now in (60.0, 90.0, 91.0, 93.0, 94.0):  # intervals 30 (warm-up), 1, 2, 1
        detector.observe_heartbeat(now)
    assert detector.timeout_s() == 300.0  # the measuring attempt is never tightened
    assert detector.calibrated_timeout_s() == 10.0  # 5 x the longest interval after warm-up
    next_attempt = HangDetector(
        HangSettings(**{**settings.__dict__, "calibrated_s": 10.0}), started_at=0.0)
    assert next_attempt.timeout_s() == settings.initial_timeout_s  # start-up stays generous
    next_attempt.observe_heartbeat(50.0)
    assert next_attempt.timeout_s() == 10.0
    assert next_attempt.expired(60.5)


def test_calibration_has_a_floor_and_never_shrinks_a_carried_value() -> None:
    settings = HangSettings(auto=True, warmup_intervals=0, min_calibrated_s=30.0, calibrated_s=80.0)
    detector = HangDetector(settings, started_at=0.0)
    detector.observe_heartbeat(1.0)
    detector.observe_heartbeat(1.5)
    assert detector.calibrated_timeout_s() == 80.0
    fresh = HangDetector(HangSettings(auto=True, warmup_intervals=0), started_at=0.0)
    fresh.observe_heartbeat(1.0)
    fresh.observe_heartbeat(1.5)
    assert fresh.calibrated_timeout_s() == 30.0


def test_output_lines_never_calibrate() -> None:
    detector = HangDetector(HangSettings(auto=True, warmup_intervals=0), started_at=0.0)
    for now in range(1, 50):
        detector.observe_output(float(now))
    assert detector.calibrated_timeout_s() is None


def test_heartbeat_touches_the_file_and_is_a_noop_without_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from wrapper import heartbeat

    heartbeat_module = sys.modules["wrapper.heartbeat"]  # the package attribute is the function

    monkeypatch.delenv("RESCHED_HEARTBEAT_FILE", raising=False)
    heartbeat()  # nothing to do, nothing raised
    target = tmp_path / "hb"
    monkeypatch.setenv("RESCHED_HEARTBEAT_FILE", str(target))
    monkeypatch.setenv("RESCHED_HEARTBEAT_MIN_INTERVAL", "0")
    monkeypatch.setattr(heartbeat_module, "_last_touch_s", float("-inf"))
    monkeypatch.setattr(heartbeat_module, "_interval_s", 0.0)
    heartbeat()
    assert target.exists()
    os.utime(target, (0, 0))
    heartbeat()
    assert target.stat().st_mtime > 0
    monkeypatch.setenv("RESCHED_HEARTBEAT_FILE", str(tmp_path / "missing-dir" / "hb"))
    heartbeat()  # an unwritable heartbeat never breaks training


def test_wrapper_package_import_stays_light() -> None:
    import subprocess
    import sys

    code = ("import sys, wrapper; wrapper.heartbeat(); "
            "heavy = [m for m in ('yaml', 'click', 'pydantic', 'fsspec', 'torch', 'workflows') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(("argv", "expected"), [
    (["torchrun", "--nproc-per-node", "2", "train.py"], "torchrun"),
    (["/usr/bin/torchrun", "train.py"], "torchrun"),
    (["ft_launcher", "--max-restarts", "3", "train.py"], "ft_launcher"),
    (["python3", "-m", "torch.distributed.run", "train.py"], "torchrun"),
    (["python", "-u", "-m", "nvidia_resiliency_ext.fault_tolerance.launcher", "t.py"], "ft_launcher"),
    (["env", "NCCL_DEBUG=INFO", "nice", "-n", "5", "torchrun", "t.py"], "torchrun"),
    (["python", "train.py", "torchrun"], None),
    (["bash", "run.sh"], None),
])
def test_detect_launcher(argv: list[str], expected: str | None) -> None:
    assert detect_launcher(argv) == expected


def test_launcher_env_points_log_dir_and_error_file_at_the_attempt(tmp_path: Path) -> None:
    env = launcher_env({"PATH": "/bin"}, "torchrun", tmp_path)
    assert env["PET_LOG_DIR"] == str(tmp_path / "launcher-logs")
    assert env["TORCHELASTIC_ERROR_FILE"] == str(tmp_path / "error.json")
    user = launcher_env({"PET_LOG_DIR": "/mine"}, "torchrun", tmp_path)
    assert user["PET_LOG_DIR"] == "/mine"


def test_tracker_file_and_in_job_restarts_are_read_from_argv_and_logs(tmp_path: Path) -> None:
    argv = ["torchrun", "pretrain.py", "--result-rejected-tracker-filename", "t.txt"]
    assert tracker_file(argv, cwd=tmp_path) == tmp_path / "t.txt"
    assert tracker_file(["x", "--result-rejected-tracker-filename=/abs/t"]) == Path("/abs/t")
    lines = [
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group",
        "noise",
        "2/3 restart attempts left; restarting worker group...",
    ]
    assert count_in_job_restarts(lines) == 2


def test_error_files_of_the_last_in_job_restart_only(tmp_path: Path) -> None:
    import time

    from wrapper.launchers import find_error_files, launcher_log_dir

    run_dir = launcher_log_dir(tmp_path) / "run_abc"
    for inner, ranks in (("attempt_0", (0, 1)), ("attempt_1", (1,))):
        for rank in ranks:
            folder = run_dir / inner / str(rank)
            folder.mkdir(parents=True)
            (folder / "error.json").write_text("{}")
    found = find_error_files(tmp_path, ["torchrun", "t.py"], {}, since=time.time() - 5)
    assert found == (run_dir / "attempt_1" / "1" / "error.json",)
    stale = find_error_files(tmp_path, ["torchrun", "t.py"], {}, since=time.time() + 60)
    assert stale == ()
    (tmp_path / "error.json").write_text("{}")
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "error.json").write_text("{}")
    assert find_error_files(plain, ["python", "t.py"], {}, since=time.time() - 5) == (
        plain / "error.json",)
