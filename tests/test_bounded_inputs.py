"""Issue 21 part 3: every input bounded in time and memory.

Findings pinned here (each failed before): a user rule with catastrophic backtracking
hung ``classify`` and ``wrap`` (and the wrapper then ignored SIGTERM); a 1 GiB log line
took 75 s, then MemoryError (exit 70); a spec of many tasks took minutes to validate
(two quadratic steps in lint); ``simulate --days 1e308`` / ``--gpus 1e12`` never
returned. Timings live in benchmarks/hostile_inputs.py; the timeouts below only guard
against a hang.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.supervise_fixtures import child_env, wait_for_file, write_script
from workflows.cli import main
from wrapper import regex_engine
from wrapper.long_lines import MAX_LINE_CHARS

EVIL_RULES = """version: 1
rules:
  - id: team/evil
    category: network
    decision: retry
    match: {patterns: ['(a+)+$']}
  - id: team/plain
    category: data
    decision: abort
    match: {patterns: ['shard (\\d+) is corrupt']}
"""
EVIL_LINE = "a" * 60 + "!"  # `re` needs ~2**60 steps to give up on this line
HANG_GUARD_S = 60


def _rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(EVIL_RULES)
    return path


def _classify(tmp_path: Path, log_text: str, *extra: str,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    log = tmp_path / "job.log"
    log.write_text(log_text)
    return subprocess.run(
        [sys.executable, "-m", "workflows.cli", "classify", "--log", str(log), "--exit-code", "1",
         "--rules", str(_rules(tmp_path)), "--format", "json", *extra],
        env=env or child_env(), capture_output=True, text=True, timeout=HANG_GUARD_S, check=False)


@pytest.mark.skipif(not regex_engine.re2_available(), reason="google-re2 is not installed")
@pytest.mark.parametrize("prefilter", ["auto", "re"])
def test_a_catastrophic_user_rule_runs_in_linear_time_on_re2(tmp_path: Path,
                                                              prefilter: str) -> None:
    env = child_env(RESCHED_PREFILTER=prefilter)
    done = _classify(tmp_path, f"start\n{EVIL_LINE}\nshard 7 is corrupt\n", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rule"] == "team/plain"  # user rules still match
    if prefilter == "re":  # (the Hyperscan prefilter misses this line: its own bug)
        done = _classify(tmp_path, f"start\nxx {'a' * 60}\n", env=env)
        assert json.loads(done.stdout)["rule"] == "team/evil"


def test_without_re2_a_catastrophic_rule_is_refused_at_load_in_one_line(tmp_path: Path) -> None:
    done = _classify(tmp_path, f"{EVIL_LINE}\n", env=child_env(RESCHED_REGEX_ENGINE="re"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("resched: error:")]
    assert "rules.yaml" in line and "team/evil" in line and "(a+)+$" in line
    assert "google-re2" in line


@pytest.mark.parametrize("pattern", [
    r"(a+)+$", r"(\w+\s?)+$", r"(a*)*b", r"(.*x){9}", r"(a{2,5})+b", r".*a.*b.*c",
    r"(?:(\d+)\1)+",
])
def test_catastrophic_shapes_are_named(pattern: str) -> None:
    assert regex_engine.backtracking_risk(re.compile(pattern))


@pytest.mark.parametrize("pattern", [
    r"NCCL WARN NET/IB : Got completion from peer .* with error 12", r"(?i)corrupt(?:ed)? shard \d+",
    r"rank (\d+) and rank \1 both", r"(?<!no )shard corrupt", r"(ab)+", r"(ab?)+", r"\AFATAL\b.*\bnode\Z",
])
def test_ordinary_patterns_pass(pattern: str) -> None:
    assert regex_engine.backtracking_risk(re.compile(pattern)) == ""


@pytest.mark.skipif(not regex_engine.re2_available(), reason="google-re2 is not installed")
def test_the_wrapper_answers_sigterm_whatever_a_rule_does(tmp_path: Path) -> None:
    up, release = tmp_path / "up", tmp_path / "release"
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\n"
        f"for i in $(seq 200); do echo '{EVIL_LINE}'; done\n"
        f"echo up > {up}\nwhile [ ! -e {release} ]; do sleep 0.05; done\n"))
    wrap = subprocess.Popen(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(tmp_path / "state"),
         "--node", "n1", "--grace", "2", "--rules", str(_rules(tmp_path)), "--", str(script)],
        env=child_env(RESCHED_PREFILTER="re"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_file(up)
        wrap.send_signal(signal.SIGTERM)
        _, err = wrap.communicate(timeout=HANG_GUARD_S)
    finally:
        release.touch()
        if wrap.poll() is None:
            wrap.kill()
            wrap.wait()
    assert wrap.returncode == 3, err  # a stop is a reschedule (preemption), not a hang
    assert "got SIGTERM" in err or "stop" in err


def test_a_huge_log_line_is_cut_not_held(tmp_path: Path) -> None:
    log = tmp_path / "huge.log"
    size = 96 << 20
    with log.open("w") as handle:
        handle.write("start\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB "
                     + "x" * size + "\nend\n")
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['resched', 'classify', '--log', {str(log)!r}, '--exit-code', '1',"
        " '--format', 'json']\n"
        "try:\n    runpy.run_module('workflows.cli', run_name='__main__')\n"
        "except SystemExit as done:\n    code = done.code\n"
        # VmHWM, not ru_maxrss: the latter keeps the test process's peak from before exec
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print('peak', peak, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], env=child_env(), capture_output=True,
                          text=True, timeout=HANG_GUARD_S, check=False)
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr, done.stderr[-500:]
    result = json.loads(done.stdout)
    assert result["rule"] == "cuda-oom"  # the rule at the line's start still matches
    assert all(len(e["text"]) <= MAX_LINE_CHARS for e in result["evidence"])
    peak_kib = int(done.stderr.split("peak ")[1].split()[0])
    assert peak_kib * 1024 < size  # the line was never held whole


@pytest.mark.parametrize("args, where", [
    (["--gpus", "8", "--days", "1e308"], "--days"),
    (["--gpus", "1000000000000"], "--gpus"),
    (["--gpus", "100000", "--days", "3650"], "--gpus/--days"),
    (["--gpus", "8", "--gpus-per-node", "100000"], "--gpus-per-node"),
])
def test_simulate_ranges_are_checked_in_one_line(args: list[str], where: str) -> None:
    result = CliRunner().invoke(main, ["simulate", *args])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.startswith("resched: error:")]
    assert line.startswith(f"resched: error: {where}: ") and "fix:" in line


def test_the_line_mapper_aligns_a_large_unchanged_spec_without_difflib(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from workflows.lint import locate

    text = "workflow:\n  tasks:\n" + "".join(
        f"  - name: t{i}\n    image: ubuntu\n" for i in range(20000))

    def quadratic(*_: object, **__: object) -> None:
        raise AssertionError("difflib ran over a spec that rendering left unchanged")

    monkeypatch.setattr(locate.difflib, "SequenceMatcher", quadratic)
    mapper = locate.LineMapper(text, "# comment\n" + text, 2)
    assert mapper.source_line(1) == 2 and mapper.source_line(40002) == 40003


def test_the_line_mapper_still_maps_a_templated_middle() -> None:
    from workflows.lint.locate import LineMapper

    source = "workflow:\n  tasks:\n{% for i in range(3) %}\n  - name: w{{ i }}\n{% endfor %}\n  x: 1\n"
    rendered = "workflow:\n  tasks:\n  - name: w0\n  - name: w1\n  - name: w2\n  x: 1\n"
    mapper = LineMapper(rendered, source, 1)
    assert [mapper.source_line(n) for n in range(1, 7)] == [1, 2, 4, 4, 4, 6]


def test_a_spec_with_more_tasks_than_resched_checks_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from workflows import spec_load

    monkeypatch.setattr(spec_load, "MAX_TASKS", 5)  # the real limit, 10,000, takes seconds
    spec = tmp_path / "w.yaml"
    spec.write_text("workflow:\n  name: w\n  tasks:\n" + "".join(
        f"  - name: t{i}\n    image: ubuntu\n    command: [sh]\n" for i in range(6)))
    result = CliRunner().invoke(main, ["validate", str(spec)])
    assert result.exit_code != 0
    (line,) = [x for x in result.output.splitlines() if x.startswith("resched: error:")]
    assert "6 tasks" in line and "at most 5" in line and str(spec) in line
