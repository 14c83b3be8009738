"""Accuracy of `resched classify` on a labelled set of real logs, scored by what mistakes cost.

    .venv/bin/python benchmarks/classify_accuracy.py tests/fixtures/holdout/holdout.yaml
    .venv/bin/python benchmarks/classify_accuracy.py tests/fixtures/corpus/corpus.yaml --misses

The yaml has the format of tests/fixtures/holdout/holdout.yaml: ``entries:``, each with
``id`` (its log is ``logs/<id>.log`` next to the yaml), ``label`` (the right decision:
retry / reschedule / abort / complete), ``exit_code`` or ``signal`` when known, and
optionally ``family`` (the failure family, for a per-family line), ``url``, ``log``
(the log's path relative to the yaml, instead of ``logs/<id>.log``), ``launcher``
(``torchrun`` / ``ft_launcher``: what ``resched classify --launcher`` is told) and
``error_files`` (torchelastic error files, relative to the yaml, as ``--error-file``).

Every log goes through ``classify_artifacts`` (the path of ``resched classify``, the
same judge ``resched wrap`` uses). Printed: the 4-way confusion matrix (right label x
resched's decision), the catastrophic count (an abort of a failure a restart fixes; a
"complete" of a run that failed or stopped early) with each one named, and the
cost-weighted score: 1 - (total cost / (entries x the worst cost)), with the costs of
wrapper/classifier/costs.py (docs/rules.md, "Costs"), the table the judge itself applies.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wrapper.classifier import classify_artifacts  # noqa: E402
from wrapper.classifier.costs import WORST, catastrophic, cost  # noqa: E402
from wrapper.classifier.rules import load_rules, parse_signal  # noqa: E402

LABELS = ("retry", "reschedule", "abort", "complete")


def load(index: Path) -> list[dict]:
    data = yaml.safe_load(index.read_text(encoding="utf-8"))
    entries = data["entries"] if isinstance(data, dict) else data
    for entry in entries:
        if entry.get("label") not in LABELS:
            raise SystemExit(f"{index}: entry {entry.get('id')!r}: label {entry.get('label')!r} "
                             f"is not one of {', '.join(LABELS)}")
        # logs/<id>.log next to the yaml, or the entry's own `log` (relative to the yaml)
        log = index.parent / (entry.get("log") or f"logs/{entry['id']}.log")
        if isinstance(entry.get("signal"), str):  # "SIGKILL", "KILL" or "9"
            entry["signal"] = parse_signal(entry["signal"])
        if not log.is_file():
            raise SystemExit(f"{index}: entry {entry['id']!r}: no log at {log}")
        entry["_log"] = log
        entry["_error_files"] = [index.parent / p for p in entry.get("error_files") or []]
        missing = [str(p) for p in entry["_error_files"] if not p.is_file()]
        if missing:
            raise SystemExit(f"{index}: entry {entry['id']!r}: no error file at {missing[0]}")
        if entry.get("launcher") not in (None, "torchrun", "ft_launcher"):
            raise SystemExit(f"{index}: entry {entry['id']!r}: launcher {entry['launcher']!r} "
                             "is not torchrun or ft_launcher")
    return entries


def judge_all(entries: list[dict]) -> list[tuple[dict, str, str]]:
    rules = load_rules()
    out = []
    for entry in entries:
        diagnosis = classify_artifacts(logs=[entry["_log"]], error_files=entry["_error_files"],
                                       exit_code=entry.get("exit_code"),
                                       signal=entry.get("signal"), rules=rules,
                                       launcher=entry.get("launcher"))
        out.append((entry, str(diagnosis.decision), diagnosis.rule_id))
    return out


def report(results: list[tuple[dict, str, str]], *, misses: bool) -> str:
    table = Counter((e["label"], d) for e, d, _ in results)
    width = 12
    lines = ["right \\ resched".ljust(18) + "".join(a.rjust(width) for a in LABELS) + "total".rjust(width)]
    for label in LABELS:
        row = [table.get((label, a), 0) for a in LABELS]
        lines.append(label.ljust(18) + "".join(str(n).rjust(width) for n in row) + str(sum(row)).rjust(width))
    n = len(results)
    right = sum(e["label"] == d for e, d, _ in results)
    total_cost = sum(cost(e["label"], d) for e, d, _ in results)
    bad = [(e, d, r) for e, d, r in results if catastrophic(e["label"], d)]
    lines.append(f"right: {right}/{n} = {right / n:.1%}")
    lines.append(f"catastrophic: {len(bad)}")
    for e, d, r in bad:
        lines.append(f"  - {e['id']}: right {e['label']}, resched {d} ({r})")
    lines.append(f"cost: {total_cost:g} (worst possible {n * WORST:g}); "
                 f"cost-weighted score: {1 - total_cost / (n * WORST):.3f}")
    families = Counter(e.get("family") for e, _, _ in results if e.get("family"))
    if families:
        lines.append("per family (right/total):")
        for family in sorted(families):
            got = [(e, d) for e, d, _ in results if e.get("family") == family]
            lines.append(f"  {family}: {sum(e['label'] == d for e, d in got)}/{len(got)}")
    if misses:
        lines.append("misses:")
        for e, d, r in results:
            if e["label"] != d:
                lines.append(f"  - {e['id']}: right {e['label']}, resched {d} ({r})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("index", type=Path, help="the set's yaml (holdout.yaml format)")
    parser.add_argument("--misses", action="store_true", help="list every wrong decision")
    args = parser.parse_args()
    entries = load(args.index)
    print(f"{args.index}: {len(entries)} logs, classify_artifacts as resched classify")
    print(report(judge_all(entries), misses=args.misses))


if __name__ == "__main__":
    main()
