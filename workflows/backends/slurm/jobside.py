"""In-job helpers the generated sbatch script calls: ``python -m workflows.backends.slurm.jobside``.

    materialize BUNDLE_TASK_DIR TASK_DIR   copy the task's files: (tokens substituted)
    stage URL DEST                          download an input (a resched store or a plain tree)
    upload DIR URL                          copy an output dir to its url
    field OUTCOME_JSON KEY                  print one field of the wrapper's outcome record
    describe OUTCOME_JSON                   one line: rule, decision, node, exclusion
    exclusions OUTCOME_JSON                 nodes to exclude, comma separated (the wrapper's
                                            node if marked, NVRx straggler nodes)

Each prints one line on failure and exits 1; the batch script decides what that means.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from workflows.backends.slurm.tokens import TOKEN, env_suffix
from wrapper.errors import ReschedError


def substitute_tokens(text: str, env: Mapping[str, str], task_dir: str) -> str:
    """The same token rules as the launch scripts (see :mod:`.tasks`), applied to file text."""

    def value(match: Any) -> str:
        token: str = match.group(1)
        kind, _, name = token.partition(":")
        if token == "workflow_id":
            return env.get("SLURM_JOB_ID", "")
        if token == "uuid":
            return env.get("RESCHED_TASK_UUID", "")
        if token == "output":
            return f"{task_dir}/output"
        if kind == "input":
            return f"{task_dir}/input/{name}"
        return env.get(f"RESCHED_HOST_{env_suffix(name)}", match.group(0))

    return TOKEN.sub(value, text)


def materialize(bundle_task_dir: Path, task_dir: Path, env: Mapping[str, str]) -> int:
    """Copy every bundled file into ``task_dir`` (same relative path); return the count."""
    count = 0
    for source in sorted(p for p in bundle_task_dir.rglob("*") if p.is_file()):
        target = task_dir / source.relative_to(bundle_task_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = source.read_bytes()
        try:
            data = substitute_tokens(data.decode("utf-8"), env, str(task_dir)).encode("utf-8")
        except UnicodeDecodeError:
            pass  # binary (base64) files carry no tokens
        target.write_bytes(data)
        target.chmod(source.stat().st_mode & 0o777)
        count += 1
    return count


def stage(url: str, dest: Path) -> str:
    """OSMO's input download, via the checkpoint store's staging (verified restore or copy)."""
    from wrapper.checkpoint import stage_url

    result = stage_url(url, dest)
    return f"staged {url} -> {dest}: {result.kind}, {result.files} file(s), step {result.step}"


def upload(directory: Path, url: str) -> str:
    import fsspec  # type: ignore[import-untyped]

    files = [p for p in directory.rglob("*") if p.is_file()]
    if not files:
        return f"nothing to upload from {directory}"
    fs, root = fsspec.core.url_to_fs(url)
    for path in files:
        target = f"{root.rstrip('/')}/{path.relative_to(directory).as_posix()}"
        fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(path), target)
    return f"uploaded {len(files)} file(s) from {directory} to {url}"


def read_outcome(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise TypeError(f"{path}: not a JSON object")
    return data


def describe(record: Mapping[str, Any]) -> str:
    text = (
        f"decision {record.get('decision')} (rule {record.get('rule')}, "
        f"exit {record.get('exit_code')}, node {record.get('node')})"
    )
    if record.get("exclude_node"):
        text += f"; node {record.get('node')} marked for exclusion"
    if record.get("reason"):
        text += f": {record.get('reason')}"
    return text


def exclusions(record: Mapping[str, Any]) -> str:
    """The nodes the next allocation must avoid: the wrapper's own node when it marked
    it, and the nodes of the ranks NVRx flagged as stragglers (``exclude_nodes``)."""
    nodes: list[str] = []
    if record.get("exclude_node") is True and record.get("node"):
        nodes.append(str(record["node"]))
    extra = record.get("exclude_nodes")
    if isinstance(extra, list):
        nodes += [str(n) for n in extra if isinstance(n, str) and n]
    # a node name never holds a comma or a space: anything else cannot reach scontrol
    safe = [n for n in dict.fromkeys(nodes) if n.replace("-", "").replace(".", "").replace("_", "").isalnum()]
    return ",".join(safe)


def _field(record: Mapping[str, Any], key: str) -> str:
    value = record.get(key)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    command, args = argv[0], list(argv[1:])
    try:
        if command == "materialize":
            count = materialize(Path(args[0]), Path(args[1]), os.environ)
            print(f"resched: {count} file(s) materialized in {args[1]}")
        elif command == "stage":
            print(f"resched: {stage(args[0], Path(args[1]))}")
        elif command == "upload":
            print(f"resched: {upload(Path(args[0]), args[1])}")
        elif command == "field":
            print(_field(read_outcome(Path(args[0])), args[1]))
        elif command == "exclusions":
            print(exclusions(read_outcome(Path(args[0]))))
        elif command == "describe":
            print(describe(read_outcome(Path(args[0]))))
        else:
            print(f"resched: unknown helper command {command!r}", file=sys.stderr)
            return 2
    except (OSError, ValueError, TypeError, IndexError, ImportError) as error:
        print(f"resched: {command} failed: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except ReschedError as error:  # from the store: one line, never a traceback
        print(f"resched: {command} failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
