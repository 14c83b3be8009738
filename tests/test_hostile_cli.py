"""Every command and option with bad values: one clear line, a non-zero exit.

Table-driven and in-process (click's CliRunner) so the whole table is fast; a few real
subprocess runs at the end prove the exit code and that no traceback reaches a user.
``classify`` options belong to the rules slice and ``checkpoint`` to the store slice.

Issue 13: 28 bad option values exited 0 (``--set =v``, ``--hang-timeout
auto,factor=-1``, ...), four paths of the wrong kind gave tracebacks in ``wrap``.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile_helpers import assert_clear_error, fill, make_inputs, run_cli
from tests.local_fixtures import clean_env
from workflows.errors import UsageError
from workflows.values import split_set_item
from wrapper.durations import DurationError, parse_duration
from wrapper.hang import HangTimeoutError, parse_hang_timeout

HUGE = "99999999999999999999"

@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Inputs of every kind, named for the placeholders in the tables below."""
    monkeypatch.chdir(tmp_path)  # a wrap default state dir must land here, not in the repo
    for name in [k for k in os.environ if k.startswith("RESCHED_")]:
        monkeypatch.delenv(name)
    return make_inputs(tmp_path)


# Values options and FILE, for every command that loads a workflow.
BAD_VALUES = [
    ["--set", "=v"], ["--set-string", "=v"], ["--set", " =1"], ["--set", "a\nb=1"],
    ["--set", "novalue"], ["--set-string", "novalue"], ["--set"],
    ["-f", "{missing}"], ["-f", "{dir}"], ["-f", "{fifo}"], ["-f", "{zero}"], ["-f", "{bin}"],
    ["-f", "{big}"], ["-f", "{list}"], ["-f", "{dupvals}"], ["-f", "{bomb}"], ["-f", "{deep}"],
    ["-f", ""],
]
BAD_FILES = ["{missing}", "{dir}", "{fifo}", "{zero}", "{bin}", "{big}", "{empty}", "{list}",
             "{noworkflow}", ""]
PARSED_FILES = ["{dupspec}", "{bomb}", "{deep}"]  # only commands that parse the spec see these

LOADERS = [["render"], ["validate"], ["lint"], ["submit", "--dry-run"], ["run", "--dry-run"]]

OPTIONS = [
    # lint / validate
    ["lint", "{ok}", "--pool-retry-limit", "-1"], ["lint", "{ok}", "--pool-retry-limit", HUGE],
    ["lint", "{ok}", "--pool-retry-limit", "abc"], ["lint", "{ok}", "--pool-retry-limit", ""],
    ["lint", "{ok}", "--checkpoint-write-seconds", "nan"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "inf"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "-1"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "1e400"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "abc"],
    ["lint", "{ok}", "--format", "xml"], ["lint", "{ok}", "--target", "mars"],
    ["validate", "{ok}", "--target", ""], ["validate", "{ok}", "--target", "mars"],
    # submit
    ["submit", "{ok}", "--backend", "mars"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--pool", ""],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--pool", "--evil"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--pool", "a\nb"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--priority", "urgent"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--pool-retry-limit", HUGE],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--output", "{file}"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--output", "{file}/sub"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--partition", "x\n#SBATCH --wrap=evil"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--account", ""],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--time", ""],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--time", "1:00\nrm -rf ~"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--time", "-5"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--tasks-per-node", "0"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--tasks-per-node", HUGE],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--grace", "0"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--grace", "65536"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--max-retry-per-task", HUGE],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--workdir", "{file}/x"],
    ["submit", "{ok}", "--backend", "local", "--dry-run", "--max-retry-per-task", "-1"],
    ["submit", "{ok}", "--backend", "local", "--dry-run", "--workdir", "{file}"],
    ["submit", "{ok}", "--backend", "local", "--dry-run", "--report", "{dir}"],
    ["submit", "{ok}", "--backend", "local", "--dry-run", "--report", "{file}/r.json"],
    ["submit", "{ok}", "--backend", "local", "--dry-run", "--pool", "p"],
    # run
    ["run", "{ok}", "--dry-run", "--max-retry-per-task", HUGE],
    ["run", "{ok}", "--dry-run", "--max-retry-per-task", "abc"],
    ["run", "{ok}", "--dry-run", "--workdir", "{file}/x"],
    ["run", "{ok}", "--dry-run", "--report", "{dir}"],
    ["run", "{ok}", "--dry-run", "--report", "{file}/r.json"],
    ["run", "{ok}", "--dry-run", "--progress", "loud"],
    ["run", "{ok}", "--dry-run", "--chaos", "garbage"],
    ["run", "{ok}", "--dry-run", "--chaos", "kill:nobody@20s"],
    ["run", "{ok}", "--dry-run", "--chaos", "random:mtbf=nan"],
    # init, status, logs
    ["init", "nosuch", "{tmp}/n"], ["init", "", "{tmp}/n"],
    ["init", "single-node-torchrun", "{file}"], ["init", "single-node-torchrun", "{file}/sub"],
    ["status", ""], ["status", "../../etc"], ["status", "1;rm -rf ~"],
    ["status", "1", "--workdir", "{file}"], ["logs", ""], ["logs", "../x"],
    ["nosuchcommand"],
]

WRAP = [
    ["--reschedule-code", "0"], ["--reschedule-code", "256"], ["--reschedule-code", "-1"],
    ["--reschedule-code", "abc"], ["--reschedule-code", HUGE], ["--abort-code", "3"],
    ["--abort-code", HUGE], ["--max-retries", "-1"], ["--max-retries", HUGE],
    ["--max-retries", "abc"], ["--max-reschedules", "-1"], ["--max-reschedules", HUGE],
    ["--grace", "nan"], ["--grace", "-1"], ["--grace", "inf"], ["--grace", "1e400"],
    ["--grace", "9" * 400], ["--grace", "abc"], ["--hang-grace", "nan"], ["--hang-grace", "-5"],
    ["--hang-timeout", "soon"], ["--hang-timeout", "-5"], ["--hang-timeout", "nan"],
    ["--hang-timeout", "inf"], ["--hang-timeout", "9" * 400],
    ["--hang-timeout", "auto,factor=-1"], ["--hang-timeout", "auto,factor=0.5"],
    ["--hang-timeout", "auto,factor=nan"], ["--hang-timeout", "auto,factor=inf"],
    ["--hang-timeout", "auto,factor=0"], ["--hang-timeout", "auto,initial=0"],
    ["--hang-timeout", "auto,later=-1s"], ["--hang-timeout", "auto,later=0s"],
    ["--hang-timeout", "auto,min=nan"], ["--hang-timeout", "auto,warmup=-1"],
    ["--hang-timeout", "auto,warmup=1.5"], ["--hang-timeout", f"auto,warmup={HUGE}"],
    ["--hang-timeout", "auto,bogus=1"], ["--hang-timeout", "auto,factor="],
    ["--hang-timeout", "auto,,"],
    ["--sync-every", "0"], ["--sync-every", "-1"], ["--sync-every", "nan"],
    ["--checkpoint-url", "file:///x"],  # without --checkpoint-dir
    ["--checkpoint-dir", "{file}"], ["--checkpoint-dir", "{file}/x"],
    ["--state-dir", "{file}"], ["--state-dir", "{file}/x"], ["--state-dir", ""],
    ["--heartbeat-file", "{dir}"], ["--heartbeat-file", "{fifo}"],
    ["--heartbeat-file", "{file}/x"],
    ["--rules", "{bin}"], ["--rules", "{dir}"], ["--rules", "{missing}"], ["--rules", "{fifo}"],
    ["--rules", "{zero}"], ["--rules", "{big}"], ["--rules", "{duprules}"],
    ["--rules", "{bomb}"], ["--rules", "{deep}"],
    ["--outcome-file", "{dir}"], ["--outcome-file", "{file}/x"],
    ["--expect-finished-flag", "{dir}"],
    ["--node", ""], ["--node", "a b"], ["--node", "a\nb"], ["--node", "-x"],
]
WRAP_ENV = [
    {"RESCHED_MAX_RETRIES": "abc"}, {"RESCHED_HANG_TIMEOUT": "auto,factor=-1"},
    {"RESCHED_GRACE": "nan"}, {"RESCHED_RESCHEDULE_CODE": HUGE},
]


def _ids(cases: list[list[str]]) -> list[str]:
    return [" ".join(case).replace("\n", "\\n")[:60] for case in cases]


CASES = (
    [loader + bad + ["{ok}"] for loader in LOADERS for bad in BAD_VALUES[:-1]]
    + [loader + ["{ok}"] + BAD_VALUES[-1] for loader in LOADERS]
    + [loader + [bad] for loader in LOADERS for bad in BAD_FILES]
    + [loader + [bad] for loader in LOADERS[1:] for bad in PARSED_FILES]
    + OPTIONS
    + [["wrap", *bad, "--", "true"] for bad in WRAP]
    + [["wrap"], ["wrap", "--"]]
)


@pytest.mark.timeout(120)  # a FIFO or /dev/zero must never hang: fail, not stall the run
@pytest.mark.parametrize("args", CASES, ids=_ids(CASES))
def test_bad_input_is_one_clear_line(files: dict[str, str], args: list[str]) -> None:
    code, output = run_cli(*fill(args, files))
    assert_clear_error(code, output)


@pytest.mark.parametrize("env", WRAP_ENV, ids=[next(iter(e)) for e in WRAP_ENV])
def test_bad_environment_for_wrap_is_one_clear_line(files: dict[str, str], env: dict[str, str]) -> None:
    code, output = run_cli("wrap", "--", "true", env=env)
    assert_clear_error(code, output)


def test_the_table_is_big() -> None:
    assert len(CASES) + len(WRAP_ENV) >= 250


@pytest.mark.parametrize("args", [
    ["render", "{ok}", "--set", "a=1", "b=2"], ["lint", "{ok}", "--pool-retry-limit", "0"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "30.5"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--time", "1-02:03:04",
     "--partition", "gpu_a100", "--account", "team-7", "--grace", "65535"],
    ["submit", "{ok}", "--backend", "slurm", "--dry-run", "--time", "UNLIMITED"],
    ["submit", "{ok}", "--backend", "osmo", "--dry-run", "--pool", "a100.pool-1"],
    ["wrap", "--hang-timeout", "auto,factor=1,initial=1s,later=1s,min=1s,warmup=0",
     "--max-retries", "0", "--state-dir", "{tmp}/state", "--node", "dgx-a17", "--", "true"],
])
def test_good_values_at_the_edges_are_still_accepted(files: dict[str, str], args: list[str]) -> None:
    code, output = run_cli(*fill(args, files))
    assert code == 0, output


# -- properties ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_hang_timeout_is_settings_in_range_or_one_error(text: str) -> None:
    try:
        hang = parse_hang_timeout(text)
    except HangTimeoutError as error:
        assert "\n" not in str(error)
        return
    for seconds in (hang.fixed_s, hang.initial_timeout_s, hang.subsequent_timeout_s,
                    hang.min_calibrated_s):
        assert seconds is None or (math.isfinite(seconds) and seconds > 0)
    assert 1 <= hang.safety_factor <= 1000 and hang.warmup_intervals >= 0


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=30), st.floats(), st.integers(), st.booleans(), st.none()))
def test_any_duration_is_finite_and_not_negative_or_one_error(value: object) -> None:
    try:
        seconds = parse_duration(value, where="--x")
    except DurationError:
        return
    assert math.isfinite(seconds) and seconds >= 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=20))
def test_any_set_item_splits_or_is_one_usage_error(item: str) -> None:
    try:
        key, value = split_set_item(item)
    except UsageError as error:
        assert "\n" not in str(error)
        return
    assert key.strip() and key.isprintable() and f"{key}={value}" == item


# -- a few real processes: the exit code and no traceback, as a user sees them --------------


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.parametrize("args", [
    ["render", "{zero}"], ["render", "{fifo}"], ["validate", "{bomb}"],
    ["lint", "{ok}", "--checkpoint-write-seconds", "nan"], ["render", "{ok}", "--set", "=v"],
    ["wrap", "--rules", "{bin}", "--", "true"], ["wrap", "--state-dir", "{file}/x", "--", "true"],
    ["wrap", "--hang-timeout", "auto,factor=-1", "--", "true"],
], ids=lambda args: " ".join(args)[:40])
def test_real_process_exits_2_without_a_traceback(files: dict[str, str], args: list[str]) -> None:
    env = clean_env()
    done = subprocess.run([sys.executable, "-m", "workflows.cli", *fill(args, files)],
                          capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert_clear_error(done.returncode, done.stdout + done.stderr)
