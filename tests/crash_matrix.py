"""Crash a real publish / restore / start-up restore at a named step, then check the store.

One scenario = (protocol step, signal, backend). A child process runs the real code with
``RESCHED_CRASHPOINT=<step>:<signal>``; afterwards the parent checks the invariants of
docs/checkpoint.md ("Crash consistency, step by step"):

- `latest` restores (no fall-back) and is byte-identical to a published version;
- every committed checkpoint verifies; nothing foreign changed (a file of ours beside the
  store's, the source directory, a user's file in the restore target);
- a restore target holds the old or the new tree (journaled: or a journal to finish);
- the next run heals: a restore gives the new tree with no staging leftover, a publish
  leaves no torn manifest, orphan blob or temp file.

``run_scenario`` returns what it saw (a row of the matrix); a violated invariant raises
AssertionError. ``python tests/crash_matrix.py [file|s3]`` prints the whole matrix.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from wrapper.checkpoint import CheckpointStore, mark_complete  # noqa: E402
from wrapper.checkpoint.crashpoint import STEPS  # noqa: E402
from wrapper.checkpoint.packs import PACK_MIN_FILES, PACKED_MAX  # noqa: E402

PUBLISH_STEPS = tuple(s for s in STEPS if s.split(".")[0] in ("publish", "commit", "gc"))
RESTORE_STEPS = tuple(s for s in STEPS if s.startswith("restore."))
SIGNALS = ("SIGKILL", "SIGINT")
# restore variants: an empty target (one rename), --force over files (RENAME_EXCHANGE),
# the journaled roll-forward (forced, as on a mount point), the wrapper's start-up
VARIANTS = ("empty", "force", "journaled", "startup")
# publish variants: a marked directory; a Megatron layout whose tracker is rewritten in
# place during the upload (its bytes as judged at the scan are published: pinned)
PUBLISH_VARIANTS = ("publish", "pointer")

CHILD = r"""
import json, os, sys
from pathlib import Path
sys.path.insert(0, os.environ["REPO"])
action, url, path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
options = json.loads(os.environ.get("CK_OPTIONS") or "null")
from wrapper.checkpoint import CheckpointStore
store = CheckpointStore(url, retention=2, storage_options=options)
if action == "publish":
    print(store.publish(path).checkpoint_id)
elif action == "pointer":
    # a Megatron layout published by its layout; the training saves again during the
    # upload (tracker rewritten in place): the tracker's bytes pinned at the scan go up
    import threading
    from tests.pointer_fixtures import save_megatron
    once = threading.Lock()
    def next_save(_size):
        if once.acquire(blocking=False):
            save_megatron(path, 4, size=700)
    print(store.publish(path, layouts=True, progress=next_save).checkpoint_id)
elif action == "startup":
    import wrapper.checkpoint.store as store_module
    from wrapper.wrap_checkpoint import CheckpointSession
    real = store_module.CheckpointStore
    store_module.CheckpointStore = lambda url: real(url, storage_options=options)
    print(CheckpointSession(url, path, None).restore())
else:
    if action == "journaled":
        import wrapper.checkpoint.restore_swap as swap
        swap._can_swap_whole = lambda target: False
    print(store.restore(path, allow_nonempty=True).checkpoint_id)
"""


@dataclass(frozen=True)
class Row:
    backend: str
    step: str
    signal: str
    variant: str
    fired: bool  # the child died at the step (False: the step is not on this run's path)
    state_after: str  # what the crash left: "old", "new", "journal" (restore), ...
    healed: bool
    losses: int


def _version(root: Path, step: int) -> dict[str, bytes]:
    files = {f"shard{i}.bin": f"step {step} shard {i} ".encode() + os.urandom(3000)
             for i in range(6)}
    # one file over PACKED_MAX (its own blob: publish.after_blob) beside small files
    # packed together (publish.after_pack), some of them the same in every version
    files["shard0.bin"] += os.urandom(PACKED_MAX)
    files.update({f"small/s{i:02d}.json": f'{{"step": {step if i % 2 else 0}, "i": {i}}}'.encode()
                  for i in range(PACK_MIN_FILES)})
    files["common.bin"] = b"shared by every version" * 50
    files[f"only{step}/extra.bin"] = os.urandom(700)
    for relpath, data in files.items():
        (root / relpath).parent.mkdir(parents=True, exist_ok=True)
        (root / relpath).write_bytes(data)
    mark_complete(root, step)
    return files


def _pointer_version(root: Path, step: int) -> dict[str, bytes]:
    """A Megatron-LM layout (iter_N/ + tracker, no marker): two shards over PACKED_MAX
    (single blobs) and PACK_MIN_FILES small files beside them (a pack)."""
    from tests.pointer_fixtures import save_megatron

    for i in range(PACK_MIN_FILES):
        path = root / "small" / f"s{i:02d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f'{{"step": {step if i % 2 else 0}, "i": {i}}}'.encode())
    save_megatron(root, step, size=PACKED_MAX + 1 + step)
    return _tree(root)


def _tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != "resched-complete.json"
            and ".resched-restore-" not in p.relative_to(root).as_posix()}


def _leftovers(target: Path) -> list[str]:
    near = [p.name for p in target.parent.iterdir() if ".resched-restore-" in p.name]
    inside = [p.name for p in target.iterdir() if ".resched-restore-" in p.name] \
        if target.is_dir() else []
    return near + inside


def _child(action: str, url: str, path: Path, env: dict[str, str], crash: str | None
           ) -> subprocess.CompletedProcess[str]:
    child_env = {**env, "REPO": str(REPO), "PYTHONPATH": str(REPO)}
    child_env.pop("RESCHED_CRASHPOINT", None)
    if crash:
        child_env["RESCHED_CRASHPOINT"] = crash
    return subprocess.run([sys.executable, "-c", CHILD, action, url, str(path)], env=child_env,
                          capture_output=True, text=True, timeout=120)


def _fired(done: subprocess.CompletedProcess[str], sig: str) -> bool:
    if sig == "SIGKILL":
        return done.returncode == -signal.SIGKILL
    return done.returncode != 0 and "KeyboardInterrupt" in done.stderr


def run_scenario(work: Path, backend: str, url: str, step: str, sig: str, variant: str,
                 env: dict[str, str], options: dict[str, Any] | None) -> Row:
    store = CheckpointStore(url, retention=2, storage_options=options)
    local_root = Path(url.removeprefix("file://")) if url.startswith("file://") else None
    if local_root is not None:  # a file of someone else's beside the store
        local_root.parent.mkdir(parents=True, exist_ok=True)
    foreign = work / "foreign-notes.txt"
    foreign.write_bytes(b"not the store's")
    versions: dict[int, dict[str, bytes]] = {}
    first = step == "publish.after_identity"  # only a store's first publish writes it
    pointer = variant == "pointer"
    make = _pointer_version if pointer else _version
    for number in (() if first else (1, 2)):
        versions[number] = make(work / f"v{number}", number)
        store.publish(work / f"v{number}", layouts=pointer)
    versions[3] = make(work / "v3", 3)
    source_before = _tree(work / "v3")
    if step in PUBLISH_STEPS:
        done = _child(variant, url, work / "v3", env, f"{step}:{sig}")
        fired = _fired(done, sig)
        assert fired or done.returncode == 0, done.stderr[-2000:]
        out = work / "check"
        restored = store.restore(out)
        published = [v for k, v in versions.items() if first is False or k == 3]
        if restored is None:
            assert first, "a crash lost every checkpoint"
            state = "empty"
        else:
            assert not restored.fell_back, restored.reason
            assert _tree(out) in published, "latest is not a published version"
            state = "new" if restored.step == 3 else "old"
        assert store.verify().all_ok
        source_now = _tree(work / "v3")
        if pointer:  # the training's next save, if the upload got that far, is its own
            # (it runs in the killed process too: it may have been cut, tracker still 3)
            saved = {k: v for k, v in source_now.items() if k.startswith("iter_0000004/")}
            source_now = {k: v for k, v in source_now.items() if k not in saved}
            # the kill can fall between the training's truncate and write of its tracker
            # (open "w", then write: seen once in a loaded suite): empty, the training's
            # own torn rewrite, which its next save heals (done below, as it would)
            assert source_now[TRACKER] in (source_before[TRACKER], b"4", b"")
            torn_tracker = source_now[TRACKER] == b""
            source_now[TRACKER] = source_before[TRACKER]
            _assert_loads(out, restored)
        assert source_now == source_before and foreign.read_bytes() == b"not the store's"
        if pointer and torn_tracker:  # publish refuses an empty tracker ("being written")
            from tests.pointer_fixtures import save_megatron

            save_megatron(work / "v3", 4, size=700)
        again = store.publish(work / "v3", layouts=pointer)  # the next run heals
        assert again.step == (4 if pointer and (work / "v3" / TRACKER).read_bytes() == b"4"
                              else 3)
        assert all(info.state == "complete" for info in store.list())
        assert store.verify().orphan_blobs == 0
        if local_root is not None:
            assert not [p for p in local_root.rglob("*") if ".resched-tmp-" in p.name]
        return Row(backend, step, sig, variant, fired, state, True, 0)
    # restore steps: v3 is the store's latest; the target holds v2 (or nothing)
    store.publish(work / "v3")
    target = work / "target"
    old: dict[str, bytes] = {}
    if variant in ("force", "journaled"):
        store_v2 = CheckpointStore(url, retention=2, storage_options=options)
        _restore_version(store_v2, target, work)
        (target / "user-notes.txt").write_bytes(b"the user's own file")
        old = _tree(target)
    new = {**old, **versions[3]}  # --force: the checkpoint's files replaced, others kept
    crash = f"{step}:{sig}"
    action = "startup" if variant == "startup" else variant
    done = _child(action, url, target, env, crash)
    fired = _fired(done, sig)
    assert fired or done.returncode == 0, done.stderr[-2000:]
    now = _tree(target)
    journal = target.is_dir() and any(p.name.endswith(".commit") for p in target.iterdir())
    if now == new:
        state = "new"
    elif now == old:
        state = "old"
    else:
        assert variant == "journaled" and journal, f"a mixed target without a journal: {sorted(now)}"
        state = "journal"
    assert foreign.read_bytes() == b"not the store's"
    # the next run heals: the wrapper's start-up or a restore (--force: it holds files)
    healed = _child(action if action != "empty" else "force", url, target, env, None)
    assert healed.returncode == 0, healed.stderr[-2000:]
    assert _tree(target) == new, "the next run did not give the new tree"
    assert not _leftovers(target), _leftovers(target)
    return Row(backend, step, sig, variant, fired, state, True, 0)


TRACKER = "latest_checkpointed_iteration.txt"


def _assert_loads(out: Path, restored: object) -> None:
    """What Megatron would load from a restored layout: the tracker names a whole folder
    that came with it, at the step the store recorded."""
    if restored is None:
        return
    from wrapper.checkpoint.layouts import inspect_layout

    verdict = inspect_layout(out)
    assert verdict.complete is True, verdict.reason
    assert verdict.step == restored.step == int((out / TRACKER).read_bytes())  # type: ignore[attr-defined]


def _restore_version(store: CheckpointStore, target: Path, work: Path) -> None:
    """Put v2's files into target, as a restore of v2 would (v3 is latest by now)."""
    for path in sorted((work / "v2").rglob("*")):
        if path.is_file():
            dest = target / path.relative_to(work / "v2")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(path.read_bytes())
    mark_complete(target, 2)


def scenarios() -> list[tuple[str, str, str]]:
    rows = [(step, sig, variant) for variant in PUBLISH_VARIANTS for step in PUBLISH_STEPS
            for sig in SIGNALS]
    rows += [(step, sig, variant) for variant in VARIANTS for step in RESTORE_STEPS
             for sig in SIGNALS]
    rows += [("startup.before_restore", sig, "startup") for sig in SIGNALS]
    return rows


def main(backend: str) -> None:  # pragma: no cover - the report's matrix
    import tempfile

    env, options, stop = dict(os.environ), None, None
    if backend == "s3":
        from checkpoint_fixtures import start_weed, stop_weed

        workdir = Path(tempfile.mkdtemp(prefix="resched-matrix-s3-"))
        process, server = start_weed(workdir)
        env, options = {**server.env, "CK_OPTIONS": json.dumps(server.storage_options)}, \
            server.storage_options
        stop = lambda: stop_weed(process, server)  # noqa: E731
    rows = []
    try:
        for index, (step, sig, variant) in enumerate(scenarios()):
            work = Path(tempfile.mkdtemp(prefix="resched-matrix-"))
            os.environ["RESCHED_CACHE_DIR"] = str(work / "cache")
            env["RESCHED_CACHE_DIR"] = str(work / "cache")
            url = (f"file://{work}/store" if backend == "file"
                   else f"s3://resched-ck/matrix-{os.getpid()}-{index}")
            try:
                rows.append(asdict(run_scenario(work, backend, url, step, sig, variant, env,
                                                options)))
            except AssertionError as error:
                rows.append({"backend": backend, "step": step, "signal": sig,
                             "variant": variant, "losses": 1, "error": str(error)[:300]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if stop:
            stop()
    fired = sum(1 for r in rows if r.get("fired"))
    print(f"{backend}: {len(rows)} scenarios, {fired} crashed at their step, "
          f"losses {sum(r['losses'] for r in rows)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "file")
