"""A launcher's in-job restarts (ft_launcher / torchrun --max-restarts) are the retries of a
"retry once, then abort" rule: the same failure back in every round aborts; restarts spent
on different failures leave the launcher's verdict (reschedule)."""

from __future__ import annotations

from pathlib import Path

from wrapper.classifier import load_rules
from wrapper.classifier.verdict import classify_artifacts
from wrapper.decision import Decision

RULES = load_rules()

ALLOC_LOG = Path(__file__).parent / "fixtures" / "nvrx-runs" / "logs" / "ft-alloc-config.log"


def test_a_failure_back_after_every_in_job_restart_aborts(tmp_path: Path) -> None:
    # a real ft_launcher run: the host allocator refused in both rounds, restarts spent
    diagnosis = classify_artifacts(logs=[ALLOC_LOG], error_files=[], rules=RULES, exit_code=1,
                                   signal=None, launcher="ft_launcher")
    assert (diagnosis.rule_id, diagnosis.decision) == ("host-oom-kill", Decision.ABORT)


def test_a_failure_in_the_last_round_only_is_rescheduled(tmp_path: Path) -> None:
    # the same run, its first round's failure replaced by a peer's lost connection: the
    # restarts were spent on different failures, so the launcher's verdict (move) stands
    lines = ALLOC_LOG.read_text().splitlines()
    restart = next(i for i, line in enumerate(lines) if "will restart worker group" in line)
    first = ["ConnectionResetError: [Errno 104] Connection reset by peer"
             if "DefaultCPUAllocator" in line else line for line in lines[:restart]]
    log = tmp_path / "run.log"
    log.write_text("\n".join(first + lines[restart:]) + "\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], rules=RULES, exit_code=1,
                                   signal=None, launcher="ft_launcher")
    assert diagnosis.decision is Decision.RESCHEDULE, diagnosis.why_won
