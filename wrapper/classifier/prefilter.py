"""The scanner's prefilter: reject an ordinary log line with as little work as possible.

Joining every rule regex into one alternation is correct but slow in Python's regex
engine (it tries each branch at each position: ~2 MB/s on the catalogue). Instead,
every pattern is reduced to literal text it cannot match without (found by walking
the parsed regex: a literal run in a sequence, one literal per branch of an
alternation, the body of a repeat that occurs at least once). Those literals are cut
to an *anchor* that starts with an upper-case letter or ``_`` when they have one, and
the anchors are compiled into one trie-shaped regex: its first-character set is small
and mostly rare, so the engine's C loop skips most positions without trying a
branch. Literals without such an anchor are searched with ``str.find``. A pattern with
no usable literal goes into the regex whole, so the prefilter never misses a line
that a rule would match (it is sound; candidates are then checked rule by rule).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

try:  # Python >= 3.11
    from re import _constants as sre_c  # type: ignore[attr-defined]
    from re import _parser as sre_parse  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre_c  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

from wrapper.regex_engine import compile_alternation

_MIN_LITERAL = 3
_ANCHOR_LEN = 12
Literal = tuple[str, bool]  # text, case-insensitive


def _best(current: tuple[Literal, ...] | None, candidate: tuple[Literal, ...] | None) -> tuple[Literal, ...] | None:
    if not candidate or min(len(text) for text, _ in candidate) < _MIN_LITERAL:
        return current
    if current is None:
        return candidate

    def score(options: tuple[Literal, ...]) -> tuple[bool, int, int]:
        # literals with an upper-case anchor go into the fast regex: prefer them
        return (all(anchor(t) for t, _ in options), min(len(t) for t, _ in options), -len(options))

    return candidate if score(candidate) > score(current) else current


def _literals(items: Iterable[tuple[Any, Any]], ignore_case: bool) -> tuple[Literal, ...] | None:
    """Literal alternatives of which one must occur wherever ``items`` matches."""
    best: tuple[Literal, ...] | None = None
    run: list[str] = []
    for op, value in items:
        if op is sre_c.LITERAL:
            run.append(chr(value))
            continue
        if run:
            best = _best(best, (("".join(run), ignore_case),))
            run = []
        if op is sre_c.SUBPATTERN:
            _group, add_flags, _del_flags, body = value
            best = _best(best, _literals(body, ignore_case or bool(add_flags & sre_c.SRE_FLAG_IGNORECASE)))
        elif op is sre_c.BRANCH:
            branches = [_literals(branch, ignore_case) for branch in value[1]]
            if all(branches):
                best = _best(best, tuple(lit for branch in branches for lit in branch or ()))
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
            minimum, _maximum, body = value
            if minimum >= 1:
                best = _best(best, _literals(body, ignore_case))
    if run:
        best = _best(best, (("".join(run), ignore_case),))
    return best


def required_literals(pattern: re.Pattern[str]) -> tuple[Literal, ...] | None:
    """Literals of which at least one occurs in every match; None when none is known."""
    return _required_literals(pattern.pattern, pattern.flags)


# Every scanner builds its prefilter from the same ~900 catalogue patterns; parsing them
# was most of the cost of classifying a short log. A pure function of the text and flags.
@functools.lru_cache(maxsize=16384)
def _required_literals(text: str, flags: int) -> tuple[Literal, ...] | None:
    try:
        parsed = sre_parse.parse(text, flags)
    except Exception:  # noqa: BLE001 - an unparsable pattern simply gets no literal
        return None
    return _literals(parsed, bool(flags & re.IGNORECASE))


def anchor(text: str) -> str | None:
    """The longest slice (3 to 12 chars) that starts with an upper-case letter or _."""
    best = None
    for i, char in enumerate(text):
        if char.isupper() or char == "_":
            piece = text[i:i + _ANCHOR_LEN]
            if len(piece) >= 3 and (best is None or len(piece) > len(best)):
                best = piece
    return best


def trie_regex(words: Sequence[str]) -> str:
    """One regex matching any of ``words``, shaped as a trie (shared prefixes once)."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        if list(node) == [""]:
            return ""
        branches = [re.escape(char) + build(child) for char, child in sorted(node.items()) if char]
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


class Prefilter:
    def __init__(self, patterns: Sequence[re.Pattern[str]]) -> None:
        anchors: list[str] = []
        finds: list[str] = []
        whole: list[str] = []
        for pattern in patterns:
            literals = required_literals(pattern)
            if literals is None:
                whole.append(pattern.pattern)
                continue
            for text, ignore_case in literals:
                if ignore_case:
                    whole.append(f"(?i:{re.escape(text)})")
                elif anchor(text):
                    anchors.append(anchor(text) or text)
                else:
                    finds.append(text)
        wholes = [f"(?:{p})" for p in dict.fromkeys(whole)]
        parts = ([trie_regex(list(dict.fromkeys(anchors)))] if anchors else []) + wholes
        # user patterns among ``whole`` may only be safe on RE2 (wrapper/regex_engine.py)
        self.regex = compile_alternation(parts, re.MULTILINE) if parts else None
        # a literal that contains another one is redundant
        unique = sorted(dict.fromkeys(finds), key=len)
        self.finds = tuple(t for i, t in enumerate(unique) if not any(s in t for s in unique[:i]))
        self._search = self.regex.search if self.regex is not None else None

    def may_match(self, line: str) -> bool:
        # measured: the anchor regex plus a few `in` tests beats one regex holding the
        # lower-case literals too (they spoil the regex's first-character skip)
        if self._search is not None and self._search(line) is not None:
            return True
        for literal in self.finds:
            if literal in line:
                return True
        return False

    def candidates(self, text: str) -> Iterator[int]:
        """Positions (unordered, maybe repeated) in ``text`` where a rule may match."""
        if self.regex is not None:
            for found in self.regex.finditer(text):
                yield found.start()
        for literal in self.finds:
            position = text.find(literal)
            while position >= 0:
                yield position
                position = text.find(literal, position + 1)


# ---- the multi-pattern engine: Hyperscan, when its wheel is installed -----------------------
#
# Measured (benchmarks/classify_bench.py, same run): the literal-anchor regex above scans
# ~70 MB/s; Hyperscan scans the same text at ~2 GB/s, so a chunk's cost becomes the
# ANSI strip and the UTF-8 check. RE2 (google-re2) was ~4x slower than Hyperscan here,
# cannot compile lookaheads at all, and logs to stderr when a pattern fails.
#
# Hyperscan only *proposes* lines: every pattern is compiled in prefilter mode (a
# superset of its matches; lookarounds are relaxed, never dropped), and each proposed
# line is then checked rule by rule with Python's `re`, exactly as before. So the rule
# that matched, its evidence and its line numbers cannot change; what has to hold is
# that no line a rule matches goes unproposed. Where Hyperscan's byte semantics differ
# from Python's str semantics, the pure-`re` prefilter above takes over:
# - lines with non-ASCII characters (Python's `.`, `\w`, `\s`, case folding are
#   Unicode-aware) or the ASCII controls that Python's `\s` counts as space;
# - patterns Hyperscan cannot compile (Python-only syntax), VERBOSE patterns, and
#   non-ASCII patterns.
# Python matches a pattern against one line with trailing "\r" stripped; Hyperscan sees
# the block, so `\A` becomes `^` and `$` / `\Z` become `\r*$`, both in multi-line mode.

try:  # optional: `pip install resched[fast]`; without it the pure-`re` prefilter is used
    import hyperscan as _hs
except ImportError:  # pragma: no cover - exercised by forcing ENGINE_ENV=re in tests
    _hs = None

import contextlib
import hashlib
import json
import os
import platform
import threading
from pathlib import Path

from wrapper.cache_dir import cache_dir

ENGINE_ENV = "RESCHED_PREFILTER"  # "re" forces the pure-`re` prefilter (tests, debugging)
# Python's \s also matches \x0b, \x0c and \x1c-\x1f; Hyperscan's does not match \x1c-\x1f
_ODD_CHAR = re.compile(r"[^\x00-\x0a\x0d-\x1b\x20-\x7f]")
_ODD_ASCII_HS = rb"[\x0b\x0c\x1c-\x1f]"
_ODD_ID = 2**31 - 1
_DB_CACHE: dict[tuple[tuple[str, int], ...], tuple[Any, tuple[int, ...]]] = {}
_DB_LOCK = threading.Lock()


def block_form(pattern: str) -> str:
    """The pattern as Hyperscan must see it to match per line inside a block of lines."""
    out: list[str] = []
    i, in_class, class_body = 0, False, -1
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            escape = pattern[i:i + 2]
            if not in_class and escape == "\\A":
                out.append("^")
            elif not in_class and escape == "\\Z":
                out.append("(?:\\r*$)")
            else:
                out.append(escape)
            i += 2
            continue
        if in_class:
            out.append(char)
            in_class = char != "]" or i == class_body
            i += 1
            continue
        if char == "[":
            # a "]" right after "[" or "[^" is a literal, not the end of the class
            class_body = i + 2 if pattern[i + 1:i + 2] == "^" else i + 1
            in_class = True
            out.append(char)
        elif char == "$":
            out.append("(?:\\r*$)")
        else:
            out.append(char)
        i += 1
    return "".join(out)


def _hyperscan_safe(pattern: re.Pattern[str]) -> bool:
    """Whether Hyperscan, on the ASCII lines it is trusted with, proposes every match."""
    # a non-ASCII pattern (written out or as \\u / \\x / \\N escapes) can match ASCII
    # text under case folding, scoped or not (Kelvin sign vs "k"); they are rare, so
    # they all stay with `re`, as do VERBOSE patterns
    if pattern.flags & re.VERBOSE or not pattern.pattern.isascii():
        return False
    try:
        parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    except Exception:  # noqa: BLE001 - it compiled once; never trust what we cannot read
        return False
    return not _has_non_ascii(parsed)


def _has_non_ascii(node: Any) -> bool:
    if isinstance(node, sre_parse.SubPattern):
        node = node.data
    if isinstance(node, (list, tuple)):
        if len(node) == 2 and node[0] in (sre_c.LITERAL, sre_c.NOT_LITERAL):
            return isinstance(node[1], int) and node[1] > 0x7F
        if len(node) == 2 and node[0] is sre_c.RANGE:
            return node[1][1] > 0x7F
        return any(_has_non_ascii(item) for item in node)
    return False


def _hs_flags(pattern: re.Pattern[str]) -> int:
    assert _hs is not None
    flags = _hs.HS_FLAG_PREFILTER | _hs.HS_FLAG_MULTILINE | _hs.HS_FLAG_ALLOWEMPTY
    if pattern.flags & re.IGNORECASE:
        flags |= _hs.HS_FLAG_CASELESS
    if pattern.flags & re.DOTALL:
        flags |= _hs.HS_FLAG_DOTALL
    return flags


def _compile(patterns: Sequence[re.Pattern[str]]) -> tuple[Any, tuple[int, ...]]:
    """One Hyperscan database for the patterns it can take; returns (db, their indexes).
    Compiling the catalogue's takes a second of CPU; every process that scans (each
    ``resched wrap``, ``resched classify``) needed it, so the compiled database is also
    kept on disk (``_stored``), keyed by the patterns and the Hyperscan version."""
    assert _hs is not None
    key = tuple((p.pattern, p.flags) for p in patterns)
    with _DB_LOCK:
        if key in _DB_CACHE:
            return _DB_CACHE[key]
    stored = _load_stored(key)
    if stored is not None:
        with _DB_LOCK:
            _DB_CACHE[key] = stored
        return stored
    result = _build(patterns)
    _store(key, result)
    with _DB_LOCK:
        _DB_CACHE[key] = result
    return result


def _build(patterns: Sequence[re.Pattern[str]]) -> tuple[Any, tuple[int, ...]]:
    assert _hs is not None
    chosen = [i for i, p in enumerate(patterns) if _hyperscan_safe(p)]

    def build(indexes: list[int]) -> Any:
        # one more expression, id -1: the ASCII characters on which Python's \\s and
        # Hyperscan's disagree, so the lines holding them go to `re`
        db = _hs.Database(mode=_hs.HS_MODE_BLOCK)
        db.compile(expressions=[block_form(patterns[i].pattern).encode() for i in indexes] + [_ODD_ASCII_HS],
                   ids=indexes + [_ODD_ID], elements=len(indexes) + 1,
                   flags=[_hs_flags(patterns[i]) for i in indexes] + [0])
        return db

    db = None
    if chosen:
        try:
            db = build(chosen)
        except _hs.error:
            # find the patterns it rejects (rare: Python-only syntax); the rest still go fast
            chosen = _accepted(build, chosen)
            db = build(chosen) if chosen else None
    return (db, tuple(chosen) if db is not None else ())


# The stored database: a magic line, a JSON header (the indexes of the patterns it holds,
# the sha256 of the serialized database), the database. Anything that does not check out
# (another version, a torn write, a foreign file) is ignored and compiled again.
_STORE_MAGIC = b"resched-prefilter-db 1\n"


def _store_path(key: tuple[tuple[str, int], ...]) -> Path:
    digest = hashlib.sha256(repr((_platform(), _ODD_ASCII_HS, key)).encode()).hexdigest()[:32]
    return cache_dir() / "prefilter" / f"hs-{digest}.db"


@functools.lru_cache(maxsize=1)
def _platform() -> str:
    """What a compiled database is tied to: the Hyperscan version and the CPU it was
    compiled for (Hyperscan refuses a database of another CPU's features), so one cache
    dir shared by different nodes (an NFS home) keeps one database per kind of node."""
    flags = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
        flags = next((line for line in cpuinfo if line.startswith("flags")), "")
    return "/".join((str(getattr(_hs, "__version__", "")), str(getattr(_hs, "HS_VERSION", "")),
                     platform.machine(), hashlib.sha256(flags.encode()).hexdigest()[:16]))


def _ours(folder: Path) -> bool:
    """resched makes its ``prefilter`` folder itself: one that is a link was made by
    someone else, and nothing is read from or written through it."""
    return not folder.is_symlink()


def _load_stored(key: tuple[tuple[str, int], ...]) -> tuple[Any, tuple[int, ...]] | None:
    assert _hs is not None
    path = _store_path(key)
    if not _ours(path.parent):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if handle.readline() != _STORE_MAGIC:
                return None
            header = json.loads(handle.readline())
            blob = handle.read()
        if not isinstance(header, dict) or hashlib.sha256(blob).hexdigest() != header.get("sha256"):
            return None
        chosen = tuple(int(i) for i in header["chosen"])
        if any(not 0 <= i < len(key) for i in chosen):
            return None
        db = _hs.loadb(blob, _hs.HS_MODE_BLOCK) if blob else None
    except (OSError, ValueError, KeyError, TypeError, _hs.error):
        return None
    return (db, chosen) if db is not None else (None, ())


_STORE_NAME = re.compile(r"hs-[0-9a-f]{32}\.db")
_STORE_KEEP = 8  # databases of other catalogue versions kept (a rule file edited, a venv)


def _prune(folder: Path, keep: Path) -> None:
    """Drop the oldest stored databases beyond ``_STORE_KEEP``: only regular files with
    the names resched gives them (never a link, never another file in the folder)."""
    stored = []
    for entry in os.scandir(folder):
        if _STORE_NAME.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            stored.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.path))
    for _mtime, old in sorted(stored, reverse=True)[_STORE_KEEP:]:
        if old != str(keep):
            with contextlib.suppress(OSError):
                os.unlink(old)


def _store(key: tuple[tuple[str, int], ...], result: tuple[Any, tuple[int, ...]]) -> None:
    """Best effort: a cache that cannot be written only costs a compile next time. The
    file is written under a name of its own (O_EXCL) and renamed into place."""
    assert _hs is not None
    db, chosen = result
    path = _store_path(key)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    created = False
    try:
        blob = _hs.dumpb(db) if db is not None else b""
        path.parent.mkdir(parents=True, exist_ok=True)
        if not _ours(path.parent):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        created = True
        with os.fdopen(fd, "wb") as handle:
            handle.write(_STORE_MAGIC)
            handle.write(json.dumps({"chosen": list(chosen),
                                     "sha256": hashlib.sha256(blob).hexdigest()}).encode() + b"\n")
            handle.write(blob)
        os.replace(tmp, path)
        _prune(path.parent, keep=path)
    except (OSError, _hs.error):
        if created:  # only the file this call made; a name taken by another is left alone
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _accepted(build: Any, indexes: list[int]) -> list[int]:
    """The patterns of ``indexes`` that Hyperscan compiles, found by halving: a half that
    compiles is kept whole, one that does not is halved again. A few rejected patterns
    among hundreds cost a few dozen compiles of shrinking sets, not one compile per
    pattern (the catalogue with tests/test_prefilter_engines.py's hostile rules: 7.8 s
    with one compile per pattern, 6.4 s halving; the full set's compile dominates)."""
    assert _hs is not None
    try:
        build(indexes)
    except _hs.error:
        if len(indexes) == 1:
            return []
        middle = len(indexes) // 2
        return _accepted(build, indexes[:middle]) + _accepted(build, indexes[middle:])
    return indexes


class HyperscanPrefilter:
    """Same contract as :class:`Prefilter` (sound candidates), Hyperscan underneath.

    One instance per scanner: the compiled database is shared between instances, the
    scratch space is not (Hyperscan forbids two scans on one scratch at once).
    """

    def __init__(self, patterns: Sequence[re.Pattern[str]], db: Any, fast: tuple[int, ...]) -> None:
        assert _hs is not None
        self._db = db
        self._scratch = _hs.Scratch(db)
        fast_set = set(fast)
        rest = [p for i, p in enumerate(patterns) if i not in fast_set]
        # lines Hyperscan is not trusted with are checked against every pattern
        self._all = Prefilter(patterns)
        self._rest = Prefilter(rest) if rest else None
        self.re_patterns = tuple(rest)  # what Hyperscan could not be trusted with

    def may_match(self, line: str) -> bool:
        # one line is a block of one: the same sound candidates, Hyperscan first. (The
        # pure-`re` check alone crawls when a catalogue pattern's only literal is a
        # common case-insensitive word such as "loss".)
        return next(self.candidates(line), None) is not None

    def candidates(self, text: str) -> Iterator[int]:
        """Positions (unordered, maybe repeated) in ``text`` where a rule may match."""
        # 'replace' keeps one byte per character, so byte offsets are str offsets
        plain = text.isascii()
        data = text.encode("ascii") if plain else text.encode("ascii", "replace")
        ends: list[int] = []
        self._db.scan(data, match_event_handler=_collect_end, context=ends, scratch=self._scratch)
        odd = not plain
        for end in ends:
            if end < 0:  # an odd ASCII character (see _collect_end)
                odd = True
                continue
            # the match's last character is at end-1 (or it was empty, at end)
            if end:
                yield end - 1
            yield end
        if self._rest is not None:
            yield from self._rest.candidates(text)
        if odd:
            yield from self._odd_line_candidates(text)

    def _odd_line_candidates(self, text: str) -> Iterator[int]:
        found = _ODD_CHAR.search(text)
        while found is not None:
            start = text.rfind("\n", 0, found.start()) + 1
            end = text.find("\n", found.end())
            end = len(text) if end < 0 else end
            if self._all.may_match(text[start:end]):
                yield start
            found = _ODD_CHAR.search(text, end)


def _collect_end(pattern_id: int, _start: int, end: int, _flags: int, ends: list[int]) -> None:
    ends.append(-1 if pattern_id == _ODD_ID else end)


def make_prefilter(patterns: Sequence[re.Pattern[str]]) -> Prefilter | HyperscanPrefilter:
    """The fastest sound prefilter available here (Hyperscan when installed)."""
    if _hs is None or os.environ.get(ENGINE_ENV, "").lower() == "re" or not patterns:
        return Prefilter(patterns)
    db, fast = _compile(patterns)
    if db is None:
        return Prefilter(patterns)
    return HyperscanPrefilter(patterns, db, fast)
