"""The pre-launch completeness check (issue 19 part 1) on each framework's layout, the
"what the framework will load" rules (part 2), torn-set housekeeping (part 5) and the
policy's "crashed loading right after a fault" rule. Layouts are built on disk the way
each framework writes them (DeepSpeed's and Lightning's with real torch.save files)."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tests.test_policy import diagnosis, failure, history_of
from wrapper.checkpoint.layouts import TORN_DIR, Layout, inspect_layout
from wrapper.checkpoint.setaside import KEEP_TORN_SETS, repair_for_resume, torn_sets
from wrapper.checkpoint.snapshot import prepare_snapshot
from wrapper.classifier.classify import EvidenceLine
from wrapper.decision import Decision
from wrapper.policy import LOAD_DAMAGE_REASON, Budgets, decide


def _w(path: Path, data: bytes | str = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _torn_files(root: Path) -> dict[str, bytes]:
    """.resched-torn/<set>/<path> -> bytes, keyed by <path> (the note left out)."""
    return {k.split("/", 2)[2]: v for k, v in _tree(root).items()
            if k.startswith(TORN_DIR + "/") and not k.endswith("resched-torn.json")}


def _megatron_iter(root: Path, n: int, *, whole: bool = True) -> None:
    for name in ("common.pt", "__0_0.distcp", "__1_0.distcp"):  # dist_checkpointing's order
        _w(root / f"iter_{n:07d}" / name, f"{name} {n}")
    if whole:
        _w(root / f"iter_{n:07d}" / ".metadata", f"meta {n}")
        _w(root / f"iter_{n:07d}" / "metadata.json", '{"sharded_backend": "torch_dist"}')


def test_megatron_tracker_naming_a_torn_iteration_goes_aside_and_names_the_whole_one(
        tmp_path: Path) -> None:
    _megatron_iter(tmp_path, 100)
    _megatron_iter(tmp_path, 200, whole=False)
    _w(tmp_path / "latest_checkpointed_iteration.txt", "200")
    before = _tree(tmp_path)
    verdict = inspect_layout(tmp_path)
    assert "latest_checkpointed_iteration.txt" in verdict.in_progress  # never uploaded alone
    repair = repair_for_resume(tmp_path, now=1_700_000_000)
    assert {m.relpath for m in repair.moved} == {"iter_0000200",
                                                 "latest_checkpointed_iteration.txt"}
    assert [(w.relpath, w.value) for w in repair.written] == [
        ("latest_checkpointed_iteration.txt", "100")]
    assert (repair.step_before, repair.step_after) == (None, 100)
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "100"
    kept = _torn_files(tmp_path)  # nothing lost: every moved byte is in the set
    assert kept == {k: v for k, v in before.items()
                    if k.startswith("iter_0000200/") or k.startswith("latest_")}
    # the final upload of this directory never holds a tracker naming a missing folder
    final = prepare_snapshot(tmp_path, final=True)
    names = {f.relpath for f in final.snapshot.files}
    assert final.step == 100 and "iter_0000100/.metadata" in names
    assert not any(n.startswith("iter_0000200") for n in names)


def _ds_tag(root: Path, step: int, *, ranks: int = 2, torn_rank: int | None = None) -> None:
    tag = root / f"global_step{step}"
    tag.mkdir(parents=True)
    torch.save({"module": {"w": torch.ones(2) * step}, "global_steps": step,
                "dp_world_size": ranks, "mp_world_size": 1,
                "ds_config": {"zero_optimization": {"stage": 1}}},
               tag / "mp_rank_00_model_states.pt")
    for rank in range(ranks):
        path = tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"
        torch.save({"optimizer_state_dict": {"r": torch.zeros(64) + rank}}, path)
        if rank == torn_rank:
            path.write_bytes(path.read_bytes()[:100])  # the rank died inside its save


def test_deepspeed_latest_naming_a_torn_tag_is_repaired(tmp_path: Path) -> None:
    _ds_tag(tmp_path, 10)
    _ds_tag(tmp_path, 20, torn_rank=1)
    _w(tmp_path / "latest", "global_step20")  # rank 0 wrote it without waiting
    verdict = inspect_layout(tmp_path)
    assert (verdict.layout, verdict.complete) == (Layout.DEEPSPEED, False)
    repair = repair_for_resume(tmp_path)
    assert {m.relpath for m in repair.moved} == {"global_step20", "latest"}
    assert (tmp_path / "latest").read_text() == "global_step10"
    assert inspect_layout(tmp_path).step == 10  # from the model states' global_steps


def test_deepspeed_missing_rank_file_is_torn_and_whole_tag_reads_its_step(tmp_path: Path) -> None:
    _ds_tag(tmp_path, 30, ranks=2)
    (tmp_path / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    _w(tmp_path / "latest", "global_step30")
    assert inspect_layout(tmp_path).complete is False
    _ds_tag(tmp_path, 40)
    (tmp_path / "latest").write_text("global_step40")
    verdict = inspect_layout(tmp_path)
    assert (verdict.complete, verdict.step, verdict.in_progress) == (True, 40, ("global_step30",))


def test_hf_torn_checkpoint_goes_aside_dcp_steps_too(tmp_path: Path) -> None:
    hf = tmp_path / "hf"
    _w(hf / "checkpoint-4" / "trainer_state.json", json.dumps({"global_step": 4}))
    _w(hf / "checkpoint-8" / "model.safetensors")
    assert repair_for_resume(hf).step_after == 4 and not (hf / "checkpoint-8").exists()
    dcp = tmp_path / "dcp"
    for step, whole in ((5, True), (10, False)):
        _w(dcp / f"step-{step}" / "__0_0.distcp")
        if whole:
            _w(dcp / f"step-{step}" / ".metadata", "m")
    repair = repair_for_resume(dcp)
    assert [m.relpath for m in repair.moved] == ["step-10"] and repair.step_after == 5
    assert "no .metadata" in repair.moved[0].reason


def test_a_single_dcp_folder_without_metadata_is_left_alone(tmp_path: Path) -> None:
    _w(tmp_path / "__0_0.distcp")
    assert repair_for_resume(tmp_path).moved == ()
    assert (tmp_path / "__0_0.distcp").exists()


def _lightning_ckpt(path: Path, step: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"global_step": step, "epoch": 0, "state_dict": {"w": torch.ones(1) * step}}, path)


def test_lightning_counts_the_step_last_ckpt_holds(tmp_path: Path) -> None:
    _lightning_ckpt(tmp_path / "epoch=0-step=100.ckpt", 100)
    _lightning_ckpt(tmp_path / "last.ckpt", 100)
    _lightning_ckpt(tmp_path / "epoch=0-step=200.ckpt", 200)  # last.ckpt not written yet
    verdict = inspect_layout(tmp_path)
    assert (verdict.complete, verdict.step, verdict.in_progress) == (
        True, 100, ("epoch=0-step=200.ckpt",))
    running = prepare_snapshot(tmp_path)  # an upload never calls it step 200
    assert running.step == 100
    assert "epoch=0-step=200.ckpt" not in {f.relpath for f in running.snapshot.files}


def test_lightning_torn_last_ckpt_and_nemo_unfinished_go_aside(tmp_path: Path) -> None:
    _lightning_ckpt(tmp_path / "epoch=0-step=100.ckpt", 100)
    _lightning_ckpt(tmp_path / "last.ckpt", 200)
    (tmp_path / "last.ckpt").write_bytes((tmp_path / "last.ckpt").read_bytes()[:64])
    assert inspect_layout(tmp_path).complete is False  # what fit("last") loads is cut
    os.symlink("epoch=0-step=100.ckpt", tmp_path / "last-v1.ckpt")
    os.utime(tmp_path / "last-v1.ckpt", (1, 1), follow_symlinks=False)  # older than last.ckpt
    verdict = inspect_layout(tmp_path)
    assert (verdict.complete, verdict.step) == (True, 100)
    repair = repair_for_resume(tmp_path)
    assert [m.relpath for m in repair.moved] == ["last.ckpt"] and repair.step_after == 100
    assert os.readlink(tmp_path / "last-v1.ckpt") == "epoch=0-step=100.ckpt"  # untouched
    nemo = tmp_path / "nemo"
    _lightning_ckpt(nemo / "m--step=50.ckpt", 50)
    _lightning_ckpt(nemo / "m--step=60.ckpt", 60)
    _w(nemo / "m--step=60-unfinished", "")
    assert {m.relpath for m in repair_for_resume(nemo).moved} == {
        "m--step=60.ckpt", "m--step=60-unfinished"}
    assert inspect_layout(nemo).step == 50


def test_torn_sets_are_bounded_and_left_out_of_periodic_uploads(tmp_path: Path) -> None:
    _w(tmp_path / "checkpoint-1" / "trainer_state.json", json.dumps({"global_step": 1}))
    for n in range(KEEP_TORN_SETS + 2):
        _w(tmp_path / f"checkpoint-{10 + n}" / "model.safetensors", f"torn {n}")
        repair = repair_for_resume(tmp_path, now=1_700_000_000 + 3600 * n)
    assert len(torn_sets(tmp_path)) == KEEP_TORN_SETS
    assert repair.pruned == (f"{TORN_DIR}/{repair.pruned[0].split('/')[1]}",)
    running = prepare_snapshot(tmp_path)
    assert not any(f.relpath.startswith(TORN_DIR) for f in running.snapshot.files)
    final = prepare_snapshot(tmp_path, final=True)  # the upload after the end keeps them once
    assert sum(f.relpath.startswith(TORN_DIR) for f in final.snapshot.files) == 2 * KEEP_TORN_SETS


def _user_error_with(text: str):
    return replace(diagnosis("python-user-error"),
                   evidence=(EvidenceLine("stderr", 9, text),))


def test_a_load_crash_right_after_a_fault_is_checkpoint_damage() -> None:
    crash = _user_error_with("FileNotFoundError: [Errno 2] No such file or directory: "
                             "'/ck/checkpoint-300/trainer_state.json'")
    after_kill = history_of(failure("killed-by-signal", "retry", step=200))
    decided = decide(crash, after_kill, Budgets(), node="n1", allocation="a1", step=200,
                     retries_used_in_allocation=1)
    assert decided.action is Decision.RESCHEDULE and LOAD_DAMAGE_REASON in decided.reason
    # the same error on a first attempt, or after progress, or not about a checkpoint: a bug
    for history, step, error in (
            (history_of(), 200, crash),
            (after_kill, 300, crash),
            (after_kill, 200, _user_error_with("KeyError: 'learning_rate'"))):
        assert decide(error, history, Budgets(), node="n1", allocation="a1", step=step,
                      retries_used_in_allocation=1).action is Decision.ABORT


def test_lightning_link_lost_mid_save_is_linked_again(tmp_path: Path) -> None:
    # save_last="link" removes last.ckpt, then links the new step file: killed in between
    state = {"ModelCheckpoint{'every_n_train_steps': 4}": {
        "last_model_path": str(tmp_path / "last.ckpt"), "dirpath": str(tmp_path)}}
    for step in (4, 8):
        torch.save({"global_step": step, "callbacks": state}, tmp_path / f"epoch=0-step={step}.ckpt")
    verdict = inspect_layout(tmp_path)
    assert (verdict.complete, verdict.lost_links) == (False, (("last.ckpt", "epoch=0-step=8.ckpt"),))
    repair = repair_for_resume(tmp_path)
    assert os.readlink(tmp_path / "last.ckpt") == "epoch=0-step=8.ckpt"
    assert (repair.step_before, repair.step_after) == (None, 8)
    # a training that never used save_last (no last_model_path) is left as it is
    plain = tmp_path / "plain"
    plain.mkdir()
    torch.save({"global_step": 4, "callbacks": {}}, plain / "epoch=0-step=4.ckpt")
    assert inspect_layout(plain).step == 4 and not repair_for_resume(plain).changed
