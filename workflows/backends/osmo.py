"""The OSMO backend: ``osmo workflow submit FILE [--pool P] [--priority HIGH|NORMAL|LOW]``.

What is sent is the preview that ``resched render`` showed, already rendered, so the
values, ``-f`` files and dotted keys (which OSMO's server does not know) are applied
here. The server renders the file it receives again (it still holds runtime tokens,
so OSMO's client treats it as a template), so every other piece of Jinja syntax in
the preview (``${#arr[@]}`` that came out of a ``{% raw %}`` block, a stray ``{%``)
is escaped: :func:`escape_for_server` returns a file whose server render is exactly
the preview.

Like OSMO's own client, ``files:`` entries with ``localpath:`` are replaced by the
local file's contents before submitting (paths relative to the spec file's folder).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

from workflows.backends.base import Backend, Request, SubmitResult
from workflows.backends.options import BackendOption, OptionType, parse_options
from workflows.errors import BackendError, UsageError
from workflows.osmo_runtime import TOKEN as TOKEN_RE
from workflows.values import YamlLoadError, safe_load_yaml

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow

__all__ = ["OsmoBackend", "OsmoRequest", "escape_for_server", "inline_localpaths"]

PRIORITIES = ("HIGH", "NORMAL", "LOW")
SPEC_FILE_NAME = "workflow.yaml"
INSTALL_FIX = (
    "install the OSMO CLI with the install script from https://github.com/NVIDIA/OSMO/releases "
    "(it is not on PyPI), run `osmo login <your OSMO url>`, and make sure `osmo` is on PATH"
)
_ESCAPED_BRACE = "{{ '{' }}"
_ESCAPED_CR = "{{ '\\r' }}"
# A runtime token (kept when the server would give it back unchanged), the `{` of a Jinja
# delimiter, or a CR; the token alternative comes first, as in the server's findall.
# (A `{` before a CR counts too: the CR's escape starts with `{`.)
_SPECIAL_RE = re.compile(r"(?P<token>" + TOKEN_RE.pattern + r")|\{(?=[{%#\r])|\r")
_KEY_LINE_RE = re.compile(r"^(?=[a-zA-Z][a-zA-Z0-9_-]*:)", re.MULTILINE)
_WORKFLOW_ID_RE = re.compile(r"Workflow ID\s*-\s*(\S+)")


def _keep_token(token: str) -> bool:
    """A token the server will protect and give back unchanged, if left as it is."""
    field = token[2:-2]
    return field == field.strip() and "{" not in field and "\n" not in field and "\r" not in field


def escape_for_server(rendered_text: str) -> str:
    """The file to send: OSMO's server render of it (a second render) == ``rendered_text``.

    Runtime tokens stay verbatim where the server's protection gives them back as they
    are; every other ``{`` that would start a Jinja delimiter becomes ``{{ '{' }}``, a CR
    becomes ``{{ '\\r' }}`` (Jinja would turn it into a newline), a later line that would
    start a new top-level section gets an empty comment ``{##}`` in front, and one
    newline is added for the one Jinja drops at the end.
    """
    pieces = []
    position = 0
    while (found := _SPECIAL_RE.search(rendered_text, position)) is not None:
        pieces.append(rendered_text[position:found.start()])
        special = found.group(0)
        if special == "\r":
            pieces.append(_ESCAPED_CR)
            position = found.end()
        elif found.group("token") is not None and _keep_token(special):
            pieces.append(special)
            position = found.end()
        else:  # a delimiter start, or a token the server would not give back as it is
            pieces.append(_ESCAPED_BRACE)
            position = found.start() + 1
    pieces.append(rendered_text[position:])
    body = "".join(pieces)
    first_line_end = body.find("\n") + 1 if "\n" in body else len(body)
    # Only the first line may start a section (it is `workflow:`); hide any later one.
    body = body[:first_line_end] + _KEY_LINE_RE.sub("{##}", body[first_line_end:])
    return body + "\n"


def _task_lists(workflow: Any) -> list[list[Any]]:
    if not isinstance(workflow, dict):
        return []
    lists = [workflow.get("tasks")]
    for group in workflow.get("groups") or []:
        if isinstance(group, dict):
            lists.append(group.get("tasks"))
    return [tasks for tasks in lists if isinstance(tasks, list)]


def _localpath_entries(document: Any) -> list[dict[str, Any]]:
    workflow = document.get("workflow") if isinstance(document, dict) else None
    entries = []
    for tasks in _task_lists(workflow):
        for task in tasks:
            files = task.get("files") if isinstance(task, dict) else None
            for entry in files if isinstance(files, list) else []:
                if isinstance(entry, dict) and "localpath" in entry:
                    entries.append(entry)
    return entries


def _read_local_file(localpath: Any, base_dir: Path) -> str:
    path = Path(str(localpath)).expanduser()
    if not path.is_absolute():
        path = base_dir / path
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise BackendError(
            f"files: localpath {localpath!r} cannot be read ({error.strerror or error}; "
            f"looked at {path})",
            fix="give a path relative to the workflow file's folder, or an absolute one",
        ) from error
    except UnicodeDecodeError as error:
        raise BackendError(
            f"files: localpath {localpath!r} is not UTF-8 text",
            fix="put binary data in `contents` with `base64: true` instead",
        ) from error


def _flow_scalar(text: str) -> str:
    dumped = yaml.safe_dump(text, default_style='"', width=float("inf"), allow_unicode=True)
    return dumped[: -len("\n...\n")] if dumped.endswith("\n...\n") else dumped.rstrip("\n")


_LOCALPATH_LINE_RE = re.compile(r"^(?P<lead>[ \t]*(?:-[ \t]+)?)localpath:[^\n]*$", re.MULTILINE)


def inline_localpaths(rendered_text: str, base_dir: Path) -> str:
    """Replace each ``localpath:`` entry by ``contents:`` with the file, as OSMO's client does.

    The edit is made in place, line by line, so the rest of the preview stays byte for
    byte; when the YAML is laid out so that this cannot be done safely (flow style), the
    workflow is written out again by YAML instead (OSMO's client always does that).
    """
    if "localpath" not in rendered_text:
        return rendered_text
    try:
        document = safe_load_yaml(rendered_text)
    except YamlLoadError as error:
        raise BackendError(f"the rendered workflow is not valid YAML: {error.problem}") from error
    entries = _localpath_entries(document)
    if not entries:
        return rendered_text
    contents = [_read_local_file(entry["localpath"], base_dir) for entry in entries]
    for entry, text in zip(entries, contents):
        del entry["localpath"]
        entry["contents"] = text
    lines = list(_LOCALPATH_LINE_RE.finditer(rendered_text))
    if len(lines) == len(entries):
        edited = rendered_text
        for match, text in reversed(list(zip(lines, contents))):
            replacement = f"{match.group('lead')}contents: {_flow_scalar(text)}"
            edited = edited[: match.start()] + replacement + edited[match.end():]
        try:
            if safe_load_yaml(edited) == document:
                return edited
        except (YamlLoadError, RecursionError):
            pass
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=float("inf"))


@dataclass(frozen=True)
class OsmoRequest(Request):
    """``argv`` names the spec as ``workflow.yaml``; ``submit`` writes it and runs argv."""

    argv: tuple[str, ...]
    spec_text: str
    long_request: ClassVar[bool] = True  # tens of KB once localpath files are inlined

    def materialize(self) -> str:
        return f"$ {shlex.join(self.argv)}\n# {SPEC_FILE_NAME}:\n{self.spec_text}"

    def write(self, directory: Path) -> list[Path]:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / SPEC_FILE_NAME
        path.write_bytes(self.spec_text.encode("utf-8", "surrogateescape"))
        return [path]

    def brief(self, written: list[Path]) -> str:
        """The spec is tens of KB once ``localpath`` files are inlined (once per task that
        names them, as OSMO needs): name the file and the command instead of printing it."""
        (path,) = written
        try:
            document = safe_load_yaml(self.spec_text)
        except (YamlLoadError, RecursionError):
            document = None
        workflow = document.get("workflow", {}) if isinstance(document, dict) else {}
        tasks = [t for group in _task_lists(workflow) for t in group if isinstance(t, dict)]
        inlined = sum(1 for t in tasks for f in t.get("files") or [] if isinstance(f, dict))
        size = len(self.spec_text.encode("utf-8", "surrogateescape"))
        argv = [self.argv[0], *self.argv[1:3], str(path), *self.argv[4:]]
        return "\n".join([
            f"wrote {path} ({size / 1024:.1f} KiB: workflow {workflow.get('name', '?')}, "
            f"{len(tasks)} task(s), {inlined} file(s) inlined)",
            f"submit it with:  {shlex.join(argv)}",
            "(or run the same resched submit command without --dry-run; --show-spec prints the spec)",
        ])


OPTIONS = (
    BackendOption("pool", OptionType.TEXT, "OSMO pool to run in (default: your profile's default pool)"),
    BackendOption("priority", OptionType.CHOICE, "OSMO priority (OSMO's default: NORMAL; LOW may be preempted)",
                  choices=PRIORITIES),
)


def _build_argv(options: Mapping[str, Any]) -> tuple[str, ...]:
    opts = parse_options(OPTIONS, options, "osmo")
    argv = ["osmo", "workflow", "submit", SPEC_FILE_NAME]
    if opts["pool"] is not None:
        argv += ["--pool", opts["pool"]]
    if opts["priority"] is not None:
        argv += ["--priority", opts["priority"]]
    return tuple(argv)


class OsmoBackend(Backend):
    name = "osmo"
    lint_target = "osmo"
    options = OPTIONS
    emulates_runtime = False  # OSMO's server runs the DAG, tokens and timers itself

    def dry_run(self, job: LoadedWorkflow, options: Mapping[str, Any]) -> OsmoRequest:
        argv = _build_argv(options)
        rendered = job.rendered
        base_dir = Path(rendered.source).resolve().parent if rendered.source else Path.cwd()
        spec = inline_localpaths(rendered.text, base_dir)
        return OsmoRequest(argv=argv, spec_text=escape_for_server(spec))

    def submit(self, request: Request) -> SubmitResult:
        if not isinstance(request, OsmoRequest):
            raise BackendError(f"the osmo backend cannot submit a {type(request).__name__}")
        executable = shutil.which(request.argv[0])
        if executable is None:
            raise BackendError("the `osmo` CLI is not on PATH", fix=INSTALL_FIX)
        with tempfile.TemporaryDirectory(prefix="resched-osmo-") as directory:
            (spec_path,) = request.write(Path(directory))
            argv = [executable, *request.argv[1:3], str(spec_path), *request.argv[4:]]
            try:
                completed = subprocess.run(argv, capture_output=True, text=True, check=False)
            except OSError as error:
                raise BackendError(f"cannot run {executable}: {error}", fix=INSTALL_FIX) from error
        output = (completed.stdout + completed.stderr).strip()
        if completed.returncode != 0:
            last = output.splitlines()[-1] if output else "no output"
            raise BackendError(f"osmo workflow submit failed (exit {completed.returncode}): {last}")
        found = _WORKFLOW_ID_RE.search(completed.stdout)
        job_id = found.group(1) if found else ""
        message = f"submitted to OSMO as {job_id}" if job_id else f"submitted to OSMO: {output}"
        return SubmitResult(backend=self.name, job_id=job_id, message=message)
