"""RS019: `resched wrap` in an image that does not say it has resched (OSMO only)."""

from __future__ import annotations

from pathlib import Path

from lint_fixtures import POOL, good_workflow, lint_dict, only, tasks_of, the_one, with_script

STOCK = "nvcr.io/nvidia/pytorch:25.01-py3"


def _stock_image(workflow: dict) -> dict:
    for task in tasks_of(workflow):
        task["image"] = STOCK
    return workflow


def test_rs019_stock_image_running_resched_wrap_is_a_warning(tmp_path: Path) -> None:
    findings = lint_dict(_stock_image(good_workflow()), tmp_path, **POOL)
    hits = only(findings, "RS019")
    assert len(hits) == 2 and {f.severity for f in hits} == {"warning"}
    assert STOCK in hits[0].message and "docker/Dockerfile" in hits[0].fix
    assert hits[0].path.endswith("files[0].contents")


def test_rs019_an_image_named_for_resched_or_a_pip_install_says_it(tmp_path: Path) -> None:
    assert only(lint_dict(good_workflow(), tmp_path, **POOL), "RS019") == []
    installs = with_script(_stock_image(good_workflow()),
                           "#!/bin/bash\npip install --no-deps /wheels/resched-0.1.0-py3-none-any.whl\n"
                           "exec resched wrap --reschedule-code 3 --checkpoint-dir /tmp/models -- "
                           "torchrun /tmp/job/train.py\n")
    findings = lint_dict(installs, tmp_path, **POOL)
    assert [f.path for f in only(findings, "RS019")] == [
        "workflow.groups[0].tasks[1].files[0].contents"]  # the worker still lacks it
    the_one(findings, "RS019")


def test_rs019_not_for_local_or_slurm_and_not_without_wrap(tmp_path: Path) -> None:
    assert only(lint_dict(_stock_image(good_workflow()), tmp_path, target="local", **POOL),
                "RS019") == []
    plain = with_script(with_script(_stock_image(good_workflow()),
                                    "#!/bin/bash\nexec torchrun /tmp/job/train.py\n"),
                        "#!/bin/bash\nexec torchrun /tmp/job/train.py\n", index=1)
    assert only(lint_dict(plain, tmp_path, **POOL), "RS019") == []
