"""Turn what NVRx reported during an attempt into the diagnosis the policy sees.

The rule catalogue classifies one ending from its exit status and log lines; two NVRx
endings need more than one line to decide:

- ``RestartAbort`` (in-process restarts used up) is decided by the ROOT CAUSE of the
  failures that used them up, not by the gloo / NCCL noise of the abort itself;
- a graceful stop after a straggler report is a reschedule that leaves the flagged
  ranks' nodes out, not "graceful stop, unfinished" on the same nodes.

The result replaces the rule's diagnosis (same type, so budgets, history and node
memory work as for any rule); the nodes to leave out go to the record's
``exclude_nodes``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wrapper.classifier.nvrx_watch import NvrxWatch, StragglerReport

INPROCESS_RULE = "nvrx-inprocess-restart-abort"
STRAGGLER_RULE = "nvrx-straggler-stop"


@dataclass(frozen=True)
class NvrxFindings:
    """What goes into the outcome record besides the diagnosis."""

    inprocess_restarts: int
    restart_root_cause: str | None
    stragglers: StragglerReport | None
    exclude_nodes: tuple[str, ...]
    launcher_unhealthy: bool = False  # the launcher exited 0 over an UNHEALTHY result

    @classmethod
    def of(cls, watch: NvrxWatch) -> NvrxFindings:
        """What the watch saw, when no verdict replaced the diagnosis."""
        verdict = watch.inprocess_verdict()
        return cls(watch.restarts, verdict.root_cause if verdict else None, None, (),
                   watch.launcher_unhealthy)

    def record_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"inprocess_restarts": self.inprocess_restarts}
        if self.restart_root_cause:
            fields["inprocess_root_cause"] = self.restart_root_cause
        if self.stragglers is not None:
            fields["stragglers"] = {str(r): n for r, n in sorted(self.stragglers.flagged.items())}
            fields["straggler_scores"] = {str(r): s for r, s in sorted(self.stragglers.scores.items())}
            if self.stragglers.section_scores:
                fields["straggler_section_scores"] = {
                    name: {str(r): s for r, s in sorted(ranks.items())}
                    for name, ranks in self.stragglers.section_scores.items()}
        if self.exclude_nodes:
            fields["exclude_nodes"] = list(self.exclude_nodes)
        if self.launcher_unhealthy:
            fields["launcher_reported_unhealthy"] = True
        return fields


def apply_nvrx(diagnosis: Any, watch: NvrxWatch, evidence: Mapping[str, Any],
               stragglers: StragglerReport | None) -> tuple[Any, NvrxFindings]:
    """(diagnosis to decide on, findings for the record)."""
    verdict = watch.inprocess_verdict()
    findings = NvrxFindings(watch.restarts, verdict.root_cause if verdict else None,
                            stragglers, (), watch.launcher_unhealthy)
    if not dataclasses.is_dataclass(diagnosis) or isinstance(diagnosis, type):
        return diagnosis, findings  # a scripted judge's diagnosis: leave it alone
    if getattr(diagnosis, "finished_by", ""):
        return diagnosis, findings  # the training finished: nothing NVRx saw before changes that
    if verdict is not None and evidence.get("exit_code") != 0 and not evidence.get("stop_signal"):
        cause = f"{verdict.root_cause}" if verdict.root_cause else "no recorded exception"
        hint = (f"nvidia_resiliency_ext.inprocess.Wrapper used up its in-process restarts "
                f"({verdict.restarts}); root cause: {cause}"
                f"{' (' + verdict.root_text + ')' if verdict.root_text else ''}: {verdict.why}.")
        return dataclasses.replace(
            diagnosis, rule_id=INPROCESS_RULE, category="inprocess-restart",
            decision=verdict.decision, hint=hint, exclude_node=verdict.exclude_node,
            counts_as_failure=True, escalate=None, deterministic=verdict.decision == "abort",
            cascade=False), findings
    if stragglers is not None and (_stopped_gracefully(evidence) or watch.straggler_stop):
        # NVRx's Lightning straggler callback saves, then leaves with sys.exit(1)
        nodes = stragglers.nodes
        ranks = ", ".join(f"rank {r} on {n}" for r, n in sorted(stragglers.flagged.items()))
        hint = (f"NVRx straggler detection flagged {ranks} and the training stopped "
                f"gracefully: rescheduled without node(s) {', '.join(nodes)}.")
        findings = dataclasses.replace(findings, exclude_nodes=nodes)
        return dataclasses.replace(
            diagnosis, rule_id=STRAGGLER_RULE, category="straggler", decision="reschedule",
            hint=hint, exclude_node=False, counts_as_failure=False, escalate=None,
            deterministic=False, cascade=False), findings
    return diagnosis, findings


def _stopped_gracefully(evidence: Mapping[str, Any]) -> bool:
    """Exit 0 that is not the end of training (the finished flag, when given, says so)."""
    if evidence.get("exit_code") != 0 or evidence.get("signal") is not None:
        return False
    return not (evidence.get("expect_finished") and evidence.get("finished"))
