"""Template values: ``default-values`` < ``-f`` files < ``--set`` < ``--set-string``.

OSMO's server builds the template data like this (``TemplateSpec.load_template_with_variables``):
start from the file's ``default-values`` mapping; then every ``--set KEY=VALUE`` (split at
the FIRST ``=``, the key used as is, the value tried as ``int()``, then ``float()``, else
kept as the string); then every ``--set-string`` (always a string). Keys are FLAT: OSMO
stores ``--set a.b=1`` under the key ``'a.b'``, which no Jinja expression can read.

resched keeps exactly that, so that a command line OSMO accepts renders to OSMO's text,
and adds two extensions where OSMO has no equivalent or would fail:

* ``-f/--values FILE`` (OSMO has no such flag): YAML mappings deep-merged, in order, over
  ``default-values`` and under every ``--set``.
* Dotted keys as nested paths. The rule (applied by :mod:`workflows.render`):
  the flat key is always stored as OSMO does; the template is rendered with OSMO's flat
  values FIRST. Only when that render fails with an undefined value (where OSMO fails
  too) is it rendered again with every dotted ``--set`` / ``--set-string`` key ALSO
  applied as a nested path (``a.b.c=1`` -> ``{'a': {'b': {'c': 1}}}``), filling in
  missing keys only, never replacing a value that is already there. A dotted key that
  names a value which already exists (from default-values or ``-f``) changes nothing,
  as in OSMO, and :func:`dotted_key_notes` says so (override nested values with ``-f``).
  So resched never renders other text than OSMO where OSMO renders at all.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.errors import UsageError
from wrapper import yamlsafe
from wrapper.inputfile import InputFileError, read_input_text
from wrapper.yamlsafe import YamlLoadError

__all__ = [
    "ValueOptions",
    "YamlLoadError",
    "apply_dotted_keys",
    "coerce_set_value",
    "deep_merge",
    "dotted_assignments",
    "dotted_key_notes",
    "load_values_file",
    "resolve_values",
    "safe_load_yaml",
    "split_set_item",
]

_MISSING = object()


@dataclass(frozen=True)
class ValueOptions:
    """The values a user gave on the command line, in the order given."""

    files: tuple[Path, ...] = ()
    sets: tuple[str, ...] = ()
    set_strings: tuple[str, ...] = ()


def coerce_set_value(text: str) -> int | float | str:
    """OSMO's ``--set`` coercion: Python ``int()``, then ``float()``, else the string.

    Python's own rules apply on purpose (``'08'`` -> 8, ``'1_000'`` -> 1000, ``' 5 '`` -> 5,
    ``'1e3'`` -> 1000.0, ``'nan'`` -> nan, ``'0x10'`` stays a string), because OSMO's
    server calls exactly these.
    """
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def split_set_item(item: str, flag: str = "--set") -> tuple[str, str]:
    """Split ``KEY=VALUE`` at the first ``=``; a missing ``=`` is a usage error."""
    key, sep, value = item.partition("=")
    shown = item if item.isprintable() else repr(item)  # keep the error on one line
    if not sep:
        raise UsageError(
            f"{flag} {shown}: expected KEY=VALUE",
            fix=f"write {flag} {shown or 'KEY'}=VALUE",
        )
    # OSMO would store these, but no template can ever read them: a typo, not a value.
    if not key.strip() or not key.isprintable():
        raise UsageError(
            f"{flag} {shown}: the KEY before '=' is empty or has control characters",
            fix=f"write {flag} NAME=VALUE",
        )
    return key, value


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: mappings merge key by key, anything else replaces."""
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        current = merged.get(key, _MISSING)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def safe_load_yaml(text: str, *, line_offset: int = 0,
                   duplicates: list[YamlLoadError] | None = None) -> Any:
    """``yaml.safe_load`` with every way it fails as :class:`YamlLoadError`.

    The shared loader (:mod:`wrapper.yamlsafe`) also refuses duplicate keys, alias bombs
    and deep nesting, which ``yaml.safe_load`` would accept or crash on.
    """
    return yamlsafe.safe_load(text, line_offset=line_offset, duplicates=duplicates)


def load_values_file(path: Path) -> dict[str, Any]:
    """Read one ``-f`` values file: a YAML mapping (an empty file is ``{}``)."""
    try:
        text = read_input_text(Path(path), what="values file")
    except InputFileError as error:  # a directory, FIFO or /dev/zero is refused, never read
        raise UsageError(error.message, where=error.where, fix=error.fix) from None
    try:
        data = safe_load_yaml(text)
    except YamlLoadError as error:
        where = f"{path}:{error.line + 1}" if error.line is not None else str(path)
        raise UsageError(f"values file is not valid YAML: {error.problem}", where=where,
                         fix=error.fix) from error
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise UsageError(
            f"values file must hold a mapping of names to values, not a {type(data).__name__}",
            where=str(path),
            fix="write it as `name: value` lines",
        )
    return dict(data)


def resolve_values(defaults: Mapping[str, Any], options: ValueOptions) -> dict[str, Any]:
    """The template data, keys flat as in OSMO: defaults < files < every --set < every --set-string."""
    values: dict[str, Any] = copy.deepcopy(dict(defaults))
    for path in options.files:
        values = deep_merge(values, load_values_file(path))
    for item in options.sets:
        key, text = split_set_item(item, "--set")
        values[key] = coerce_set_value(text)
    for item in options.set_strings:
        key, text = split_set_item(item, "--set-string")
        values[key] = text
    return values


def _dotted_parts(key: str) -> list[str] | None:
    parts = key.split(".")
    if len(parts) < 2 or any(not part for part in parts):
        return None  # no dot, or `a..b` / `.a`: only ever a flat key
    return parts


def dotted_assignments(options: ValueOptions) -> dict[str, Any]:
    """Every dotted ``--set`` / ``--set-string`` key with the value that wins for it."""
    assignments: dict[str, Any] = {}
    for item in options.sets:
        key, text = split_set_item(item, "--set")
        if _dotted_parts(key):
            assignments[key] = coerce_set_value(text)
    for item in options.set_strings:
        key, text = split_set_item(item, "--set-string")
        if _dotted_parts(key):
            assignments[key] = text
    return assignments


def _walk(values: Mapping[str, Any], parts: Iterable[str]) -> Any:
    node: Any = values
    for part in parts:
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def apply_dotted_keys(
    values: Mapping[str, Any], assignments: Mapping[str, Any]
) -> dict[str, Any]:
    """``values`` plus each dotted key as a nested path, filling in missing keys only."""
    extended: dict[str, Any] = copy.deepcopy(dict(values))
    for key, value in assignments.items():
        parts = _dotted_parts(key)
        if parts is None:
            continue
        node: dict[str, Any] = extended
        for part in parts[:-1]:
            child = node.get(part, _MISSING)
            if child is _MISSING:
                child = node[part] = {}
            if not isinstance(child, dict):
                break  # a scalar is in the way: the key stays flat, as in OSMO
            node = child
        else:
            node.setdefault(parts[-1], value)
    return extended


def dotted_key_notes(values: Mapping[str, Any], assignments: Mapping[str, Any]) -> tuple[str, ...]:
    """Warnings for dotted keys that name a value OSMO keeps (it would ignore the --set)."""
    notes = []
    for key, value in assignments.items():
        parts = _dotted_parts(key)
        if parts is None:
            continue
        current = _walk(values, parts)
        if current is not _MISSING and current != value:
            notes.append(
                f"--set {key}={value}: OSMO keys are flat, so `{key}` in the template still "
                f"reads {current!r} (from default-values or -f), as on OSMO; to override a "
                "nested value, put it in a -f values file"
            )
    return tuple(notes)
