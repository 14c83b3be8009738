"""Failure rules as data: load, validate and order the rule catalogue.

A rule says what it matches (exit codes, signals, log regexes, torchelastic
error-file exception types, Megatron tracker statuses, the launcher, run-state flags),
which category the failure is in, what to decide, and a hint for the user. The shipped
catalogue is ``wrapper/classifier/catalogue.yaml``; users add rules with ``--rules FILE.yaml``.

Precedence is deterministic: user files first, in the order given, then the catalogue;
within a file, file order. A user rule with the id of a catalogue rule replaces it.
The format is documented in docs/rules.md.
"""

from __future__ import annotations

import functools
import re
import signal as _signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wrapper import yamlsafe
from wrapper.decision import DECISIONS, Decision
from wrapper.errors import ReschedError
from wrapper.inputfile import InputFileError, read_input_text
from wrapper.regex_engine import UnsafePattern, user_pattern

__all__ = ["DECISIONS", "Decision", "Escalation", "Match", "Rule", "RuleSet", "RulesError",
           "load_rule_file", "load_rules", "parse_signal"]
ESCALATION_SCOPES = ("node", "job")
CATALOGUE_PATH = Path(__file__).with_name("catalogue.yaml")

_RULE_KEYS = {
    "id", "category", "decision", "hint", "match", "cascade", "exclude_node",
    "counts_as_failure", "escalate", "deterministic", "exhausts_retries", "trust_exception_type",
    "cites", "marks",
}
# What a `marks` rule's line is evidence of (never a failure cause, see wrapper/classifier/success.py):
# the training finished, the launcher restarted its workers (a new round began), or the
# process reached its normal exit (only read when the exit status is unknown), or Python
# reported an exception and ignored it (its traceback is no failure: unraisable.py), or an
# exception of a generic class closed a traceback (no cause by itself, but the process was
# not on its way to a normal exit: success.py, raised_before), or a training loop began
# (a finished line before it ended an earlier run), or the run was asked to stop (a finished
# line after it ends a loop the stop cut short: success.py, still_the_end), or an experiment
# tracker closed its run (an exit line unless a failure follows: success.py, exit_lines), or
# a thread's traceback begins (a thread died, not the process: blocks.py).
MARKS = ("success", "restart", "exit", "tracker", "ignored", "thread", "raised", "start", "stop")
_MATCH_KEYS = {
    "exit_codes", "signals", "patterns", "exception_types", "tracker_status",
    "launcher", "hung", "stop_requested", "expect_finished", "finished", "table",
}
_TABLE_KEYS = {"source", "list", "patterns", "rows", "texts"}
_ROW_KEYS = {"key", "text", "action", "class"}
_PLACEHOLDER_RE = re.compile(r"\{(key|text)\}")
_BOOL_MATCH_KEYS = ("hung", "stop_requested", "expect_finished", "finished")
_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]*$")
_LEADING_FLAGS_RE = re.compile(r"^\(\?([aiLmsux]+)\)")


class RulesError(ReschedError):
    """A rules file is unreadable or a rule in it is invalid (names file, rule, field)."""


@dataclass(frozen=True)
class Escalation:
    """After ``after`` earlier occurrences of the rule (on this node, or anywhere in
    the job), the decision becomes ``to``."""

    after: int
    to: Decision
    scope: str = "job"


@dataclass(frozen=True)
class Match:
    """One set of conditions; all that are set must hold."""

    exit_codes: frozenset[int] | None = None
    signals: frozenset[int] | None = None
    patterns: tuple[re.Pattern[str], ...] = ()
    exception_types: frozenset[str] | None = None
    tracker_status: frozenset[str] | None = None
    launcher: frozenset[str] | None = None
    hung: bool | None = None
    stop_requested: bool | None = None
    expect_finished: bool | None = None
    finished: bool | None = None

    @property
    def requires_status(self) -> bool:
        """True when the block names exit codes or signals explicitly."""
        return self.exit_codes is not None or self.signals is not None


@dataclass(frozen=True)
class TableRow:
    """One entry of an authoritative list: its key (Xid number, enum name), its message,
    the action the source documents, and the class resched maps it to."""

    key: str
    text: str | None
    action: str
    klass: str


@dataclass(frozen=True)
class Table:
    """An authoritative enumeration kept as data (docs/rules.md, "Tables").

    ``patterns`` are regex templates: ``{key}`` / ``{text}`` become an alternation of the
    selected rows' keys / messages (escaped), so one rule covers a whole class of rows.
    """

    name: str
    source: str  # URL
    list: str  # which list at that URL
    patterns: tuple[str, ...]
    rows: tuple[TableRow, ...]
    texts_are_regex: bool = False  # rows' texts are regexes (variable parts), not literals

    def classes(self) -> frozenset[str]:
        return frozenset(row.klass for row in self.rows)

    def expand(self, classes: frozenset[str]) -> tuple[str, ...]:
        rows = [row for row in self.rows if row.klass in classes]
        keys = _alternation(row.key for row in rows)
        texts = _alternation((row.text for row in rows if row.text), escape=not self.texts_are_regex)
        out = []
        for template in self.patterns:
            wants = set(_PLACEHOLDER_RE.findall(template))
            if ("key" in wants and not keys) or ("text" in wants and not texts):
                continue
            out.append(template.replace("{key}", keys).replace("{text}", texts))
        return tuple(out)


def _alternation(values: Iterable[str], *, escape: bool = True) -> str:
    # longest first, so that 'Xid 14' never wins over 'Xid 145' inside one group
    unique = sorted(set(values), key=lambda v: (-len(v), v))
    return "|".join(re.escape(v) if escape else f"(?:{v})" for v in unique)


@dataclass(frozen=True)
class Rule:
    id: str
    category: str
    decision: Decision
    hint: str
    matches: tuple[Match, ...]
    source: str
    cascade: bool = False
    exclude_node: bool = False
    counts_as_failure: bool = True
    escalate: Escalation | None = None
    deterministic: bool = False
    exhausts_retries: bool = False
    # when an error file / failure summary names the root cause's exception type, only
    # the rule's exception_types blocks count (a caught, logged KeyError is not a cause)
    trust_exception_type: bool = False
    # where the facts behind the rule come from (URL + which list); table rows add theirs
    cites: tuple[str, ...] = ()
    # "success" / "restart" / "exit" / "tracker" / "ignored" / "thread" / "raised" / "start" /
    # "stop": the rule marks an event, it is never a failure's cause
    marks: str | None = None

    @property
    def patterns(self) -> tuple[re.Pattern[str], ...]:
        """Every log pattern of the rule (all match blocks), without duplicates."""
        seen: dict[str, re.Pattern[str]] = {}
        for block in self.matches:
            for pattern in block.patterns:
                seen.setdefault(pattern.pattern, pattern)
        return tuple(seen.values())


@dataclass(frozen=True)
class RuleSet:
    """Rules in precedence order (first match wins; cascades only when nothing else)."""

    rules: tuple[Rule, ...]
    sources: tuple[str, ...] = ()
    tables: tuple[Table, ...] = ()

    def by_id(self, rule_id: str) -> Rule | None:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        return None

    def __len__(self) -> int:
        return len(self.rules)


def load_rules(user_files: Sequence[Path] = ()) -> RuleSet:
    """The shipped catalogue plus user rule files; user rules take precedence."""
    user_rules: list[Rule] = []
    seen_user: set[str] = set()
    for path in user_files:
        for rule in load_rule_file(Path(path)):
            if rule.id in seen_user:
                raise RulesError(
                    f"rule '{rule.id}' is defined in more than one user rules file",
                    where=str(path),
                    fix="give each rule a unique id",
                )
            seen_user.add(rule.id)
            user_rules.append(rule)
    shipped, tables = _catalogue()
    catalogue = [rule for rule in shipped if rule.id not in seen_user]
    sources = tuple(str(p) for p in user_files) + (str(CATALOGUE_PATH),)
    return RuleSet(rules=tuple(user_rules + catalogue), sources=sources, tables=tables)


def _catalogue() -> tuple[tuple[Rule, ...], tuple[Table, ...]]:
    """The shipped catalogue's rules and tables, parsed once per version of the file:
    parsing and validating ~90 rules and compiling their patterns costs 0.15 s, and every
    classify, judge and simulation loads them. Rules are frozen,
    so the parsed ones are shared; an edited file (another mtime, size or inode) is
    parsed again."""
    stat = CATALOGUE_PATH.stat()
    return _parsed_catalogue(stat.st_mtime_ns, stat.st_size, stat.st_ino)


@functools.lru_cache(maxsize=2)
def _parsed_catalogue(_mtime_ns: int, _size: int, _inode: int) -> tuple[tuple[Rule, ...], tuple[Table, ...]]:
    return load_rule_file(CATALOGUE_PATH), load_tables(CATALOGUE_PATH)


def load_tables(path: Path) -> tuple[Table, ...]:
    """The authoritative tables of one rules file (validated; empty when it has none)."""
    data = _read_yaml(path)
    if not isinstance(data, Mapping):
        return ()
    return tuple(_parse_tables(data.get("tables"), path).values())


def _read_yaml(path: Path) -> Any:
    try:
        return yamlsafe.safe_load(read_input_text(path, what="rules file"))
    except InputFileError as error:
        raise RulesError(error.message, where=error.where, fix=error.fix) from None
    except yamlsafe.YamlLoadError as error:
        where = f"{path}:{error.line + 1}" if error.line is not None else str(path)
        raise RulesError(f"not valid YAML: {error.problem}", where=where, fix=error.fix) from None


def _parse_tables(raw: Any, path: Path) -> dict[str, Table]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise RulesError("'tables' must be a mapping of table name -> table", where=str(path))
    tables: dict[str, Table] = {}
    for name, body in raw.items():
        ctx = _Field(path, f"table '{name}'")
        if not isinstance(body, Mapping):
            raise ctx.error("-", "expected a mapping with source, list, patterns, rows")
        unknown = sorted(set(map(str, body)) - _TABLE_KEYS)
        if unknown:
            raise ctx.error(unknown[0], "unknown field", fix=f"known: {', '.join(sorted(_TABLE_KEYS))}")
        source = _required_str(body, "source", ctx)
        if not source.startswith("https://"):
            raise ctx.error("source", f"{source!r} is not an https URL", fix="cite the page the list is on")
        patterns = _str_list(body, "patterns", "table", ctx) or []
        for i, template in enumerate(patterns):
            if not _PLACEHOLDER_RE.search(template):
                raise ctx.error(f"patterns[{i}]", "has neither {key} nor {text}")
        rows = body.get("rows")
        if not isinstance(rows, list) or not rows:
            raise ctx.error("rows", "expected a non-empty list")
        parsed = tuple(_parse_row(row, i, ctx) for i, row in enumerate(rows))
        keys = [row.key for row in parsed]
        duplicate = next((k for k in keys if keys.count(k) > 1), None)
        if duplicate is not None:
            raise ctx.error("rows", f"key {duplicate!r} appears twice")
        texts = body.get("texts", "literal")
        if texts not in ("literal", "regex"):
            raise ctx.error("texts", f"{texts!r} is not literal or regex")
        tables[str(name)] = Table(name=str(name), source=source,
                                  list=_required_str(body, "list", ctx),
                                  patterns=tuple(patterns), rows=parsed,
                                  texts_are_regex=texts == "regex")
    return tables


def _parse_row(raw: Any, index: int, ctx: _Field) -> TableRow:
    name = f"rows[{index}]"
    if not isinstance(raw, Mapping):
        raise ctx.error(name, "expected a mapping with key, text, action, class")
    unknown = sorted(set(map(str, raw)) - _ROW_KEYS)
    if unknown:
        raise ctx.error(f"{name}.{unknown[0]}", "unknown field", fix=f"known: {', '.join(sorted(_ROW_KEYS))}")
    key = raw.get("key")
    if isinstance(key, bool) or not isinstance(key, (str, int)) or str(key) == "":
        raise ctx.error(f"{name}.key", f"expected a name or number, got {key!r}")
    text = raw.get("text")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise ctx.error(f"{name}.text", f"expected a non-empty string, got {text!r}")
    row_ctx = _Field(ctx.path, f"{ctx.label} {name}")
    return TableRow(key=str(key), text=text, action=_required_str(raw, "action", row_ctx),
                    klass=_required_str(raw, "class", row_ctx))


def load_rule_file(path: Path) -> tuple[Rule, ...]:
    """Parse and validate one rules file (a mapping with `rules:` or a plain list)."""
    data = _read_yaml(path)
    raw_rules = _rules_list(data, path)
    tables = _parse_tables(data.get("tables"), path) if isinstance(data, Mapping) else {}
    rules: list[Rule] = []
    ids: set[str] = set()
    for index, raw in enumerate(raw_rules):
        rule = _parse_rule(raw, index, path, tables)
        if rule.id in ids:
            raise RulesError(f"rule '{rule.id}' field 'id': duplicate id", where=str(path))
        ids.add(rule.id)
        rules.append(rule)
    return tuple(rules)


def _rules_list(data: Any, path: Path) -> list[Any]:
    if data is None:
        return []
    if isinstance(data, list):
        return data
    if isinstance(data, Mapping):
        unknown = set(data) - {"version", "rules", "tables"}
        if unknown:
            raise RulesError(
                f"unknown top-level key(s) {', '.join(sorted(map(str, unknown)))}",
                where=str(path),
                fix="a rules file has `rules:` (a list) and optionally `version: 1` and `tables:`",
            )
        rules = data.get("rules") or []
        if isinstance(rules, list):
            return rules
    raise RulesError(
        "expected a list of rules (or a mapping with `rules:`)", where=str(path)
    )


class _Field:
    """Validation context: names the file, rule and field in every error."""

    def __init__(self, path: Path, label: str) -> None:
        self.path = path
        self.label = label

    def error(self, field: str, message: str, fix: str | None = None) -> RulesError:
        return RulesError(f"{self.label} field '{field}': {message}", where=str(self.path), fix=fix)


def _parse_rule(raw: Any, index: int, path: Path, tables: Mapping[str, Table] | None = None) -> Rule:
    label = f"rule {index}"
    if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
        label = f"rule '{raw['id']}'"
    ctx = _Field(path, label)
    if not isinstance(raw, Mapping):
        raise ctx.error("-", f"expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - _RULE_KEYS)
    if unknown:
        raise ctx.error(unknown[0], "unknown field", fix=f"known fields: {', '.join(sorted(_RULE_KEYS))}")
    rule_id = _required_str(raw, "id", ctx)
    if not _ID_RE.match(rule_id):
        raise ctx.error("id", f"{rule_id!r} must start with a letter or digit and use only letters, digits, _ . : / -")
    decision_word = _required_str(raw, "decision", ctx)
    if decision_word not in DECISIONS:
        raise ctx.error("decision", f"{decision_word!r} is not one of {', '.join(DECISIONS)}")
    decision = Decision(decision_word)
    if "match" not in raw:
        raise ctx.error("match", "missing", fix="use `match: {}` to match every failure")
    blocks = raw["match"] if isinstance(raw["match"], list) else [raw["match"]]
    if not blocks:
        raise ctx.error("match", "an empty list never matches", fix="use `match: {}` to match every failure")
    matches = tuple(_parse_match(block, i, ctx, tables or {}) for i, block in enumerate(blocks))
    cites = list(_str_list(raw, "cites", "rule", ctx) or [])
    for block in blocks:
        if isinstance(block, Mapping) and isinstance(block.get("table"), Mapping):
            table = (tables or {}).get(str(block["table"].get("name")))
            if table is not None and table.source not in cites:
                cites.append(table.source)
    return Rule(
        id=rule_id,
        category=_required_str(raw, "category", ctx),
        decision=decision,
        hint=_optional_str(raw, "hint", ctx, default="").strip(),
        matches=matches,
        source=str(path),
        cascade=_bool(raw, "cascade", ctx, False),
        exclude_node=_bool(raw, "exclude_node", ctx, False),
        counts_as_failure=_bool(raw, "counts_as_failure", ctx, decision is not Decision.COMPLETE),
        escalate=_parse_escalation(raw.get("escalate"), ctx),
        deterministic=_bool(raw, "deterministic", ctx, False),
        exhausts_retries=_bool(raw, "exhausts_retries", ctx, False),
        trust_exception_type=_bool(raw, "trust_exception_type", ctx, False),
        cites=tuple(cites),
        marks=_marks(raw, ctx),
    )


def _marks(raw: Mapping[str, Any], ctx: _Field) -> str | None:
    value = raw.get("marks")
    if value is not None and value not in MARKS:
        raise ctx.error("marks", f"{value!r} is not one of {', '.join(MARKS)}")
    return value


def _required_str(raw: Mapping[str, Any], key: str, ctx: _Field) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ctx.error(key, "missing" if value is None else f"expected a non-empty string, got {value!r}")
    return value.strip()


def _optional_str(raw: Mapping[str, Any], key: str, ctx: _Field, default: str) -> str:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ctx.error(key, f"expected a string, got {value!r}")
    return value


def _bool(raw: Mapping[str, Any], key: str, ctx: _Field, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ctx.error(key, f"expected true or false, got {value!r}")
    return value


def _parse_escalation(raw: Any, ctx: _Field) -> Escalation | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ctx.error("escalate", "expected a mapping like {after: 1, to: reschedule, scope: node}")
    unknown = sorted(set(map(str, raw)) - {"after", "to", "scope"})
    if unknown:
        raise ctx.error(f"escalate.{unknown[0]}", "unknown field (known: after, to, scope)")
    after = raw.get("after")
    if not isinstance(after, int) or isinstance(after, bool) or after < 0:
        raise ctx.error("escalate.after", f"expected a whole number >= 0, got {after!r}")
    to = raw.get("to")
    if to not in ("reschedule", "abort"):
        raise ctx.error("escalate.to", f"{to!r} is not one of reschedule, abort")
    scope = raw.get("scope", "job")
    if scope not in ESCALATION_SCOPES:
        raise ctx.error("escalate.scope", f"{scope!r} is not one of {', '.join(ESCALATION_SCOPES)}")
    return Escalation(after=after, to=Decision(to), scope=scope)


def _table_patterns(raw: Any, name: str, ctx: _Field, tables: Mapping[str, Table]) -> list[str]:
    """``table: {name: xid, classes: [drain-node]}`` -> the table's expanded patterns."""
    if raw is None:
        return []
    field = f"{name}.table"
    if not isinstance(raw, Mapping) or set(map(str, raw)) - {"name", "classes"}:
        raise ctx.error(field, "expected {name: TABLE, classes: [CLASS, ...]}")
    table = tables.get(str(raw.get("name")))
    if table is None:
        known = ", ".join(sorted(tables)) or "none in this file"
        raise ctx.error(field, f"no table {raw.get('name')!r} (tables: {known})")
    classes = _str_list(raw, "classes", field, ctx)
    if not classes:
        raise ctx.error(f"{field}.classes", "name at least one class")
    unknown = sorted(set(classes) - table.classes())
    if unknown:
        raise ctx.error(f"{field}.classes", f"table {table.name} has no class {unknown[0]!r}",
                        fix=f"its classes: {', '.join(sorted(table.classes()))}")
    return list(table.expand(frozenset(classes)))


def _parse_match(raw: Any, index: int, ctx: _Field, tables: Mapping[str, Table] | None = None) -> Match:
    name = "match" if index == 0 else f"match[{index}]"
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ctx.error(name, f"expected a mapping of conditions, got {type(raw).__name__}")
    unknown = sorted(set(map(str, raw)) - _MATCH_KEYS)
    if unknown:
        raise ctx.error(f"{name}.{unknown[0]}", "unknown condition", fix=f"known: {', '.join(sorted(_MATCH_KEYS))}")
    flags: dict[str, bool | None] = {}
    for key in _BOOL_MATCH_KEYS:
        value = raw.get(key)
        if value is not None and not isinstance(value, bool):
            raise ctx.error(f"{name}.{key}", f"expected true or false, got {value!r}")
        flags[key] = value
    patterns = list(_str_list(raw, "patterns", name, ctx) or ())
    patterns += _table_patterns(raw.get("table"), name, ctx, tables or {})
    return Match(
        exit_codes=_int_set(raw, "exit_codes", name, ctx),
        signals=_signal_set(raw, name, ctx),
        patterns=tuple(_compile(p, f"{name}.patterns[{i}]", ctx) for i, p in enumerate(patterns)),
        exception_types=_frozen(_str_list(raw, "exception_types", name, ctx)),
        tracker_status=_frozen(_str_list(raw, "tracker_status", name, ctx)),
        launcher=_frozen(_str_list(raw, "launcher", name, ctx)),
        **flags,
    )


def _frozen(values: Iterable[str] | None) -> frozenset[str] | None:
    return None if values is None else frozenset(values)


def _as_list(raw: Mapping[str, Any], key: str) -> list[Any] | None:
    if key not in raw or raw[key] is None:
        return None
    value = raw[key]
    return value if isinstance(value, list) else [value]


def _str_list(raw: Mapping[str, Any], key: str, name: str, ctx: _Field) -> list[str] | None:
    values = _as_list(raw, key)
    for value in values or ():
        if not isinstance(value, str) or not value:
            raise ctx.error(f"{name}.{key}", f"expected non-empty strings, got {value!r}")
    return values


def _int_set(raw: Mapping[str, Any], key: str, name: str, ctx: _Field) -> frozenset[int] | None:
    values = _as_list(raw, key)
    if values is None:
        return None
    for value in values:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ctx.error(f"{name}.{key}", f"{value!r} is not a whole number")
    return frozenset(values)


def parse_signal(value: int | str) -> int:
    """A signal number from 9, "9", "KILL" or "SIGKILL"; ValueError when unknown."""
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 < value < 128:
            return value
        raise ValueError(f"{value!r} is not a signal number (1-127)")
    text = str(value).strip().upper()
    if text.isdigit():
        return parse_signal(int(text))
    name = text if text.startswith("SIG") else "SIG" + text
    try:
        return int(_signal.Signals[name])
    except KeyError:
        raise ValueError(f"{value!r} is not a known signal name") from None


def _signal_set(raw: Mapping[str, Any], name: str, ctx: _Field) -> frozenset[int] | None:
    values = _as_list(raw, "signals")
    if values is None:
        return None
    numbers = set()
    for value in values:
        try:
            numbers.add(parse_signal(value))
        except ValueError as error:
            raise ctx.error(f"{name}.signals", str(error)) from None
    return frozenset(numbers)


def portable_pattern(pattern: str) -> str:
    """Rewrite leading global flags ``(?i)x`` as a scoped group ``(?i:x)`` so the
    pattern can sit inside the scanner's combined alternation."""
    found = _LEADING_FLAGS_RE.match(pattern)
    if not found:
        return pattern
    return f"(?{found.group(1)}:{pattern[found.end():]})"


def _compile(pattern: str, field: str, ctx: _Field) -> re.Pattern[str]:
    # A control character in a pattern is a YAML escape taken by mistake: in a
    # double-quoted scalar "\b" is a backspace, not a word boundary, and the rule then
    # silently never matches. A tab is a character log lines do hold, so it stays.
    control = next((c for c in pattern if (ord(c) < 32 and c != "\t") or ord(c) == 127), None)
    if control is not None:
        raise ctx.error(field, f"regex {pattern!r} contains the control character {control!r}",
                        fix="write regexes in single quotes in YAML ('\\b...'); in double "
                            "quotes \\b is a backspace")
    try:
        compiled = re.compile(portable_pattern(pattern))
        re.compile(f"(?:{compiled.pattern})|(?:x)")  # must also work inside the prefilter
    except re.error as error:
        raise ctx.error(field, f"invalid regex {pattern!r}: {error}") from None
    if compiled.search(""):
        raise ctx.error(field, f"regex {pattern!r} matches the empty line, so it matches every line")
    if ctx.path == CATALOGUE_PATH:
        return compiled
    try:  # a user's pattern: linear-time engine, or refused (wrapper/regex_engine.py)
        return user_pattern(compiled)  # type: ignore[return-value]
    except UnsafePattern as why:
        raise ctx.error(field, f"regex {pattern!r} can take exponential time on a log line: "
                        f"{why} (and RE2 cannot run it)",
                        fix="rewrite it without that shape, or pip install google-re2") from None
