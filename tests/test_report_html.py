"""``resched report``: the page's content, hostile names, bad run directories, safe writes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local_fixtures import clean_env, write_workflow
from tests.report_fixtures import fault_free_run, one_fault_run
from workflows.report.html import render_html
from workflows.report.load import load_report
from workflows.report.view import build_lanes

RESCHED = str(Path(sys.executable).parent / "resched")
HOSTILE = "<img src=x onerror=alert(1)>'\"&"


def _resched(*args: str) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    return subprocess.run([RESCHED, *args], capture_output=True, text=True, timeout=60, env=env, check=False)


def test_lanes_hold_every_moment_of_a_recovery_in_order(tmp_path: Path) -> None:
    [lane] = build_lanes(load_report(one_fault_run().write(tmp_path / "run")))
    kinds = [(m.kind, m.label) for m in lane.marks]
    assert [k for k, _ in kinds if k in ("fault", "detect", "decision", "restore")] == [
        "fault", "detect", "decision", "restore", "restore"]
    assert ("save", "step 4") in kinds and ("save", "step 8") in kinds
    assert ("upload", "step 12") in kinds and ("detect", "sig 9") in kinds and ("decision", "retry") in kinds
    [recovery] = [s for s in lane.spans if s.kind == "recovery"]
    assert (recovery.start, recovery.end) == (pytest.approx(11.6), pytest.approx(15.1))
    assert [s.label for s in lane.spans if s.kind == "inplace"] == ["try 2"]
    assert lane.steps[0] == (pytest.approx(2.0), 1) and lane.steps[-1] == (pytest.approx(18.1), 12)


def test_page_is_self_contained_and_escapes_what_the_run_named(tmp_path: Path) -> None:
    run = one_fault_run()
    for item in [*run.events, *run.attempts]:
        if item.get("task") == "master":
            item["task"] = HOSTILE
    run.events[-3]["spec"] = "</script><script>alert(2)</script>"
    page = render_html(load_report(run.write(tmp_path / "run")))
    assert HOSTILE not in page and "<img" not in page and "alert(2)</script>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    # nothing is fetched: no external URL, stylesheet link or script source
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", page)
    assert "<link" not in page and "<script src" not in page and "@import" not in page
    assert page.count("<script>") == 1


def test_report_command_prints_the_honest_numbers_and_writes_the_page(tmp_path: Path) -> None:
    run_dir = one_fault_run().write(tmp_path / "run")
    clean = fault_free_run().write(tmp_path / "clean")
    page = tmp_path / "out" / "report.html"
    done = _resched("report", str(run_dir), "--baseline", str(clean), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert "fault-free run train-clean: ETTR 0.87 (the upper bound here)" in done.stdout
    assert "Young/Daly model" in done.stdout and "lost 6.1 s:" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("COMPLETED in 18s: 1 fault")
    text = page.read_text()
    assert 'data-card="baseline"' in text and "0.87" in text
    # writing again replaces our own page
    again = _resched("report", str(run_dir), "--html", str(page))
    assert again.returncode == 0 and "not measured" in page.read_text()


def test_report_never_writes_over_a_file_or_through_a_link_it_did_not_make(tmp_path: Path) -> None:
    run_dir = one_fault_run().write(tmp_path / "run")
    theirs = tmp_path / "notes.html"
    theirs.write_text("my notes")
    link = tmp_path / "link.html"
    link.symlink_to(theirs)
    for target in (theirs, link, tmp_path):
        done = _resched("report", str(run_dir), "--html", str(target))
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert theirs.read_text() == "my notes" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.html", "notes.html", "run"]


def _bad_run_dirs(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    empty = tmp_path / "empty"
    empty.mkdir()
    unfinished = tmp_path / "unfinished"
    (unfinished / "tasks").mkdir(parents=True)
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "report.json").write_text('{"run_id": "x",\n "status": ')
    shape = one_fault_run().report()
    shape["events"][3] = {"t": "soon", "kind": "step"}
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "report.json").write_text(json.dumps(shape))
    typed = one_fault_run().report()
    typed["events"].append({"t": typed["ended_at"], "kind": "checkpoint_saved", "task": "master",
                            "step": 3, "save_s": "fast"})
    badfield = tmp_path / "badfield"
    badfield.mkdir()
    (badfield / "report.json").write_text(json.dumps(typed))
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    return {
        "missing": (tmp_path / "nope", "no such run directory"),
        "empty": (empty, "not a run directory: it has no report.json"),
        "unfinished": (unfinished, "has not finished"),
        "corrupt": (corrupt, "report.json:2:12: not valid JSON"),
        "wrong": (wrong, "events[3]: a timeline event needs a number 't'"),
        "badfield": (badfield, "needs a number 'save_s', got 'fast'"),
        "list": (listed, "the top level is not an object"),
    }


def test_bad_run_directories_get_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from workflows.cli import main

    bad = _bad_run_dirs(tmp_path)
    for name, (path, expected) in bad.items():  # in process: the same CLI, no start-up cost
        result = CliRunner().invoke(main, ["report", str(path)])
        assert result.exit_code == 2, (name, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and expected in lines[0], (name, lines)
        assert "(fix: " in lines[0] and result.stdout == ""
    for name in ("missing", "corrupt"):  # and as a real process: no traceback on the way out
        done = _resched("report", str(bad[name][0]))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""


def test_run_refuses_a_foreign_html_target_before_running_anything(tmp_path: Path) -> None:
    spec = write_workflow(tmp_path, """
        workflow:
          name: ok
          tasks:
          - {name: t, command: ["sh", "-c", "touch {{output}}/ran"]}
    """)
    theirs = tmp_path / "page.html"
    theirs.write_text("someone's page")
    done = _resched("run", str(spec), "--workdir", str(tmp_path / "w"), "--progress", "plain",
                    "--html", str(theirs))
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("resched: error")]
    assert len(errors) == 1 and "was not written by `resched report`" in errors[0]
    assert theirs.read_text() == "someone's page" and not (tmp_path / "w").exists()


def test_credentials_in_the_stored_timeline_never_reach_text_json_or_page(tmp_path: Path) -> None:
    run = one_fault_run()
    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLEKEY"
    url = f"s3://AKIAIOSFODNN7EXAMPLE:{secret}@127.0.0.1:9000/team/run7"
    for event in run.events:
        if event["kind"] in ("checkpoint_uploaded", "wrapper_checkpoint_restored"):
            event["url"] = url
    run.attempts[0]["note"] = f"upload to {url} failed"
    run_dir = run.write(tmp_path / "run")
    page = tmp_path / "page.html"
    for args in ((str(run_dir), "--html", str(page)), (str(run_dir), "--json")):
        done = _resched("report", *args)
        assert done.returncode == 0, done.stderr
        assert secret not in done.stdout + done.stderr and "AKIAIOSFODNN7EXAMPLE" not in done.stdout
    assert "s3://***@127.0.0.1:9000/team/run7" in done.stdout
    assert secret not in page.read_text()


def test_a_run_id_finds_the_default_run_directory(tmp_path: Path) -> None:
    one_fault_run().write(tmp_path / ".resched" / "runs" / "train-run")
    env = clean_env()
    done = subprocess.run([RESCHED, "report", "train-run"], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().splitlines()[-1].startswith("COMPLETED in 18s: 1 fault")
