"""In-job helpers the generated sbatch script calls: ``python -m workflows.backends.slurm.jobside``.

    materialize BUNDLE_TASK_DIR TASK_DIR [--verbatim]
                                            copy the task's files: (tokens substituted unless --verbatim)
    stage URL DEST [REGEX]                  download an input (a resched store or a plain tree)
    stage-dir SOURCE DEST [REGEX]           copy an upstream task's published outputs (task: inputs)
    upload DIR URL [REGEX]                  copy an output dir (the files REGEX matches) to its url
    checkpoint-timer PID DIR URL FREQ [REGEX]  OSMO's checkpoint timer for the task PID
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

from workflows.backends.transfer import copy_outputs, keep_matching, upload_tree
from workflows.osmo_runtime import (
    CheckpointSchedule,
    InputKind,
    InputRule,
    Token,
    TokenKind,
    env_suffix,
    substitute,
)
from wrapper.errors import ReschedError
from wrapper.procstate import pid_alive


def substitute_tokens(text: str, env: Mapping[str, str], task_dir: str) -> str:
    """The same token rules as the launch scripts (see :mod:`.tasks`), applied to file text.

    The dry run already wrote ``{{input:<task>}}`` as ``{{input:N}}`` and checked hosts."""

    def value(token: Token) -> str:
        if token.kind is TokenKind.WORKFLOW_ID:
            return env.get("SLURM_JOB_ID", "")
        if token.kind is TokenKind.UUID:
            return env.get("RESCHED_TASK_UUID", "")
        if token.kind is TokenKind.OUTPUT:
            return f"{task_dir}/output"
        if token.kind is TokenKind.INPUT:
            return f"{task_dir}/input/{token.argument}"
        return env.get(f"RESCHED_HOST_{env_suffix(token.argument)}", token.text)

    return substitute(text, value)


def materialize(bundle_task_dir: Path, task_dir: Path, env: Mapping[str, str], *,
                verbatim: bool = False) -> int:
    """Copy every bundled file into ``task_dir`` (same relative path); return the count."""
    count = 0
    for source in sorted(p for p in bundle_task_dir.rglob("*") if p.is_file()):
        target = task_dir / source.relative_to(bundle_task_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = source.read_bytes()
        if not verbatim:
            try:
                data = substitute_tokens(data.decode("utf-8"), env, str(task_dir)).encode("utf-8")
            except UnicodeDecodeError:
                pass  # binary data carries no tokens (the dry run bundles it as verbatim anyway)
        target.write_bytes(data)
        target.chmod(source.stat().st_mode & 0o777)
        count += 1
    return count


def stage(url: str, dest: Path, regex: str | None = None) -> str:
    """OSMO's input download, via the checkpoint store's staging (verified restore or copy)."""
    from wrapper.checkpoint import stage_url

    result = stage_url(url, dest)
    dropped = keep_matching(dest, InputRule(0, InputKind.URL, url, regex))
    return (f"staged {url} -> {dest}: {result.kind}, {result.files} file(s), step {result.step}"
            + (f", {dropped} not matching {regex!r} left out" if dropped else ""))


def stage_dir(source: Path, dest: Path, regex: str | None = None) -> str:
    """A ``task:`` input: the upstream task's outputs, published when its group completed."""
    if not source.is_dir():
        raise FileNotFoundError(f"no published outputs at {source} (did the upstream job complete?)")
    copy_outputs(source, dest)
    dropped = keep_matching(dest, InputRule(0, InputKind.TASK, str(source), regex))
    files = sum(1 for p in dest.rglob("*") if p.is_file())
    left_out = f", {dropped} left out by {regex!r}" if dropped else ""
    return f"staged {source} -> {dest}: {files} file(s){left_out}"


def upload(directory: Path, url: str, regex: str | None = None) -> str:
    """A task's ``outputs:`` entry: its output folder (files ``regex`` matches) to ``url``."""
    written = upload_tree(directory, url, regex)
    if not written:
        return f"nothing to upload from {directory}"
    return f"uploaded {len(written)} file(s) from {directory} to {url}"


def checkpoint_timer(pid: int, directory: Path, url: str, frequency_s: float,
                     regex: str | None, *, poll_s: float = 0.2) -> int:
    """OSMO's ``checkpoint:`` runtime beside task ``pid``: an upload one period after
    start, then one period after the previous upload ended, and a final one once the task
    has ended, whatever ended it. Returns the number of uploads that committed."""
    import time

    from wrapper.checkpoint.layouts import inspect_layout
    from wrapper.checkpoint.osmo_upload import UploadKind, upload_checkpoint

    warned: set[str] = set()
    committed = 0

    def once(final: bool) -> None:
        nonlocal committed
        for warning in inspect_layout(directory).warnings:
            if warning not in warned:
                warned.add(warning)
                _say(f"checkpoint warning: {warning}")
        outcome = upload_checkpoint(directory, url, final=final, regex=regex)
        what = "final upload" if final else "upload"
        if outcome.kind is UploadKind.UPLOADED and outcome.result is not None:
            committed += 1
            _say(f"checkpoint {what} of {directory} -> {url}: step {outcome.result.step}, "
                 f"{outcome.result.files} file(s), {outcome.result.uploaded_files} sent")
        elif outcome.kind is UploadKind.SKIPPED:
            _say(f"checkpoint {what} skipped: {outcome.reason}")
        else:
            _say(f"checkpoint {what} FAILED: {outcome.reason}")

    schedule = CheckpointSchedule(frequency_s)  # the one definition of OSMO's timer
    due = schedule.first_due(time.monotonic())
    while pid_alive(pid):
        if time.monotonic() >= due:
            once(final=False)
            due = schedule.next_due(time.monotonic())
        time.sleep(poll_s)
    once(final=True)  # schedule.final_upload_after_exit: whatever ended the task
    return committed


def _say(text: str) -> None:
    import time

    stamp = time.strftime("%H:%M:%S", time.gmtime())
    print(f"resched[{os.environ.get('SLURM_JOB_ID', '-')}] {stamp}: {text}", flush=True)


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
            count = materialize(Path(args[0]), Path(args[1]), os.environ,
                                verbatim=args[2:] == ["--verbatim"])
            print(f"resched: {count} file(s) materialized in {args[1]}")
        elif command == "stage":
            print(f"resched: {stage(args[0], Path(args[1]), args[2] if len(args) > 2 else None)}")
        elif command == "stage-dir":
            print(f"resched: {stage_dir(Path(args[0]), Path(args[1]), args[2] if len(args) > 2 else None)}")
        elif command == "upload":
            print(f"resched: {upload(Path(args[0]), args[1], args[2] if len(args) > 2 else None)}")
        elif command == "checkpoint-timer":
            from wrapper.durations import parse_duration

            checkpoint_timer(int(args[0]), Path(args[1]), args[2],
                             parse_duration(args[3], where="checkpoint frequency"),
                             args[4] if len(args) > 4 and args[4] else None)
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
    from wrapper.safe_output import safe_streams

    with safe_streams():  # the job log is output too: store URLs in messages are masked
        code = main(sys.argv[1:])
    sys.exit(code)
