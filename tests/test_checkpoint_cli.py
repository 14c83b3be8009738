"""``resched checkpoint publish|restore|list|verify``: output, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401
from click.testing import CliRunner

from workflows.cli import main
from wrapper.checkpoint import mark_complete

REPO = Path(__file__).resolve().parents[1]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["checkpoint", *args])
    return result.exit_code, result.stdout, result.stderr


def _src(tmp_path: Path, step: int) -> Path:
    src = tmp_path / "src"
    write_tree(src, {"model.pt": os.urandom(4000), "sub/opt.pt": b"o" * 10})
    mark_complete(src, step)
    return src


def test_publish_list_verify_restore(tmp_path: Path) -> None:
    url = f"file://{tmp_path}/store"
    code, out, _ = _run("publish", str(_src(tmp_path, 5)), url)
    assert code == 0 and out.startswith("published step 5 as 5-")
    assert "sent 3 files" in out
    code, out, _ = _run("publish", str(tmp_path / "src"), url)
    assert code == 0 and out.startswith("unchanged:")
    code, out, _ = _run("list", url)
    assert code == 0
    row = out.splitlines()[1].split()
    assert row[0] == "5" and row[6] == "complete*"
    code, out, _ = _run("verify", url)
    assert code == 0 and out.strip().endswith(": ok")
    code, out, _ = _run("restore", url, str(tmp_path / "out"))
    assert code == 0 and out.startswith("restored step 5")
    assert read_tree(tmp_path / "out") == read_tree(tmp_path / "src")


def test_publish_step_and_retention_options(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    src = tmp_path / "src"
    for step in (1, 2, 3):
        write_tree(src, {"w": str(step).encode()})
        assert _run("publish", str(src), url, "--step", str(step), "--retention", "2")[0] == 0
    _code, out, _ = _run("list", url)
    assert [line.split()[0] for line in out.splitlines()[1:-1]] == ["3", "2"]


def test_restore_into_nonempty_dir_needs_force(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    _run("publish", str(_src(tmp_path, 1)), url)
    out_dir = tmp_path / "out"
    write_tree(out_dir, {"mine.txt": b"keep"})
    code, _, err = _run("restore", url, str(out_dir))
    assert code == 1
    assert err.startswith("resched: error: ") and "not empty" in err and "--force" in err
    assert len(err.strip().splitlines()) == 1
    code, _, _ = _run("restore", url, str(out_dir), "--force")
    assert code == 0 and (out_dir / "mine.txt").read_bytes() == b"keep"
    assert (out_dir / "model.pt").exists()


def test_verify_reports_damage_and_exits_1(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    _run("publish", str(_src(tmp_path, 1)), url)
    blob = next(p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()
                and p.stat().st_size == 4000)
    blob.write_bytes(b"x" * 4000)
    code, out, err = _run("verify", url)
    assert code == 1 and "DAMAGED" in out and "blob content hashes to" in out
    assert err.startswith("resched: error: 1 of 1 checkpoint(s)")


def test_restore_fall_back_is_reported(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    src = _src(tmp_path, 1)
    _run("publish", str(src), url)
    (src / "model.pt").write_bytes(b"second" * 100)
    mark_complete(src, 2)
    _run("publish", str(src), url)
    blob = next(p for p in (tmp_path / "store" / "objects").rglob("*") if p.is_file()
                and p.stat().st_size == 600)
    blob.write_bytes(b"x" * 600)
    code, out, err = _run("restore", url, str(tmp_path / "out"))
    assert code == 0 and out.startswith("restored step 1")
    assert "warning: fell back past 1 newer checkpoint(s)" in err and "step 2" in err


def test_empty_store_messages(tmp_path: Path) -> None:
    url = str(tmp_path / "nothing")
    assert _run("list", url)[:2] == (0, f"store {url} holds no checkpoint\n")
    code, _, err = _run("restore", url, str(tmp_path / "out"))
    assert code == 0 and "nothing restored" in err
    code, _, err = _run("verify", url)
    assert code == 1 and "holds no complete checkpoint" in err


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    src = _src(tmp_path, 1)
    (src / "link").symlink_to(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "workflows.cli", "checkpoint", "publish",
                           str(src), str(tmp_path / "store")], cwd=REPO, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("resched: error: ") and "symlink" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    code, _, err = _run("publish", str(tmp_path / "missing"), str(tmp_path / "store"))
    assert code == 1 and "does not exist" in err
    code, _, err = _run("publish", str(src), str(tmp_path / "s"), "--retention", "0")
    assert code == 2 and "--retention" in err


def test_tampered_manifest_is_refused_in_one_line(tmp_path: Path) -> None:
    import hashlib

    url = tmp_path / "store"
    _run("publish", str(_src(tmp_path, 1)), str(url))
    manifest = next((url / "manifests").iterdir())
    data = json.loads(manifest.read_bytes())
    data["files"].append(["../../escape", 1, "0" * 64])
    body = json.dumps(data).encode()
    manifest.write_bytes(body)
    pointer = json.loads((url / "latest").read_bytes())
    pointer["checkpoints"][0]["manifest_sha256"] = hashlib.sha256(body).hexdigest()
    (url / "latest").write_bytes(json.dumps(pointer).encode())
    code, _, err = _run("restore", str(url), str(tmp_path / "out"))
    assert code == 1 and "would escape the checkpoint directory" in err
    assert not (tmp_path / "escape").exists()


class _Terminal:
    def __init__(self, tty: bool) -> None:
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        return None


def test_progress_is_drawn_on_a_terminal_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from workflows.cli import checkpoint_cmds

    for tty in (True, False):
        terminal = _Terminal(tty)
        monkeypatch.setattr(sys, "stderr", terminal)
        progress = checkpoint_cmds._Progress("publish", total=4_000_000)
        progress._drawn -= 1  # as if the last redraw was a second ago
        progress(2_000_000)
        progress.close()
        assert ("publish: 2.0 MB / 4.0 MB" in terminal.text) is tty
        assert (terminal.text == "") is not tty
