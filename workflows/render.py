"""Render a workflow file exactly as OSMO's server does.

What the server does (reference/osmo-workflow-semantics.md section 2), step by step:

1. Cut the file into top-level sections: a section starts at a line that begins, in
   column 0, with ``[a-zA-Z][a-zA-Z0-9_-]*:`` and runs up to the next such line or the
   end. Text before the first one (a comment header, ``---``) belongs to no section.
   Only ``workflow``, ``default-values`` and ``version`` may appear, each once; there
   must be a ``workflow`` section.
2. ``default-values`` is parsed on its own with ``yaml.safe_load``; the values are built
   by :func:`workflows.values.resolve_values` (flat keys, OSMO's coercion).
3. In the ``workflow`` section's text, every runtime token
   ``{{(uuid|workflow_id|output|input:[^}]+|host:[^}]+)}}`` (no spaces inside the braces)
   is replaced by ``{{hash<md5>}}``, a variable whose value is the token itself, with
   OSMO's own algorithm (``re.findall`` then ``str.replace`` in order), so even its
   corner cases (a token inside ``{% raw %}`` comes out as ``{{hash...}}``) match.
4. That text is rendered by ``SandboxedEnvironment(undefined=StrictUndefined)`` with
   Jinja's defaults (no trim/lstrip of blocks, one final newline dropped, newlines
   normalized to ``\\n``) in a worker process limited to 0.5 s of CPU and 100 MiB
   (:mod:`workflows.render_worker`). The result is the server's reply, byte for byte.

A file that is not templated (no ``{%``, ``{{``, ``{#`` or ``default-values``) goes
through the same steps: OSMO's client sends it to the server for ``--dry-run`` too,
and for such text rendering changes nothing but the cut, the final newline and CRLF.
(OSMO's client source tests for ``'{%%'``, a typo for ``'{%'``: with that client a file
whose only Jinja is ``{% ... %}`` is not sent for rendering at all and fails as YAML;
resched follows the reference and renders it, as the server would.)

``resched render`` prints the text plus one newline, as ``osmo workflow submit
--dry-run`` prints it (``--raw`` for the text alone); see workflows/cli/render_cmd.py.

Errors are one line each (:class:`RenderError`): the file, the source line where one is
known (Jinja's template line mapped back through the section's first line), and what is
wrong. Line numbers are exact unless a runtime token itself spans lines.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflows import render_worker
from workflows.errors import RenderError
from workflows.osmo_runtime import TOKEN
from workflows.values import (
    ValueOptions,
    YamlLoadError,
    apply_dotted_keys,
    dotted_assignments,
    dotted_key_notes,
    resolve_values,
    safe_load_yaml,
)
from wrapper.inputfile import InputFileError, read_input_text

__all__ = [
    "TOKEN_RE",
    "RenderError",
    "Rendered",
    "is_templated",
    "protect_tokens",
    "render_file",
    "render_text",
    "split_sections",
]

SECTION_RE = re.compile(
    r"^([a-zA-Z][a-zA-Z0-9_-]*):(.*?)(?=^[a-zA-Z][a-zA-Z0-9_-]*:|\Z)", re.DOTALL | re.MULTILINE
)
TOKEN_RE = TOKEN  # the one definition of OSMO's runtime tokens (workflows.osmo_runtime)
ALLOWED_SECTIONS = ("workflow", "default-values", "version")
_UNDEFINED_NAME_RE = re.compile(r"^'([^']+)' is undefined$")


@dataclass(frozen=True)
class Rendered:
    """One rendered workflow file."""

    source: Path | None
    source_text: str
    text: str  # exactly what OSMO's server returns: the rendered workflow section
    workflow_line: int  # 1-based line of `workflow:` in the source
    values: Mapping[str, Any]
    notes: tuple[str, ...] = field(default=())  # warnings for the user (never errors)
    # (where, problem) of input OSMO renders but resched refuses to run: duplicate keys
    # in default-values (OSMO keeps the last). `render` shows OSMO's text and warns;
    # validate / lint / submit / run refuse (workflows.pipeline).
    refusals: tuple[tuple[str, str], ...] = field(default=())


@dataclass(frozen=True)
class Section:
    key: str
    text: str  # from the key to just before the next key line, blank lines included
    line: int  # 1-based line of the key in the file


def is_templated(text: str) -> bool:
    """OSMO's client test for whether the server has to render a file."""
    return any(marker in text for marker in ("{%", "{{", "{#", "default-values"))


def split_sections(text: str, source: str = "<string>") -> dict[str, Section]:
    """Cut ``text`` into its top-level sections, with OSMO's rules for which may appear."""
    sections: dict[str, Section] = {}
    for match in SECTION_RE.finditer(text):
        key = match.group(1)
        line = text.count("\n", 0, match.start()) + 1
        if key in sections:
            raise RenderError(
                f'Duplicate top-level key "{key}" (first on line {sections[key].line})',
                where=f"{source}:{line}",
                fix="keep one section of each",
            )
        if key not in ALLOWED_SECTIONS:
            raise RenderError(
                f'Unknown top-level key "{key}"; OSMO allows only workflow, default-values '
                "and version at column 0",
                where=f"{source}:{line}",
                fix=f"indent `{key}:` under workflow: or remove it",
            )
        sections[key] = Section(key, match.group(1) + ":" + match.group(2), line)
    if "workflow" not in sections:
        hint = "; the file starts with a byte-order mark" if text.startswith("\ufeff") else ""
        raise RenderError(
            f"no `workflow:` section (a line starting with `workflow:` in column 0){hint}",
            where=source,
            fix="start the workflow with `workflow:` at the beginning of a line",
        )
    return sections


def _parse_section(section: Section, source: str,
                   duplicates: list[YamlLoadError] | None = None) -> Any:
    try:
        parsed = safe_load_yaml(section.text, line_offset=section.line - 1, duplicates=duplicates)
    except YamlLoadError as error:
        line = section.line if error.line is None else error.line + 1
        raise RenderError(f"{section.key} is not valid YAML: {error.problem}",
                          where=f"{source}:{line}", fix=error.fix) from error
    return parsed.get(section.key) if isinstance(parsed, dict) else None


def _default_values(sections: Mapping[str, Section], source: str,
                    duplicates: list[YamlLoadError] | None = None) -> dict[str, Any]:
    section = sections.get("default-values")
    if section is None:
        return {}
    defaults = _parse_section(section, source, duplicates)
    if not defaults:  # OSMO: `if default_values:` -- empty, null and [] mean none
        return {}
    if not isinstance(defaults, dict):
        raise RenderError(
            f"default-values must be a mapping of names to values, not a {type(defaults).__name__}",
            where=f"{source}:{section.line}",
            fix="write `name: value` lines indented under default-values:",
        )
    return defaults


def _check_version(sections: Mapping[str, Section], source: str) -> None:
    section = sections.get("version")
    if section is None:
        return
    version = _parse_section(section, source)
    ok = not isinstance(version, bool) and (
        (isinstance(version, (int, float)) and version == 2)
        or (isinstance(version, str) and version.strip().lstrip("+") == "2")
    )
    if not ok:
        raise RenderError(f"Unsupported workflow version: {version}",
                          where=f"{source}:{section.line}", fix="use `version: 2` or leave it out")


def protect_tokens(workflow_text: str) -> tuple[str, dict[str, str]]:
    """OSMO's token protection, step for step: the protected text and the hash values."""
    placeholders: dict[str, str] = {}
    for found in TOKEN_RE.findall(workflow_text):
        name = "hash" + str(int(hashlib.md5(found.strip().encode("utf-8")).hexdigest(), 16))
        placeholders[name] = "{{" + found + "}}"
        workflow_text = workflow_text.replace("{{" + found + "}}", "{{" + name + "}}")
    return workflow_text, placeholders


def _render_error(failure: render_worker.SandboxFailure, section: Section, source: str) -> RenderError:
    line = section.line + failure.lineno - 1 if failure.lineno else None
    where = f"{source}:{line}" if line else source
    message, fix = failure.message, None
    if failure.kind == "undefined":
        name = _UNDEFINED_NAME_RE.match(message)
        if name:
            fix = (f"give it a value under default-values or with --set {name.group(1)}=VALUE "
                   "(a runtime token is written without spaces: {{input:0}}, {{workflow_id}})")
        message = f"undefined value: {message}"
    elif failure.kind == "syntax":
        if "comment" in message:
            fix = "wrap shell text such as ${#arr[@]} in {% raw %}...{% endraw %}"
        message = f"Jinja syntax error: {message}"
    elif failure.kind == "security":
        message = f"the template sandbox refused: {message}"
    elif failure.kind == "cpu":
        detail = f" ({message})" if message else ""
        message = (f"rendering stopped at the CPU-time limit of {render_worker.CPU_LIMIT_S:g} s "
                   f"(OSMO's limit): a loop that never ends?{detail}")
    elif failure.kind == "memory":
        message = (f"rendering stopped at the memory limit of "
                   f"{render_worker.MEMORY_LIMIT_BYTES // (1024 * 1024)} MiB (OSMO's limit)")
    elif failure.kind == "crashed":
        message = f"the render worker failed: {message}"
    elif failure.kind == "recursion":
        message = f"template recursion too deep: {message}"
    else:
        message = f"Jinja template error: {failure.error_type}: {message}"
    return RenderError(message, where=where, fix=fix)


def _render_section(
    section: Section, values: Mapping[str, Any], options: ValueOptions, source: str
) -> tuple[str, Mapping[str, Any], tuple[str, ...]]:
    protected, placeholders = protect_tokens(section.text)
    # OSMO assigns the placeholders after the user's values: they win on a name clash.
    result = render_worker.render_in_sandbox(protected, {**values, **placeholders})
    dotted = dotted_assignments(options) if result.failure else {}
    if result.failure and result.failure.kind == "undefined" and dotted:
        # OSMO fails here; only now may dotted keys count as nested paths.
        extended = apply_dotted_keys(values, dotted)
        if extended != dict(values):
            retry = render_worker.render_in_sandbox(protected, {**extended, **placeholders})
            if retry.failure is None and retry.text is not None:
                return retry.text, extended, ()
            result, values = retry, extended
    if result.failure is not None or result.text is None:
        failure = result.failure or render_worker.SandboxFailure("crashed", "no output")
        raise _render_error(failure, section, source)
    return result.text, values, dotted_key_notes(values, dotted_assignments(options))


def render_text(text: str, options: ValueOptions, *, source: str = "<string>") -> Rendered:
    """Render workflow file text; ``source`` names it in errors."""
    return _render(text, options, source, None)


def render_file(path: Path, options: ValueOptions) -> Rendered:
    """Read and render a workflow file as OSMO's client reads it (UTF-8, universal newlines)."""
    path = Path(path)
    try:
        text = read_input_text(path, what="the workflow file")
    except InputFileError as error:  # a directory, FIFO or /dev/zero is refused, never read
        raise RenderError(error.message, where=error.where, fix=error.fix) from None
    return _render(text, options, str(path), path)


def _render(text: str, options: ValueOptions, source: str, path: Path | None) -> Rendered:
    sections = split_sections(text, source)
    _check_version(sections, source)
    duplicates: list[YamlLoadError] = []
    values = resolve_values(_default_values(sections, source, duplicates), options)
    refusals = tuple((f"{source}:{d.line + 1}", f"default-values: {d.problem}") for d in duplicates)
    workflow = sections["workflow"]
    try:
        rendered, used_values, notes = _render_section(workflow, values, options, source)
    except render_worker.WorkerStartError as error:
        raise RenderError(str(error), where=source) from error
    notes += tuple(f"{where}: {problem} (OSMO renders with the last one; validate, lint, "
                   "submit and run refuse it)" for where, problem in refusals)
    return Rendered(source=path, source_text=text, text=rendered, workflow_line=workflow.line,
                    values=used_values, notes=notes, refusals=refusals)
