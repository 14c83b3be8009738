"""What NVRx says in a training's output: in-process restarts and straggler reports.

Read from the lines the wrapper forwards (nothing here imports NVRx):

- ``inprocess.Wrapper`` logs every failed restart iteration as ``rank=R fn_ex: <repr>``
  (``inprocess/wrap.py``, ``utils.format_exc``: the exception and its ``__cause__`` chain
  joined by `` <- ``) and ends with ``RestartAbort`` from its ``RetryController``
  (``inprocess/initialize.py``: ``state.iteration=N self.max_iterations=M ...``).
- The straggler detector's callers log ``STRAGGLER DETECTION WARNING: ... Affected ranks:
  {StragglerId(rank=R, node='N'), ...}`` and score lines ``Rank=R Node=N Score=S``
  (``ptl_resiliency/straggler_det_callback.py``); a training may also dump its
  ``straggler.Report`` as JSON to ``$RESCHED_STRAGGLER_REPORT`` (see
  :func:`straggler_report_json`), which carries the per-section relative scores.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STRAGGLER_REPORT_ENV = "RESCHED_STRAGGLER_REPORT"

_FN_EX = re.compile(r"\brank=(\d+) fn_ex: (.*)$")
_RESTART_ABORT = re.compile(r"\bRestartAbort\b(?::\s*(.*))?")
_ABORT_ITERATION = re.compile(r"state\.iteration=(\d+)")
_WORLD_TOO_SMALL = re.compile(r"state\.active_world_size=(\d+) self\.min_active_world_size=(\d+)")
_STRAGGLER_WARNING = re.compile(r"STRAGGLER DETECTION WARNING.*Affected ranks: (\{.*\})")
_STRAGGLER_ID = re.compile(r"StragglerId\(rank=(\d+), node='([^']*)'\)")
_SCORE = re.compile(r"(?:\bSection=(\S+) )?\bRank=(\d+) Node=(\S+) Score=([0-9.]+)")
# ft_launcher 0.4.1 with --max-restarts 0 exits 0 after its rank monitor killed a hung
# rank: "Agent .run() is OK. No failures in the result. result=RunResult(state=
# <WorkerState.UNHEALTHY: 'UNHEALTHY'>, ... failures={1: ProcessFailure(...)})".
_UNHEALTHY_RESULT = re.compile(r"RunResult\(state=<WorkerState\.(?:UNHEALTHY|FAILED)\b")
# ptl_resiliency/straggler_det_callback.py (_stop_training, stop_if_detected=True) logs
# this at error level, saves the last checkpoint, then calls sys.exit(1)
_STRAGGLER_STOP = "Detected stragglers. Terminating training"
_EXC_NAME = re.compile(r"^([A-Za-z_][\w.]*)\(")
# What the healthy ranks die of while they wait for the failed one (cascades)
_ECHO = re.compile(r"Timed out waiting \d+ms|Connection closed by peer|Connection reset by peer"
                   r"|Broken pipe|ProcessGroup(?:Gloo|NCCL)? (?:is )?aborted|NCCL communicator")


@dataclass(frozen=True)
class RootCauseRule:
    """An exception family that exhausted in-process restarts -> what the wrapper does."""

    names: frozenset[str]
    decision: str  # abort | reschedule
    why: str
    exclude_node: bool = False


# Which failure made the in-process restarts run out decides (taxonomy section 3):
# a Python bug repeats on every restart, a peer / network failure may not on other nodes.
ROOT_CAUSE_RULES: tuple[RootCauseRule, ...] = (
    RootCauseRule(frozenset({
        "ValueError", "KeyError", "TypeError", "AssertionError", "AttributeError",
        "IndexError", "NameError", "ZeroDivisionError", "ImportError",
        "ModuleNotFoundError", "SyntaxError", "NotImplementedError", "FileNotFoundError",
        "OutOfMemoryError", "RecursionError", "UnboundLocalError",
    }), "abort", "a deterministic error in the training code or config: every in-process "
        "restart hit it again"),
    RootCauseRule(frozenset({"HealthCheckError"}), "reschedule",
                  "NVRx's health check failed on this node", exclude_node=True),
    RootCauseRule(frozenset({
        "DistBackendError", "DistNetworkError", "DistStoreError", "ConnectionError",
        "ConnectionResetError", "TimeoutError", "RankShouldRestart", "RuntimeError",
    }), "reschedule", "peers or the network kept failing: a fresh allocation may not"),
)


@dataclass(frozen=True)
class InprocessVerdict:
    restarts: int
    root_cause: str | None  # the exception type that failed the restart iterations
    root_text: str | None
    decision: str
    why: str
    exclude_node: bool


@dataclass(frozen=True)
class StragglerReport:
    flagged: Mapping[int, str]  # rank -> node
    scores: Mapping[int, float] = field(default_factory=dict)  # rank -> relative GPU score
    section_scores: Mapping[str, Mapping[int, float]] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.flagged.values())))


class NvrxWatch:
    """Fed every block of forwarded output; remembers what NVRx reported."""

    def __init__(self) -> None:
        self.fn_ex: list[tuple[int, str]] = []  # (rank, repr chain)
        self.restart_abort: str | None = None
        self.flagged: dict[int, str] = {}
        self.scores: dict[int, float] = {}
        self.section_scores: dict[str, dict[int, float]] = {}
        self.launcher_unhealthy = False  # the launcher's own result says its workers failed
        self.straggler_stop = False  # the straggler callback stopped the training itself

    def feed(self, text: str) -> bool:
        """Read a block of lines; True when it shows an in-process restart under way."""
        if ("fn_ex" not in text and "RestartAbort" not in text and "RunResult(" not in text
                and "STRAGGLER" not in text and "Score=" not in text
                and "Detected stragglers" not in text):
            return False  # the common case: one substring test per block
        if _STRAGGLER_STOP in text:
            self.straggler_stop = True
        restarting = False
        for line in text.split("\n"):
            if (m := _FN_EX.search(line)) is not None:
                self.fn_ex.append((int(m.group(1)), m.group(2).strip()))
                restarting = True
            elif (m := _RESTART_ABORT.search(line)) is not None and self.restart_abort is None:
                self.restart_abort = (m.group(1) or "").strip() or line.strip()
            if _UNHEALTHY_RESULT.search(line):
                self.launcher_unhealthy = True
            if (m := _STRAGGLER_WARNING.search(line)) is not None:
                for rank, node in _STRAGGLER_ID.findall(m.group(1)):
                    self.flagged[int(rank)] = node
            for section, rank, _node, score in _SCORE.findall(line):
                if section:
                    self.section_scores.setdefault(section, {})[int(rank)] = float(score)
                else:
                    self.scores[int(rank)] = float(score)
        return restarting

    @property
    def restarts(self) -> int:
        """Restart iterations seen: the most failures any one rank logged."""
        per_rank = Counter(rank for rank, _ in self.fn_ex)
        iteration = _ABORT_ITERATION.search(self.restart_abort or "")
        counted = max(per_rank.values(), default=0)
        return max(counted, int(iteration.group(1)) if iteration else 0)

    def inprocess_verdict(self) -> InprocessVerdict | None:
        if self.restart_abort is None:
            return None
        too_small = _WORLD_TOO_SMALL.search(self.restart_abort)
        if too_small and int(too_small.group(1)) < int(too_small.group(2)):
            return InprocessVerdict(self.restarts, None, self.restart_abort, "reschedule",
                                    "too few healthy ranks left to restart in place", False)
        root, text = _root_cause(self.fn_ex)
        for rule in ROOT_CAUSE_RULES:
            if root in rule.names:
                return InprocessVerdict(self.restarts, root, text, rule.decision, rule.why,
                                        rule.exclude_node)
        return InprocessVerdict(self.restarts, root, text, "reschedule",
                                "in-process restarts used up for an unknown cause", False)

    def straggler_report(self, report_file: Path | None) -> StragglerReport | None:
        flagged, scores = dict(self.flagged), dict(self.scores)
        sections = {name: dict(ranks) for name, ranks in self.section_scores.items()}
        from_file = read_straggler_report(report_file) if report_file else None
        if from_file is not None:
            flagged.update(from_file.flagged)
            scores.update(from_file.scores)
            sections.update({k: dict(v) for k, v in from_file.section_scores.items()})
        if not flagged:
            return None
        return StragglerReport(flagged, scores, sections)


def _root_cause(fn_ex: list[tuple[int, str]]) -> tuple[str | None, str | None]:
    """The first exception in time that is not a peer's echo (``RankShouldRestart``).

    A rank that failed itself logs its own error; the others log RankShouldRestart
    (they were told to restart). The innermost ``__cause__`` of a chain is the origin.
    """
    echoes: list[tuple[str, str]] = []
    for _rank, chain in fn_ex:
        innermost = chain.split(" <- ")[-1].strip()
        match = _EXC_NAME.match(innermost)
        name = match.group(1).rsplit(".", 1)[-1] if match else None
        if name is None:
            continue
        if name == "RankShouldRestart" or _ECHO.search(innermost):
            echoes.append((name, innermost))  # a peer waiting on the failed rank
            continue
        return name, innermost
    return echoes[0] if echoes else (None, None)


def read_straggler_report(path: Path) -> StragglerReport | None:
    """A report JSON written by :func:`straggler_report_json`; None when absent or unreadable."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, Mapping):
        return None
    try:
        nodes = {int(k): str(v) for k, v in (data.get("rank_to_node") or {}).items()}
        flagged = {int(r): nodes.get(int(r), "?") for r in data.get("stragglers") or ()}
        scores = {int(k): float(v) for k, v in (data.get("gpu_relative") or {}).items()}
        sections = {str(s): {int(k): float(v) for k, v in ranks.items()}
                    for s, ranks in (data.get("section_relative") or {}).items()}
    except (TypeError, ValueError, AttributeError):
        return None
    return StragglerReport(flagged, scores, sections)


def straggler_report_json(report: Any, *, threshold: float = 0.7) -> dict[str, Any]:
    """Turn an ``nvidia_resiliency_ext.straggler.Report`` into the JSON the wrapper reads.

    Called in the training (rank 0, ``gather_on_rank0=True``); flags the ranks whose
    relative GPU or section score is below ``threshold`` (NVRx's identify_stragglers).
    """
    gpu = {int(r): float(s) for r, s in report.gpu_relative_perf_scores.items()}
    sections = {str(name): {int(r): float(s) for r, s in ranks.items()}
                for name, ranks in report.section_relative_perf_scores.items()}
    slow = {r for r, s in gpu.items() if s < threshold}
    for ranks in sections.values():
        slow.update(r for r, s in ranks.items() if s < threshold)
    return {"rank_to_node": {str(r): n for r, n in report.rank_to_node.items()},
            "gpu_relative": {str(r): s for r, s in gpu.items()},
            "section_relative": {n: {str(r): s for r, s in v.items()} for n, v in sections.items()},
            "stragglers": sorted(slow), "threshold": threshold}
