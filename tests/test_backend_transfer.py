"""workflows/backends/transfer.py: outputs, task inputs and regex, shared by local and Slurm."""

from __future__ import annotations

from pathlib import Path

from workflows.backends.transfer import copy_outputs, keep_matching, upload_tree
from workflows.osmo_runtime import InputKind, InputRule


def _tree(root: Path) -> None:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (root / "sub" / "c.bin").write_text("c")


def test_a_task_input_copies_links_as_links_and_regex_drops_only_staged_files(tmp_path: Path) -> None:
    outside = tmp_path / "not-ours"
    outside.mkdir()
    (outside / "precious.bin").write_text("keep me")
    producer = tmp_path / "producer"
    _tree(producer)
    (producer / "link").symlink_to(outside, target_is_directory=True)
    dest = tmp_path / "input" / "0"
    assert copy_outputs(producer, dest) == 3
    assert (dest / "link").is_symlink()
    dropped = keep_matching(dest, InputRule(0, InputKind.TASK, "producer", r"\.txt$"))
    assert dropped == 1 and not (dest / "sub" / "c.bin").exists()
    assert (outside / "precious.bin").read_text() == "keep me"  # never followed
    assert (producer / "sub" / "c.bin").exists()  # the producer's own files are untouched


def test_outputs_upload_what_the_regex_matches_by_relative_path(tmp_path: Path) -> None:
    out = tmp_path / "output"
    _tree(out)
    written = upload_tree(out, f"file://{tmp_path}/bucket/run", r"^sub/")
    assert sorted(Path(w).relative_to(tmp_path / "bucket" / "run").as_posix() for w in written) == \
        ["sub/b.txt", "sub/c.bin"]
    assert upload_tree(tmp_path / "missing", f"file://{tmp_path}/bucket/x") == []
