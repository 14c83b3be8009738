"""Lint RS040 / RS041: the pitfalls of NVRx in-process restart, on small specs."""

from __future__ import annotations

import textwrap
from pathlib import Path

from workflows.lint import LintOptions, lint_workflow
from workflows.pipeline import parse_rendered
from workflows.render import render_file
from workflows.values import ValueOptions

TRAIN = textwrap.dedent("""\
    import datetime, torch.distributed as dist
    from nvidia_resiliency_ext import inprocess

    def train(call_wrapper=None):
        dist.init_process_group("gloo"{pg_timeout})

    inprocess.Wrapper(soft_timeout=datetime.timedelta(seconds=60),
                      hard_timeout=datetime.timedelta(seconds={hard}))(train)()
""")


def lint(tmp_path: Path, *, command: str, pg_timeout: str = "", hard: int = 90,
         environment: str = "") -> list[tuple[str, str]]:
    (tmp_path / "train.py").write_text(TRAIN.format(pg_timeout=pg_timeout, hard=hard))
    spec = tmp_path / "wf.yaml"
    spec.write_text(textwrap.dedent(f"""\
        workflow:
          name: ip
          tasks:
          - name: train
            image: img
            command: ["bash", "-c", {command!r}]
            environment: {{{environment}}}
            files:
            - path: /tmp/job/train.py
              localpath: train.py
        """).replace("'", '"'))
    rendered = render_file(spec, ValueOptions())
    findings = lint_workflow(rendered, parse_rendered(rendered), LintOptions(target="local"))
    return [(f.id, f.message) for f in findings if f.id in ("RS040", "RS041")]


def test_default_collective_timeout_and_short_hang_timeout_and_no_launcher(tmp_path: Path) -> None:
    found = lint(tmp_path, command="resched wrap --hang-timeout 2m -- python3 /tmp/job/train.py")
    ids = sorted(i for i, _ in found)
    assert ids == ["RS040", "RS040", "RS041"], found
    text = " ".join(m for _, m in found)
    assert "1800 s, PyTorch's default gloo timeout" in text
    assert "--hang-timeout 120 s is shorter" in text and "MASTER_ADDR, MASTER_PORT" in text


def test_a_well_configured_task_is_clean(tmp_path: Path) -> None:
    found = lint(
        tmp_path, pg_timeout=", timeout=datetime.timedelta(seconds=5)",
        command="resched wrap --hang-timeout 10m -- torchrun --nproc-per-node 2 /tmp/job/train.py")
    assert found == []


def test_env_instead_of_a_launcher_and_a_shorter_restart(tmp_path: Path) -> None:
    found = lint(tmp_path, pg_timeout=", timeout=datetime.timedelta(seconds=5)", hard=20,
                 environment='MASTER_ADDR: "h", MASTER_PORT: "1"',
                 command="resched wrap --hang-timeout 200 -- python3 /tmp/job/train.py")
    assert found == []  # 200 s > hard 20 s + barrier 120 s (the NVRx default)


def test_a_task_without_the_wrapper_is_not_checked(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    found = lint(tmp_path / "x", command="resched wrap --hang-timeout 5 -- python3 x.py")
    assert [i for i, _ in found] != []  # the script still uses the Wrapper ...
    (tmp_path / "x" / "train.py").write_text("print('plain training')\n")
    spec = tmp_path / "x" / "wf.yaml"
    rendered = render_file(spec, ValueOptions())
    findings = lint_workflow(rendered, parse_rendered(rendered), LintOptions(target="local"))
    assert not [f for f in findings if f.id in ("RS040", "RS041")]  # ... this one does not


def test_the_template_ships_the_example_training_unchanged() -> None:
    repo = Path(__file__).resolve().parent.parent
    shipped = (repo / "templates" / "inprocess_train.py").read_text()
    assert shipped == (repo / "examples" / "inprocess_train.py").read_text()
