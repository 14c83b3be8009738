"""Hypothesis: random trees round-trip byte-exactly through file:// and memory:// stores."""

from __future__ import annotations

import random
import tempfile
import uuid
from pathlib import Path

from checkpoint_fixtures import checkpoint_cache_dir, read_tree, write_tree  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wrapper.checkpoint import CheckpointStore

_NAME = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/\\\x00"),
    min_size=1, max_size=12,
).filter(lambda n: n not in (".", "..") and ".resched-tmp-" not in n
         and len(n.encode()) <= 200 and n != "resched-complete.json")
_PATH = st.lists(_NAME, min_size=1, max_size=6).map(tuple)
# Large contents come from a seed, which keeps hypothesis' generated data small.
_CONTENT = st.one_of(st.just(b""), st.binary(max_size=300),
                     st.integers(0, 2**32).map(lambda seed: random.Random(seed).randbytes(70000)))


@st.composite
def trees(draw: st.DrawFn) -> dict[str, bytes]:
    paths = draw(st.lists(_PATH, min_size=1, max_size=8, unique=True))
    chosen: list[tuple[str, ...]] = []
    for path in paths:  # no file may also be a directory of another file
        if any(path[: len(other)] == other or other[: len(path)] == path for other in chosen):
            continue
        chosen.append(path)
    return {"/".join(path): draw(_CONTENT) for path in chosen}


def _round_trip(tree: dict[str, bytes], url_for: callable) -> None:  # type: ignore[valid-type]
    with tempfile.TemporaryDirectory() as scratch:
        src, out = Path(scratch) / "src", Path(scratch) / "out"
        src.mkdir()
        write_tree(src, tree)
        store = CheckpointStore(url_for(Path(scratch)))
        published = store.publish(src, step=1)
        assert published.files == len(tree)
        restored = store.restore(out)
        assert restored is not None and restored.files == len(tree)
        assert read_tree(out, with_marker=True) == tree
        assert store.verify().all_ok


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_random_trees_round_trip_on_file_store(tree: dict[str, bytes]) -> None:
    _round_trip(tree, lambda scratch: f"file://{scratch}/store")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_random_trees_round_trip_on_memory_store(tree: dict[str, bytes]) -> None:
    _round_trip(tree, lambda scratch: f"memory://ck-{uuid.uuid4().hex}/store")
