"""The private task view (workflows/backends/taskfs.py), every mode that works here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from workflows.backends import taskfs
from workflows.backends.taskfs import TaskFile, TaskViewError, materialize, run_in_task_view

pytestmark = pytest.mark.e2e

WORKING = [m for m in ("unshare", "unshare-user", "bwrap") if taskfs._probe(m) is None]


def _run(mode: str, task_dir: Path, files: list[TaskFile], script: str, keep: list[Path]) -> str:
    materialize(task_dir, files)
    argv = ["sh", "-c", script]
    if mode == "rewrite":
        argv = [taskfs.rewrite_tmp(a, task_dir, keep) for a in argv]
    proc = run_in_task_view(argv, task_dir, files, dict(os.environ), mode=mode, keep=keep)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert os.getpgid(os.getpid()) != proc.pid  # it ran in a process group of its own
    return out.decode()


@pytest.mark.parametrize("mode", [*WORKING, "rewrite"])
def test_each_task_sees_its_own_tmp_and_the_kept_workdir(tmp_path: Path, mode: str) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "input.txt").write_text("staged")
    seen = []
    for name in ("a", "b"):
        files = [TaskFile("/tmp/run.sh", f"echo {name}".encode())]
        seen.append(_run(mode, tmp_path / name, files,
                         f"sh /tmp/run.sh; cat {shared}/input.txt; echo; pwd", [shared]))
    assert seen[0].splitlines()[:2] == ["a", "staged"]
    assert seen[1].splitlines()[:2] == ["b", "staged"]
    assert (tmp_path / "a/tmp/run.sh").read_text() == "echo a"  # on the host: in the pod folder
    if mode != "rewrite":
        assert seen[0].splitlines()[2] == "/tmp"


@pytest.mark.skipif(not WORKING, reason="no mount namespace here")
def test_host_tmp_is_hidden_in_a_namespace(tmp_path: Path) -> None:
    secret = Path("/tmp") / f"resched-host-only-{os.getpid()}"
    secret.write_text("host")
    try:
        out = _run(WORKING[0], tmp_path / "t", [], f"test -e {secret} && echo visible || echo hidden", [])
    finally:
        secret.unlink()
    assert out.strip() == "hidden"


def test_file_outside_tmp_without_a_host_file_is_refused() -> None:
    with pytest.raises(TaskViewError, match="/opt/nowhere/run.sh is outside /tmp"):
        taskfs.check_file_paths([TaskFile("/opt/nowhere/run.sh", b"x")])
    taskfs.check_file_paths([TaskFile("/tmp/x/run.sh", b"x")])


def test_forced_mode_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(taskfs.MODE_ENV, "chroot")
    with pytest.raises(TaskViewError, match="not a task view mode"):
        taskfs.choose_mode(allow_rewrite=False)
    monkeypatch.setenv(taskfs.MODE_ENV, "rewrite")
    assert taskfs.choose_mode(allow_rewrite=True) == "rewrite"
    with pytest.raises(TaskViewError, match="only for single-task workflows"):
        taskfs.choose_mode(allow_rewrite=False)


def test_rewrite_leaves_kept_paths_alone(tmp_path: Path) -> None:
    keep = Path("/tmp/work/run-1")
    text = "cp /tmp/work/run-1/input/0/x /tmp/models/x; cd /tmp"
    assert taskfs.rewrite_tmp(text, tmp_path, [keep]) == (
        f"cp /tmp/work/run-1/input/0/x {tmp_path}/tmp/models/x; cd /tmp")
    assert taskfs.rewrite_tmp("/tmp", tmp_path) == f"{tmp_path}/tmp"
