"""A store written by resched before packs existed (manifest format resched-checkpoint/1).

``tests/fixtures/store-v1/`` was written by :func:`write_fixture` running the code of
commit 7cc4d1c (every file its own blob, no packs); it is committed as files so that
every later version is tested against bytes an older resched really wrote. Do not
regenerate it with newer code: that would test the new format against itself.

    python tests/store_v1_fixture.py tests/fixtures/store-v1     # (at 7cc4d1c only)
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "store-v1"
STEPS = (1, 2)


def expected_tree(step: int) -> dict[str, bytes]:
    """The files of checkpoint ``step``: 24 small files (some shared between the steps,
    two with the same content), one larger file, a nested folder."""
    files = {f"shards/s{i:02d}.bin": f"step {step if i % 3 else 0} shard {i}\n".encode() * (i + 1)
             for i in range(24)}
    files["same-a.txt"] = files["same-b.txt"] = b"identical content\n"
    files["model/weights.bin"] = bytes(range(256)) * (16 * step)
    files[f"only{step}/deep/extra.json"] = f'{{"step": {step}}}'.encode()
    return files


def write_fixture(target: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from wrapper.checkpoint import CheckpointStore, mark_complete

    work = Path(tempfile.mkdtemp(prefix="resched-v1-fixture-"))
    try:
        store = CheckpointStore(f"file://{target.resolve()}", retention=3, hash_cache=False)
        for step in STEPS:
            source = work / f"v{step}"
            for relpath, data in expected_tree(step).items():
                (source / relpath).parent.mkdir(parents=True, exist_ok=True)
                (source / relpath).write_bytes(data)
            mark_complete(source, step)
            store.publish(source)
        (target / ".lock").unlink(missing_ok=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    write_fixture(Path(sys.argv[1]))
