"""The compiled Hyperscan database kept on disk (wrapper/classifier/prefilter.py `_store`):
a later process loads it instead of compiling; anything that does not check out is
ignored and compiled again; nothing outside resched's cache is read or replaced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("hyperscan")

from wrapper.classifier import prefilter
from wrapper.classifier.rules import RuleSet, load_rules
from wrapper.classifier.scanner import LineScanner

LOG = ("step 10 loss 2.0\n"
       "torch.distributed.DistBackendError: NCCL error in: ../ProcessGroupNCCL.cpp:1970, unhandled system error\n"
       "RuntimeError: CUDA error: an illegal memory access was encountered\n"
       "[rank3]: KeyError: 'lr'\n")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RESCHED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(prefilter, "_DB_CACHE", {})  # as a new process starts
    return tmp_path / "cache"


# The rules the store's mechanics are tested with: the few that LOG's lines need. A
# compile of the whole catalogue takes seconds of CPU, and what is stored, checked, healed
# or refused does not depend on the database's size; one test (the first) stores and
# loads the whole catalogue's database.
_FEW = ("nccl-error", "dist-error", "cuda-illegal-memory-access", "python-user-error")


def few_rules() -> RuleSet:
    full = load_rules()
    rules = tuple(rule for rule in full.rules if rule.id in _FEW)
    assert len(rules) == len(_FEW)
    return RuleSet(rules=rules, sources=full.sources, tables=full.tables)


def _hits(monkeypatch: pytest.MonkeyPatch, rules: RuleSet | None = None) -> list[tuple[str, int]]:
    monkeypatch.setattr(prefilter, "_DB_CACHE", {})
    scanner = LineScanner(few_rules() if rules is None else rules)
    scanner.feed_text(LOG)
    return [(h.rule_id, h.lineno) for h in scanner.hits]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes, list[tuple[str, int]]]:
    """One compile of the test's rules, stored: (file name, its bytes, the hits it gave).
    The tests that damage or replace a stored database start from a copy of it (each of
    them still compiles once, to heal)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RESCHED_CACHE_DIR", str(tmp_path_factory.mktemp("compiled") / "cache"))
        hits = _hits(patch)
        [stored] = (Path(os.environ["RESCHED_CACHE_DIR"]) / "prefilter").glob("hs-*.db")
        return stored.name, stored.read_bytes(), hits


def _seeded(cache: Path, compiled: tuple[str, bytes, list[tuple[str, int]]]) -> Path:
    """The stored database, as a previous process left it in this test's cache."""
    name, data, _ = compiled
    (cache / "prefilter").mkdir(parents=True)
    stored = cache / "prefilter" / name
    stored.write_bytes(data)
    return stored


def _key() -> tuple[tuple[str, int], ...]:
    """The patterns the scanner compiled (the one database of the last _hits)."""
    [key] = prefilter._DB_CACHE
    return key


def test_a_stored_database_is_loaded_and_finds_the_same_lines(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalogue = load_rules()  # the whole catalogue's database, as every run stores it
    first = _hits(monkeypatch, catalogue)  # compiles and stores
    [stored] = (cache / "prefilter").glob("hs-*.db")
    key = _key()
    loaded = prefilter._load_stored(key)
    assert loaded is not None and loaded[1] == prefilter._DB_CACHE[key][1]
    compiles = []
    monkeypatch.setattr(prefilter, "_build", lambda patterns: compiles.append(1))
    assert _hits(monkeypatch, catalogue) == first and len(first) >= 4  # stored database, no compile
    assert not compiles
    assert not [p for p in stored.parent.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign"])
def test_a_damaged_store_is_ignored_and_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str,
                                               compiled: tuple[str, bytes, list[tuple[str, int]]]) -> None:
    stored, first = _seeded(cache, compiled), compiled[2]
    builds: list[int] = []
    build = prefilter._build
    monkeypatch.setattr(prefilter, "_build", lambda patterns: builds.append(1) or build(patterns))
    assert _hits(monkeypatch) == first and not builds  # loaded: the seeded database is whole
    data = bytearray(stored.read_bytes())
    if damage == "flip":
        data[-100] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data = bytearray(b"not a database\n")
    stored.write_bytes(bytes(data))
    key = _key()
    assert prefilter._load_stored(key) is None
    assert _hits(monkeypatch) == first and builds == [1]  # compiled again, and stored again whole
    assert prefilter._load_stored(key) is not None


def test_a_link_in_place_of_the_store_is_not_followed(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      compiled: tuple[str, bytes, list[tuple[str, int]]]) -> None:
    stored, first = _seeded(cache, compiled), compiled[2]
    assert _hits(monkeypatch) == first
    elsewhere = tmp_path / "someone-elses-file"
    elsewhere.write_bytes(stored.read_bytes())
    stored.unlink()
    stored.symlink_to(elsewhere)
    key = _key()
    assert prefilter._load_stored(key) is None  # O_NOFOLLOW: never read through a link
    before = elsewhere.read_bytes()
    assert _hits(monkeypatch) == first
    assert elsewhere.read_bytes() == before  # the link's target is never written


def test_an_unwritable_cache_only_costs_a_compile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RESCHED_CACHE_DIR", str(blocker / "cache"))  # a path under a file
    assert _hits(monkeypatch)
    assert blocker.read_text() == "" and not os.path.isdir(blocker)


def test_old_databases_are_pruned_and_nothing_else_is_touched(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = cache / "prefilter"
    folder.mkdir(parents=True)
    olds = []
    for i in range(12):  # databases of twelve older catalogue versions
        old = folder / f"hs-{i:032x}.db"
        old.write_bytes(b"old")
        os.utime(old, ns=(i * 10**9, i * 10**9))
        olds.append(old)
    mine = folder / "notes.txt"
    mine.write_text("not resched's")
    link = folder / f"hs-{99:032x}.db"
    link.symlink_to(mine)
    _hits(monkeypatch)  # stores the current one, then prunes
    kept = sorted(p.name for p in folder.glob("hs-*.db") if not p.is_symlink())
    assert len(kept) == prefilter._STORE_KEEP
    assert olds[-1].exists() and not olds[0].exists()  # the oldest went first
    assert mine.read_text() == "not resched's" and link.is_symlink()


def test_a_linked_prefilter_folder_is_neither_read_nor_written(cache: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    elsewhere = tmp_path / "someone-elses-folder"
    elsewhere.mkdir()
    cache.mkdir()
    (cache / "prefilter").symlink_to(elsewhere)
    assert _hits(monkeypatch)  # compiled in memory, as without a cache
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
