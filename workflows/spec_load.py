"""Parse rendered YAML into the spec model; every error names its YAML path and line.

Pydantic reports a location tuple (``('workflow', 'groups', 0, 'tasks', 1, 'exitActons')``);
this module turns it into ``train.yaml:23 workflow.groups[0].tasks[1].exitActons`` using a
line map built from the YAML node tree, and adds a "did you mean" for unknown keys.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from workflows.errors import SpecError
from workflows.spec import Workflow, WorkflowDocument
from wrapper.yamlsafe import YamlLoadError, compose_and_construct

Loc = tuple[str | int, ...]


def parse_workflow(text: str, *, source: str = "<spec>", first_line: int = 1) -> Workflow:
    """Validate rendered workflow text. ``first_line`` maps line 1 of ``text`` into ``source``."""
    try:
        return _parse_workflow(text, source=source, first_line=first_line)
    except RecursionError:  # `a: &x [*x]` builds a self-containing list
        raise SpecError(
            "the rendered spec refers to itself (a recursive YAML alias) or is nested too deeply",
            where=source,
            fix="replace the `*alias` that points back into its own `&anchor` with the values",
        ) from None


def _parse_workflow(text: str, *, source: str, first_line: int) -> Workflow:
    offset = first_line - 1
    try:
        node, data = compose_and_construct(text, line_offset=offset)
    except YamlLoadError as error:
        line = f":{error.line + 1}" if error.line is not None else ""
        raise SpecError(
            f"the rendered spec is not valid YAML: {error.problem}",
            where=f"{source}{line}",
            fix=error.fix
            or "check indentation and quoting there; `resched render` shows the rendered text",
        ) from None
    if not isinstance(data, dict) or "workflow" not in data:
        raise SpecError(
            "the rendered spec has no `workflow:` mapping",
            where=source,
            fix="start the spec with a top-level `workflow:` key",
        )
    _check_task_count(data["workflow"], source)
    try:
        return WorkflowDocument.model_validate(data).workflow
    except ValidationError as error:
        # the line of every path only when an error needs one (a 6 MB spec: 300k paths)
        lines = dict(line_map(node, ())) if node is not None else {}
        raise _spec_error(error, lines, source, offset) from None


# Validation and lint take time and memory per task (a 6 MB spec of 85k tasks: 30 s,
# 700 MB); OSMO's own default limit is 20 tasks (lint RS011). Far above any real
# workflow, this keeps every spec under the 8 MiB input cap to seconds.
MAX_TASKS = 10_000


def _check_task_count(workflow: Any, source: str) -> None:
    if not isinstance(workflow, dict):
        return
    tasks = workflow.get("tasks")
    count = len(tasks) if isinstance(tasks, list) else 0
    groups = workflow.get("groups")
    for group in groups if isinstance(groups, list) else ():
        if isinstance(group, dict) and isinstance(group.get("tasks"), list):
            count += len(group["tasks"])
    if count > MAX_TASKS:
        raise SpecError(
            f"the workflow has {count:,} tasks; resched checks at most {MAX_TASKS:,} "
            "(OSMO's default max_num_tasks is 20)", where=source,
            fix="split it into several workflows, or give each task more GPUs")


def line_map(node: yaml.Node, path: Loc = ()) -> Iterator[tuple[Loc, int]]:
    """(YAML path, 1-based line) of every key and item below ``node``."""
    yield path, node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            key_path = (*path, key.value)
            yield key_path, key.start_mark.line + 1
            for sub_path, line in line_map(value, key_path):
                if sub_path != key_path:
                    yield sub_path, line
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from line_map(item, (*path, index))


def format_loc(loc: Loc) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _yaml_loc(loc: tuple[Any, ...]) -> Loc:
    # Pydantic inserts union member names ("str", "function-after[...]") into locations.
    return tuple(p for p in loc if isinstance(p, int) or not _is_type_tag(str(p)))


def _is_type_tag(part: str) -> bool:
    return part in {"str", "int", "float", "bool", "dict[str,str]"} or "[" in part


def _spec_error(error: ValidationError, lines: dict[Loc, int], source: str, offset: int) -> SpecError:
    problems = [_describe(e, lines, source, offset) for e in error.errors()]
    where, message, fix = problems[0]
    more = len({p[0] + p[1] for p in problems}) - 1
    if more > 0:
        message += f" ({more} more problem{'s' if more > 1 else ''} after this one)"
    spec_error = SpecError(message, where=where, fix=fix)
    spec_error.problems = problems  # type: ignore[attr-defined]
    return spec_error


def _describe(
    err: Any, lines: dict[Loc, int], source: str, offset: int
) -> tuple[str, str, str | None]:
    loc = _yaml_loc(err["loc"])
    line = _nearest_line(loc, lines)
    where = f"{source}:{line + offset} {format_loc(loc)}" if line else f"{source} {format_loc(loc)}"
    if err["type"] == "extra_forbidden":
        key = str(loc[-1]) if loc else "?"
        allowed = _allowed_keys(loc[:-1])
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        if not close:
            close = [a for a in allowed if a.lower() == key.lower()]
        fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
        return where, f"unknown key {key!r}", fix
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "missing":
        return where, f"required key {str(loc[-1])!r} is missing", f"add `{loc[-1]}:`"
    return where, message, None


def _nearest_line(loc: Loc, lines: dict[Loc, int]) -> int | None:
    for end in range(len(loc), -1, -1):
        if loc[:end] in lines:
            return lines[loc[:end]]
    return None


def _allowed_keys(parent: Loc) -> list[str]:
    """Field names of the model found at ``parent`` (walking the annotations)."""
    model: Any = WorkflowDocument
    for part in parent:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if _is_model(model) else None
        if field is None:  # a dict key (resources.<name>) between two models
            continue
        model = _inner_model(field.annotation)
        if model is None:
            return []
    return list(model.model_fields) if _is_model(model) else []


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if _is_model(annotation):
        return annotation  # type: ignore[no-any-return]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _inner_model(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, tuple, list, dict):
        for arg in typing.get_args(annotation):
            found = _inner_model(arg)
            if found is not None:
                return found
    return None
