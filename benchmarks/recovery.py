#!/usr/bin/env python3
"""Recovery benchmark: `resched run` under random chaos vs a bare torchrun restart loop.

1. `resched run` of the shipped single-node template (examples/ddp_train.py under
   `resched wrap -- torchrun`, 2 ranks) with `--chaos random:mtbf=M,seed=S,kinds=K`,
   reading its `--report` JSON (timeline events, per-fault numbers, ETTR).
2. BASELINE, in the same invocation: the same training started by a bare loop that
   restarts `torchrun` whenever it exits non-zero, with the same faults injected at the
   same offsets from the start (kill: SIGKILL torchrun and its ranks; hang: SIGSTOP the
   ranks; term: SIGTERM torchrun). Its timeline is built from the same log lines and
   reduced by the same functions as the local executor's report
   (workflows.backends.local.report), so both columns use one definition.

Prints detection latency (median, p95), time to resume, lost steps per fault, ETTR, the
Young/Daly model and ETTR / model (goal >= 0.9) for both, and whether the final weights
are bit-identical. Not a test: numbers depend on the machine and its load. Note that the
model is computed from each run's own detection and resume times (it is not an upper
bound: the upper bound is a fault-free run, `resched report RUN --baseline`), so ETTR / model says
how well the checkpoint interval and the rest of the run do GIVEN those times; compare
the absolute ETTR and the detection / resume rows across the two columns.

    .venv/bin/python benchmarks/recovery.py                       # ~3-5 min
    .venv/bin/python benchmarks/recovery.py --duration 300 --mtbf 45 --kinds kill+hang
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflows.backends.local.report import fault_metrics, run_metrics
from workflows.backends.local.timeline import Timeline, parse_line

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "templates" / "single-node-torchrun.yaml"
SCRIPT = REPO / "examples" / "ddp_train.py"
BIN = Path(sys.executable).parent
BASELINE_KINDS = ("kill", "hang", "term")


@dataclass(frozen=True)
class BenchConfig:
    out: Path
    mtbf_s: float
    duration_s: float
    seed: int
    kinds: tuple[str, ...]
    step_time: float
    checkpoint_every: int
    checkpoint_cadence: str
    nproc: int
    hang_timeout: str

    @property
    def steps(self) -> int:
        # ~10 ms of compute and collectives per step on top of the sleep (measured on CPU)
        return max(20, round(self.duration_s / (self.step_time + 0.01)))

    def train_args(self) -> list[str]:
        return ["--steps", str(self.steps), "--checkpoint-every", str(self.checkpoint_every),
                "--step-time", str(self.step_time)]


def parse_args() -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mtbf", type=float, default=30.0, help="mean s between faults")
    parser.add_argument("--duration", type=float, default=75.0,
                        help="fault-free training time (s); each run lasts longer")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kinds", default="kill", help="'+'-joined: kill, hang, term")
    parser.add_argument("--step-time", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=50,
                        help="steps; near Young's tau* for the defaults on a 2-core CPU box")
    parser.add_argument("--checkpoint-cadence", default="30s", help="the task's upload timer")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--hang-timeout", default="auto",
                        help="the template's hang_timeout (resched wrap --hang-timeout), e.g. 10s")
    parser.add_argument("--out", type=Path, default=None, help="work dir (default: a temp dir)")
    ns = parser.parse_args()
    kinds = tuple(ns.kinds.split("+"))
    bad = [k for k in kinds if k not in BASELINE_KINDS]
    if bad:
        parser.error(f"--kinds {bad[0]!r}: the baseline can inject {', '.join(BASELINE_KINDS)}")
    out = ns.out or Path(tempfile.mkdtemp(prefix="resched-recovery-"))
    out.mkdir(parents=True, exist_ok=True)
    return BenchConfig(out.resolve(), ns.mtbf, ns.duration, ns.seed, kinds, ns.step_time,
                       ns.checkpoint_every, ns.checkpoint_cadence, ns.nproc, ns.hang_timeout)


# ---------------------------------------------------------------- resched run


def run_resched(cfg: BenchConfig) -> dict[str, Any]:
    report = cfg.out / "resched-report.json"
    sets = {"upload_location": f"file://{cfg.out}/store", "steps": cfg.steps,
            "step_time": cfg.step_time, "checkpoint_every": cfg.checkpoint_every,
            "checkpoint_cadence": cfg.checkpoint_cadence, "n_gpus_per_node": cfg.nproc,
            "hang_timeout": cfg.hang_timeout}
    argv = [str(BIN / "resched"), "run", str(TEMPLATE), "--workdir", str(cfg.out / "resched"),
            "--report", str(report), "--progress", "plain",
            # enough RESCHEDULEs that a high fault rate measures recovery, not the budget
            "--max-retry-per-task", "1000",
            "--chaos", f"random:mtbf={cfg.mtbf_s:g}s,seed={cfg.seed},kinds={'+'.join(cfg.kinds)}"]
    for key, value in sets.items():
        argv += ["--set", f"{key}={value}"]
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    print("$ " + " ".join(argv), flush=True)
    with open(cfg.out / "resched-run.log", "wb") as log:
        done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, env=env, check=False)
    if not report.exists():
        raise SystemExit(f"resched run exited {done.returncode} without a report; "
                         f"see {cfg.out / 'resched-run.log'}")
    return json.loads(report.read_text())


def fault_schedule(report: dict[str, Any]) -> list[tuple[float, str]]:
    """(offset from the chaos clock's start, kind) of every fault resched injected."""
    started = next((e["t"] for e in report["events"] if e["kind"] == "run_started"),
                   report["started_at"])
    schedule = []
    for event in report["events"]:
        if event["kind"] != "fault_injected":
            continue
        planned = re.search(r"@([0-9.]+)s$", str(event.get("spec", "")))
        offset = float(planned.group(1)) if planned else event["t"] - started
        schedule.append((offset, str(event.get("fault", "kill"))))
    return schedule


# ---------------------------------------------------------------- baseline


class BareLoop:
    """`while ! torchrun ...; do :; done`, with faults injected at fixed offsets."""

    def __init__(self, cfg: BenchConfig, schedule: list[tuple[float, str]],
                 give_up_s: float) -> None:
        self.cfg, self.schedule, self.give_up_s = cfg, schedule, give_up_s
        self.timeline = Timeline()
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()
        self.gave_up = False

    def argv(self) -> list[str]:
        return [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(self.cfg.nproc),
                str(SCRIPT), "--checkpoint-dir", str(self.cfg.out / "baseline" / "ckpt"),
                *self.cfg.train_args()]

    def run(self) -> float:
        start = self.timeline.add("run_started").t
        threading.Thread(target=self._inject, args=(start,), daemon=True).start()
        watchdog = threading.Timer(self.give_up_s, self._give_up)
        watchdog.start()
        attempt = 0
        while not self.gave_up:
            attempt += 1
            if attempt > 1:
                self.timeline.add("attempt_restarted", "train", attempt=attempt)
            code = self._attempt(attempt)
            if code == 0 or self.gave_up:  # the give-up kill is no detection by the loop
                break
            self.timeline.add("failure_detected", "train", source="bare-loop", exit_code=code)
            self.timeline.add("decision", "train", action="retry")
        watchdog.cancel()
        return self.timeline.add("run_ended").t - start

    def _give_up(self) -> None:
        """A bare loop has no hang detector: stop the benchmark rather than wait forever."""
        with self.lock:
            self.gave_up = True
            proc = self.proc
        if proc is not None:
            kill_tree(proc)

    def _attempt(self, attempt: int) -> int:
        with open(self.cfg.out / "baseline" / f"attempt-{attempt}.log", "wb") as log:
            proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=log,
                                    start_new_session=True)
            with self.lock:
                self.proc = proc
            assert proc.stdout is not None
            for raw in proc.stdout:
                log.write(raw)
                parse_line(raw.decode(errors="replace"), "train", self.timeline, attempt=attempt)
            return proc.wait()

    def _inject(self, start: float) -> None:
        for offset, kind in self.schedule:
            time.sleep(max(0.0, start + offset - time.time()))
            with self.lock:
                proc = self.proc
            if proc is None or proc.poll() is not None:
                continue
            self.timeline.add("fault_injected", "train", fault=kind, spec=f"{kind}@{offset:.1f}s")
            if kind == "kill":
                kill_tree(proc)
            elif kind == "hang":
                for pid in child_pids(proc.pid):
                    os.kill(pid, signal.SIGSTOP)
            else:
                proc.send_signal(signal.SIGTERM)


def child_pids(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL torchrun's group and its ranks (torchrun starts each in its own session)."""
    ranks = child_pids(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in ranks:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_baseline(cfg: BenchConfig, schedule: list[tuple[float, str]],
                 give_up_s: float) -> dict[str, Any]:
    (cfg.out / "baseline").mkdir(parents=True, exist_ok=True)
    loop = BareLoop(cfg, schedule, give_up_s)
    print(f"$ until {' '.join(loop.argv())}; do :; done   # faults at "
          + ", ".join(f"{kind}@{offset:.1f}s" for offset, kind in schedule), flush=True)
    wall = loop.run()
    events = loop.timeline.events
    faults = fault_metrics(events)
    checksums = [e.fields["checksum"] for e in events if e.kind == "final_checksum"]
    return {"status": "GAVE UP" if loop.gave_up else "COMPLETED", "faults": faults,
            "metrics": run_metrics(events, faults, wall),
            "final_checksum": checksums[-1] if checksums else None,
            "events": [e.to_json() for e in events]}


# ---------------------------------------------------------------- summary


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered) + 0.5) - 1))]


def median_gap(faults: list[dict[str, Any]], start: str, end: str) -> float | None:
    gaps = [f[end] - f[start] for f in faults
            if f.get(start) is not None and f.get(end) is not None]
    return round(statistics.median(gaps), 3) if gaps else None


_DETECT_KINDS = ("wrapper_failure_detected", "failure_detected")


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def restart_phases(events: list[dict[str, Any]], faults: list[dict[str, Any]]
                   ) -> dict[str, float | None]:
    """Median seconds of each phase from a kill to the first step after the restart:
    the exit seen (kill -> the launcher's exit noticed), reap (-> the rest of the task
    reaped and the failure reported), decide (-> decision), relaunch (-> new attempt),
    torch start (-> torch imported, ranks rendezvoused, checkpoint load begins), load
    (the training's own load time), first step (-> its first step after the load)."""
    phases: dict[str, list[float]] = {name: [] for name in (
        "kill_to_first_step", "exit_seen", "reap", "decide", "relaunch", "torch_start",
        "load", "first_step")}
    for fault in faults:
        if fault.get("interrupted") or fault.get("t_first_new_step") is None:
            continue
        t_fault, t_detect = fault["t_fault"], fault.get("t_detect")
        t_decision, t_restart = fault.get("t_decision"), fault.get("t_restart")
        if None in (t_detect, t_decision, t_restart):
            continue
        phases["kill_to_first_step"].append(fault["t_first_new_step"] - t_fault)
        detect = next((e for e in events if e["kind"] in _DETECT_KINDS
                       and abs(e["t"] - t_detect) < 1e-3), {})
        exit_seen = detect.get("exit_seen_at")
        if isinstance(exit_seen, (int, float)):
            phases["exit_seen"].append(exit_seen - t_fault)
            phases["reap"].append(t_detect - exit_seen)
        phases["decide"].append(t_decision - t_detect)
        phases["relaunch"].append(t_restart - t_decision)
        loaded = next((e for e in events if e["kind"] == "checkpoint_loaded"
                       and t_restart <= e["t"] <= fault["t_first_new_step"]), None)
        if loaded is not None:
            load_s = float(loaded["load_s"])
            phases["torch_start"].append(loaded["t"] - load_s - t_restart)
            phases["load"].append(load_s)
            phases["first_step"].append(fault["t_first_new_step"] - loaded["t"])
    return {f"{name}_median_s": _median(values) for name, values in phases.items()}


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    faults, metrics = result["faults"], result["metrics"]
    detect = [f["detection_s"] for f in faults if f.get("detection_s") is not None]
    resume = [f["resume_s"] for f in faults if f.get("resume_s") is not None]
    lost = [f["lost_steps"] for f in faults if f.get("lost_steps") is not None]
    # the Young/Daly model at the optimal interval (a model, not an upper bound)
    ettr, bound = metrics.get("ettr"), metrics.get("ettr_model_optimal")
    return {
        "status": result["status"], "faults": len(faults),
        "decisions": "+".join(f"{n}x{d}" for d, n in sorted(
            Counter(str(f.get("decision")) for f in faults).items())) or None,
        "undetected": len(faults) - len(detect),
        "detection_median_s": statistics.median(detect) if detect else None,
        "detection_p95_s": p95(detect) if detect else None,
        "resume_median_s": statistics.median(resume) if resume else None,
        "resume_p95_s": p95(resume) if resume else None,
        # where the resume time goes: decision -> new attempt (backoff, new pod) and
        # new attempt -> checkpoint restored (launcher + import torch + load)
        "relaunch_median_s": median_gap(faults, "t_decision", "t_restart"),
        "start_and_load_median_s": median_gap(faults, "t_restart", "t_restored"),
        # kill -> first step after the restart, phase by phase (see restart_phases)
        **restart_phases(result.get("events", []), faults),
        "lost_steps_per_fault": statistics.fmean(lost) if lost else None,
        "wall_s": metrics.get("wall_s"), "step_s": metrics.get("step_s"),
        "checkpoint_cost_s": metrics.get("checkpoint_cost_s"),
        "ettr": ettr, "ettr_model_optimal": bound,
        "young_tau_opt_steps": round(metrics["tau_opt_s"] / metrics["step_s"])
        if metrics.get("tau_opt_s") and metrics.get("step_s") else None,
        "ettr_over_model": round(ettr / bound, 3) if ettr and bound else None,
        "final_checksum": result.get("final_checksum"),
    }


def show(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def print_table(cfg: BenchConfig, rows: dict[str, dict[str, Any]]) -> None:
    names = list(rows)
    print(f"\nrecovery benchmark: {cfg.steps} steps x {cfg.step_time} s, checkpoint every "
          f"{cfg.checkpoint_every} steps, chaos kinds {'+'.join(cfg.kinds)}, MTBF {cfg.mtbf_s:g} s, "
          f"seed {cfg.seed}, {cfg.nproc} ranks; work dir {cfg.out}")
    print(f"{'':<24}" + "".join(f"{n:>22}" for n in names))
    for key in rows[names[0]]:
        if key == "final_checksum":
            continue
        print(f"{key:<24}" + "".join(f"{show(rows[n].get(key)):>22}" for n in names))
    sums = {n: rows[n]["final_checksum"] for n in names}
    if None in sums.values():
        print("final weights: not compared (" + ", ".join(
            n for n, v in sums.items() if v is None) + " did not finish)")
    else:
        same = len(set(sums.values())) == 1
        print("final weights bit-identical across runs: " + ("yes" if same else f"NO {sums}"))
    ours, bare = (rows[n].get("kill_to_first_step_median_s") for n in names[:2])
    if ours is not None and bare is not None:
        extra = ours - bare
        print(f"kill -> first step after restart (median): {ours:.3f} s vs bare relaunch "
              f"{bare:.3f} s: {extra:+.3f} s ({'meets' if extra <= 0.5 else 'MISSES'} the "
              "<= +0.5 s goal)")
    for name in names:
        ratio = rows[name]["ettr_over_model"]
        verdict = "-" if ratio is None else ("meets" if ratio >= 0.9 else "BELOW")
        print(f"{name}: ETTR / Young-Daly model = {show(ratio)} ({verdict} the 0.9 goal)")


def main() -> int:
    cfg = parse_args()
    load_before = os.getloadavg()[0]
    resched = run_resched(cfg)
    load_between = os.getloadavg()[0]
    schedule = fault_schedule(resched)
    # the baseline may hang forever (nothing detects a SIGSTOPped rank): cap it
    give_up_s = max(2 * resched["metrics"]["wall_s"], 120.0)
    baseline = run_baseline(cfg, schedule, give_up_s)
    rows = {"resched run": summarize(resched), "bare torchrun loop": summarize(baseline)}
    # other work on the machine shifts start-up times: show how busy it was
    rows["resched run"]["load_avg_1m_at_start"] = load_before
    rows["bare torchrun loop"]["load_avg_1m_at_start"] = load_between
    (cfg.out / "recovery.json").write_text(json.dumps(
        {"config": {k: str(v) for k, v in vars(cfg).items()}, "summary": rows,
         "resched_faults": resched["faults"], "baseline_faults": baseline["faults"],
         "baseline_events": baseline["events"]}, indent=2) + "\n")
    print_table(cfg, rows)
    print(f"details: {cfg.out / 'recovery.json'}, {cfg.out / 'resched-report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
