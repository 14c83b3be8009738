"""The same OSMO-semantics cases on both emulating backends: local executor and real Slurm.

Each case is one plain shell workflow (no resched import in the tasks) run through the
backend's own ``submit(dry_run(...))``; the outcome is read back as OSMO would report it:
the workflow's status, which groups ran, and each task's published ``{{output}}``.
Behaviour the backends share is asserted once for both (docs/osmo-semantics.md lists
what differs and why).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_fixtures import SlurmCluster, slurm_cluster_fixture  # noqa: F401  (registers it)

from tests.local_fixtures import run_local
from workflows.backends.slurm import SlurmBackend
from workflows.pipeline import load_workflow
from workflows.values import ValueOptions

pytestmark = pytest.mark.e2e


@dataclass(frozen=True)
class Outcome:
    """What OSMO would show: the workflow status, the groups that ran, each task's outputs."""

    status: str  # COMPLETED | FAILED
    ran: frozenset[str]  # groups whose tasks started
    outputs: dict[str, Path]  # task -> its published {{output}} folder
    log: str


@dataclass(frozen=True)
class Backend:
    name: str
    cluster: SlurmCluster | None = None


@pytest.fixture(params=["local", pytest.param("slurm", marks=pytest.mark.slurm)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "slurm":  # skips, with the reason, when the cluster cannot come up
        yield Backend("slurm", request.getfixturevalue("slurm_cluster"))
    else:
        yield Backend("local")


def run_on(backend: Backend, tmp_path: Path, spec_text: str, groups: tuple[str, ...],
           max_retry_per_task: int | None = None) -> Outcome:
    spec = tmp_path / "wf.yaml"
    spec.write_text(textwrap.dedent(spec_text).lstrip())
    retry = {} if max_retry_per_task is None else {"max_retry_per_task": max_retry_per_task}
    if backend.cluster is None:
        flags = [f"--max-retry-per-task={max_retry_per_task}"] if retry else []
        run = run_local(spec, *flags, workdir=tmp_path / "work")
        tasks = run.workdir / "tasks"
        ran = frozenset(e["task"] for e in run.report.get("events", []) if e["kind"] == "group_started")
        outputs = {d.name: d / "output" for d in tasks.iterdir()} if tasks.is_dir() else {}
        status = "COMPLETED" if run.returncode == 0 else "FAILED"
        return Outcome(status, ran, outputs, run.stdout + run.stderr)
    return _run_on_slurm(backend.cluster, spec, tmp_path / "work", groups, retry)


def _run_on_slurm(cluster: SlurmCluster, spec: Path, workdir: Path, groups: tuple[str, ...],
                  options: dict[str, object]) -> Outcome:
    job = load_workflow(spec, ValueOptions(), lint_target="slurm")
    backend = SlurmBackend()
    request = backend.dry_run(job, {"workdir": workdir, **options})
    ids = backend.submit(request).job_id.split(",")
    by_group = {j.group: i for j, i in zip(request.jobs, ids)}
    states = {g: cluster.wait_for_state(by_group[g], {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"},
                                        timeout_s=150)["JobState"] for g in groups}
    ran = frozenset(g for g in groups if (workdir / by_group[g]).is_dir())
    outputs = {}
    for group in groups:
        published = workdir / by_group[group] / "outputs"
        if published.is_dir():
            outputs.update({d.name: d for d in published.iterdir()})
    logs = "".join(p.read_text(errors="replace") for p in sorted(workdir.glob("slurm-*.out")))
    status = "COMPLETED" if all(s == "COMPLETED" for s in states.values()) else "FAILED"
    return Outcome(status, ran, outputs, f"{states}\n{logs}")


DAG = """
workflow:
  name: dag
  groups:
  - name: evaluate
    tasks:
    - name: eval
      command: ["bash", "/tmp/job/eval.sh"]
      inputs:
      - task: prepare
        regex: '\\.txt$'
      files:
      - path: /tmp/job/eval.sh
        contents: |
          set -eu
          ls {{input:prepare}} > {{output}}/staged
          cat {{input:0}}/data.txt > {{output}}/copied
      - path: /tmp/job/raw.bin
        base64: true
        contents: e3tvdXRwdXR9fQ==
  - name: prep-group
    tasks:
    - name: prepare
      command: ["bash", "-c", "echo from-prepare > {{output}}/data.txt; echo x > {{output}}/skip.bin; cp /tmp/job/raw.bin {{output}}/raw.txt"]
      files:
      - path: /tmp/job/raw.bin
        base64: true
        contents: e3tvdXRwdXR9fQ==
"""


def test_task_inputs_order_groups_and_stage_upstream_outputs(backend: Backend, tmp_path: Path) -> None:
    """``inputs: - task:`` runs the consumer after its producer's group completed, stages the
    producer's outputs (``regex:`` honoured) as input 0, also by name; base64 files keep
    their bytes (``{{output}}`` inside them is data, not a token)."""
    out = run_on(backend, tmp_path, DAG, ("prep-group", "evaluate"))
    assert out.status == "COMPLETED", out.log
    assert out.ran == {"prep-group", "evaluate"}
    assert (out.outputs["eval"] / "copied").read_text() == "from-prepare\n"
    assert (out.outputs["eval"] / "staged").read_text().split() == ["data.txt", "raw.txt"]
    assert (out.outputs["prepare"] / "raw.txt").read_text() == "{{output}}"


def test_a_failed_upstream_group_never_starts_its_consumers(backend: Backend, tmp_path: Path) -> None:
    failing = DAG.replace('command: ["bash", "-c", "echo from-prepare', 'command: ["bash", "-c", "exit 7; echo')
    out = run_on(backend, tmp_path, failing, ("prep-group", "evaluate"))
    assert out.status == "FAILED", out.log
    assert out.ran == {"prep-group"}
    assert not (out.outputs.get("eval") and (out.outputs["eval"] / "copied").exists())


@pytest.mark.parametrize(("code", "status"), [(5, "COMPLETED"), (0, "FAILED"), (9, "FAILED")])
def test_exit_actions_first_match_wins_then_the_default(
    backend: Backend, tmp_path: Path, code: int, status: str
) -> None:
    """COMPLETE: 5 comes before FAIL: 1-10, so 5 completes; FAIL: 0 makes a clean exit a
    failure; 9 matches FAIL (OSMO's default would say FAILED too)."""
    spec = f"""
    workflow:
      name: codes
      tasks:
      - name: only
        command: ["bash", "-c", "echo ran > {{{{output}}}}/ran; exit {code}"]
        exitActions:
          COMPLETE: "5"
          FAIL: 0-10
    """
    out = run_on(backend, tmp_path, spec, ("only-group",))
    assert out.status == status, out.log


RENDEZVOUS = """
workflow:
  name: parallel
  groups:
  - name: left
    tasks:
    - name: a
      command: ["bash", "-c", "touch RV/a; for i in $(seq 1200); do [ -e RV/b ] && exit 0; sleep 0.1; done; exit 1"]
  - name: right
    tasks:
    - name: b
      command: ["bash", "-c", "touch RV/b; for i in $(seq 1200); do [ -e RV/a ] && exit 0; sleep 0.1; done; exit 1"]
"""


def test_independent_groups_run_at_the_same_time(backend: Backend, tmp_path: Path) -> None:
    """Each task waits (up to 120 s) for the other's file: it completes only if both
    groups run at once, as OSMO runs independent groups; one at a time fails."""
    rendezvous = tmp_path / "work" / "rv"  # under the backend's work dir: shared by tasks
    rendezvous.mkdir(parents=True)
    out = run_on(backend, tmp_path, RENDEZVOUS.replace("RV", str(rendezvous)), ("left", "right"))
    assert out.status == "COMPLETED", out.log
    assert out.ran == {"left", "right"}


NONLEAD_FAILS = """
workflow:
  name: nonlead
  groups:
  - name: pair
    ignoreNonleadStatus: IGNORE
    tasks:
    - name: lead
      lead: true
      command: ["bash", "-c", "for i in $(seq 1200); do [ -e RV/failed ] && break; sleep 0.1; done; LINGER; exit 0"]
    - name: helper
      command: ["bash", "-c", "touch RV/failed; exit 7"]
"""


@pytest.mark.parametrize("ignore", [True, False])
def test_a_nonlead_failure_is_ignored_or_fails_the_group(backend: Backend, tmp_path: Path, ignore: bool) -> None:
    """ignoreNonleadStatus true: the lead's clean exit decides (COMPLETED); false: the
    non-lead's failure ends the group at once (the lead would otherwise run for 10 min)."""
    rendezvous = tmp_path / "work" / "rv"
    rendezvous.mkdir(parents=True)
    spec = (NONLEAD_FAILS.replace("RV", str(rendezvous)).replace("IGNORE", str(ignore).lower())
            .replace("LINGER", "true" if ignore else "sleep 600"))
    out = run_on(backend, tmp_path, spec, ("pair",))
    assert out.status == ("COMPLETED" if ignore else "FAILED"), out.log


RETRIES = """
workflow:
  name: retries
  tasks:
  - name: flaky
    command: ["bash", "-c", "echo run >> RV/runs; exit 3"]
    exitActions:
      RESCHEDULE: "3"
"""


def test_reschedule_stops_at_the_retry_limit(backend: Backend, tmp_path: Path) -> None:
    """RESCHEDULE: 3 with --max-retry-per-task 1: one reschedule, then the workflow FAILS."""
    rendezvous = tmp_path / "work" / "rv"
    rendezvous.mkdir(parents=True)
    out = run_on(backend, tmp_path, RETRIES.replace("RV", str(rendezvous)), ("flaky-group",),
                 max_retry_per_task=1)
    assert out.status == "FAILED", out.log
    assert (rendezvous / "runs").read_text().count("run") == 2, out.log
