"""Issue 21 part 6: processes and state.

Findings pinned here (each failed before): a daemon the training starts with ``setsid``
outlived the wrapper; three wrappers sharing a state dir overwrote each other's attempt
records; in a directory where an earlier, unrelated run failed, ``resched wrap`` refused
to start ("node excluded by an earlier attempt") and nothing said how to clear it; an
existing state dir on a read-only file system crashed the wrapper (exit 70) before the
training started; a restore into a read-only target crashed (exit 70); ``submit --backend
slurm`` left ``resched-slurm/`` in the current directory when no Slurm answered.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.supervise_fixtures import child_env, pid_alive, wait_for_file, write_script

pytestmark = pytest.mark.e2e
RESCHED = [sys.executable, "-m", "workflows.cli"]


def _resched(*args: str, cwd: Path, env: dict[str, str] | None = None,
             timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RESCHED, *args], cwd=cwd, env=env or child_env(), text=True,
                          capture_output=True, timeout=timeout, check=False)


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("resched: error:")]


def _read_only_mounts_work() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "mount", "--bind", "/", "/"], capture_output=True,
                           check=False)
    return probe.returncode == 0


def _in_read_only_mount(directory: Path, argv: list[str]) -> list[str]:
    """``argv`` run where ``directory`` is a read-only bind mount of itself (a private
    mount namespace: nothing outside the command sees it)."""
    script = ('mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"')
    return ["unshare", "-m", "sh", "-c", script, str(directory), *argv]


needs_ro_mount = pytest.mark.skipif(not _read_only_mounts_work(),
                                    reason="needs unshare -m and mount (root in a container)")


def test_daemons_the_training_starts_with_setsid_are_swept(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = write_script(tmp_path / "train.sh", f"""#!/bin/bash
setsid -f sh -c 'echo $$ >> {pids}; exec sleep 300' </dev/null >/dev/null 2>&1
{sys.executable} -c "
import os, sys, time
if os.fork(): sys.exit(0)
os.setsid()
if os.fork(): sys.exit(0)
open('{pids}', 'a').write(str(os.getpid()) + '\\\\n')
time.sleep(300)
" </dev/null >/dev/null 2>&1
while [ $(wc -l < {pids} 2>/dev/null || echo 0) -lt 2 ]; do sleep 0.02; done
echo trained
""")
    try:
        done = _resched("wrap", "--state-dir", str(tmp_path / "state"), "--node", "n1",
                        "--grace", "2", "--", str(script), cwd=tmp_path)
        assert done.returncode == 0 and "trained" in done.stdout, done.stderr
        daemons = [int(line) for line in pids.read_text().split()]
        assert len(daemons) == 2
        assert [pid for pid in daemons if pid_alive(pid)] == []
    finally:  # never leave a sleeper behind, whatever failed above
        for line in (pids.read_text().split() if pids.exists() else []):
            try:
                os.kill(int(line), signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_concurrent_wrappers_of_one_node_on_one_state_dir_are_refused(tmp_path: Path) -> None:
    state, started, go = tmp_path / "state", tmp_path / "started", tmp_path / "go"
    first = subprocess.Popen(
        [*RESCHED, "wrap", "--state-dir", str(state), "--node", "n1", "--", "sh", "-c",
         f"echo up > {started}; while [ ! -e {go} ]; do sleep 0.02; done; echo first"],
        cwd=tmp_path, env=child_env(), text=True, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE)
    try:
        wait_for_file(started)
        others = [_resched("wrap", "--state-dir", str(state), "--node", "n1", "--", "echo",
                           f"other {i}", cwd=tmp_path) for i in (2, 3)]
        # another node of a multi-node job may share the directory: it goes on
        elsewhere = _resched("wrap", "--state-dir", str(state), "--node", "n2", "--", "echo",
                             "n2", cwd=tmp_path)
    finally:
        go.touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0 and out == "first\n", err
    for other in others:
        assert other.returncode == 2 and "other" not in other.stdout, other.stderr
        (line,) = _error_lines(other.stderr)
        assert "another resched wrap on node n1" in line and "--state-dir" in line
    assert elsewhere.returncode == 0 and elsewhere.stdout == "n2\n", elsewhere.stderr
    records = sorted(p.name for p in (state / "attempts").glob("*.json"))
    assert records == ["attempt-0001.n1.json", "attempt-0001.n2.json"]
    commands = {json.loads((state / "attempts" / name).read_text())["command"][0]
                for name in records}
    assert commands == {"sh", "echo"}


def test_an_unrelated_run_in_the_same_directory_is_not_judged_by_its_history(
        tmp_path: Path) -> None:
    failing = ["sh", "-c", "echo 'Megatron rerun: result reproducible'; exit 16"]
    budget = ["--node", "nx", "--max-retries", "0"]
    first = _resched("wrap", *budget, "--", *failing, cwd=tmp_path)
    assert first.returncode == 3, first.stderr  # reschedule, node nx excluded
    other = _resched("wrap", *budget, "--", "echo", "unrelated", cwd=tmp_path)
    assert other.returncode == 0 and other.stdout == "unrelated\n", other.stderr
    again = _resched("wrap", *budget, "--", *failing, cwd=tmp_path)  # the same run: guarded
    assert again.returncode == 3 and "excluded by an earlier attempt" in again.stderr
    hint = [line for line in again.stderr.splitlines() if "delete that directory" in line]
    assert len(hint) == 1 and str(tmp_path / ".resched" / "wrap") in hint[0]
    named = _resched("wrap", *budget, "--", *failing, cwd=tmp_path,
                     env=child_env(RESCHED_RUN_ID="run-7"))  # a run id names a fresh run
    assert "excluded by an earlier attempt" not in named.stderr
    assert (tmp_path / ".resched" / "wrap").is_dir()


def test_wrap_help_says_where_state_lives_and_how_to_clear_it(tmp_path: Path) -> None:
    done = _resched("wrap", "--help", cwd=tmp_path)
    text = " ".join(done.stdout.split())
    assert "<checkpoint-dir>/.resched" in text and "./.resched/wrap/" in text
    assert "RESCHED_RUN_ID" in text and "Delete that directory" in text


@needs_ro_mount
def test_a_read_only_state_dir_degrades_with_one_warning(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _resched("wrap", "--state-dir", str(state), "--node", "n1", "--max-retries", "0",
                     "--", "sh", "-c", "exit 1", cwd=tmp_path)
    assert first.returncode == 3, first.stderr
    before = {p: p.read_bytes() for p in state.rglob("*") if p.is_file()}
    done = subprocess.run(
        _in_read_only_mount(state, [*RESCHED, "wrap", "--state-dir", str(state), "--node",
                                    "n1", "--", "echo", "training ran"]),
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "training ran\n", done.stderr
    warnings = [line for line in done.stderr.splitlines() if "cannot be written" in line]
    assert len(warnings) == 1 and "Traceback" not in done.stderr
    private = Path(warnings[0].split(" go to ")[1].split()[0])
    try:
        history = json.loads((private / "history.json").read_text())
        assert [a["attempt"] for a in history["attempts"]] == [1, 2]  # carried on
    finally:
        shutil.rmtree(private)
    assert {p: p.read_bytes() for p in state.rglob("*") if p.is_file()} == before


@needs_ro_mount
def test_a_restore_into_a_read_only_target_is_one_clear_line(tmp_path: Path) -> None:
    src, target = tmp_path / "src", tmp_path / "target"
    src.mkdir()
    target.mkdir()
    (src / "model.pt").write_bytes(b"weights")
    store = f"file://{tmp_path / 'store'}"
    assert _resched("checkpoint", "publish", str(src), store, "--step", "3",
                    cwd=tmp_path).returncode == 0
    for where in (target, target / "sub"):
        done = subprocess.run(
            _in_read_only_mount(target, [*RESCHED, "checkpoint", "restore", store, str(where)]),
            cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=60,
            check=False)
        assert done.returncode == 1, done.stderr
        (line,) = _error_lines(done.stderr)
        assert f"cannot restore into {where}" in line and "internal error" not in done.stderr


def test_a_slurm_submit_that_no_slurm_answers_leaves_nothing_in_cwd(tmp_path: Path) -> None:
    bin_dir, work = tmp_path / "bin", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir()
    # a stand-in for sbatch on a machine whose controller does not answer
    write_script(bin_dir / "sbatch", "#!/bin/sh\necho 'sbatch: error: Batch job submission "
                                     "failed: Unable to contact slurm controller' >&2\nexit 1\n")
    (work / "w.yaml").write_text(
        "workflow:\n  name: t\n  tasks:\n  - name: t\n    image: ubuntu\n"
        "    command: [sh, -c, 'echo hi']\n")
    env = child_env(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = _resched("submit", "--backend", "slurm", "w.yaml", cwd=work, env=env)
    assert done.returncode != 0 and len(_error_lines(done.stderr)) == 1, done.stderr
    assert sorted(p.name for p in work.iterdir()) == ["w.yaml"]
    # a work dir that was there before keeps what it held
    (work / "resched-slurm").mkdir()
    (work / "resched-slurm" / "mine.txt").write_text("keep")
    done = _resched("submit", "--backend", "slurm", "w.yaml", cwd=work, env=env)
    assert done.returncode != 0
    assert [p.name for p in (work / "resched-slurm").iterdir()] == ["mine.txt"]
