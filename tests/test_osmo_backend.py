"""The OSMO backend: the exact argv and file, the server escape, localpath, a real submit."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from workflows.backends import get_backend
from workflows.backends.osmo import OsmoBackend, OsmoRequest, escape_for_server, inline_localpaths
from workflows.errors import BackendError, UsageError
from workflows.render import Rendered, render_file, render_text
from workflows.values import ValueOptions

FIXTURES = Path(__file__).parent / "render_fixtures"


@dataclass(frozen=True)
class FakeJob:
    """What the backend reads from workflows.pipeline.LoadedWorkflow."""

    rendered: Rendered
    spec: Any = None


def job_for(path: Path, *sets: str) -> FakeJob:
    return FakeJob(render_file(path, ValueOptions(sets=sets)))


@pytest.fixture
def tutorial_job() -> FakeJob:
    return job_for(FIXTURES / "tutorial.yaml")


def test_registry_gives_the_osmo_backend() -> None:
    backend = get_backend("osmo")
    assert isinstance(backend, OsmoBackend)
    assert backend.name == "osmo" and backend.lint_target == "osmo"
    assert set(backend.option_help) == {"pool", "priority"}


def test_argv_without_options(tutorial_job: FakeJob) -> None:
    request = OsmoBackend().dry_run(tutorial_job, {})
    assert isinstance(request, OsmoRequest)
    assert request.argv == ("osmo", "workflow", "submit", "workflow.yaml")


def test_argv_with_pool_and_priority(tutorial_job: FakeJob) -> None:
    request = OsmoBackend().dry_run(tutorial_job, {"pool": "a100 pool", "priority": "low"})
    assert request.argv == ("osmo", "workflow", "submit", "workflow.yaml", "--pool", "a100 pool",
                            "--priority", "LOW")
    shown = request.materialize()
    assert shown.splitlines()[0] == "$ osmo workflow submit workflow.yaml --pool 'a100 pool' " \
                                    "--priority LOW"
    assert shown.endswith(request.spec_text)


@pytest.mark.parametrize(("options", "message"), [
    ({"priority": "urgent"}, r"--priority 'urgent' is not valid for the osmo backend \(fix: use one of: HIGH, NORMAL, LOW\)"),
    ({"pool": " "}, "--pool is empty"),
    ({"nodes": 3}, "--nodes is not an option of the osmo backend"),
])
def test_bad_options_are_usage_errors(tutorial_job: FakeJob, options: dict[str, Any],
                                      message: str) -> None:
    with pytest.raises(UsageError, match=message):
        OsmoBackend().dry_run(tutorial_job, options)


def test_the_sent_file_renders_on_the_server_to_the_preview(tutorial_job: FakeJob) -> None:
    preview = tutorial_job.rendered.text
    sent = OsmoBackend().dry_run(tutorial_job, {}).spec_text
    assert "${#nodes[@]}" in preview and "${#nodes[@]}" not in sent  # escaped for the server
    assert "{{input:0}}" in sent and "{{host:master}}" in sent  # tokens stay readable
    assert render_text(sent, ValueOptions()).text == preview


def test_write_puts_the_exact_file_in_the_folder(tutorial_job: FakeJob, tmp_path: Path) -> None:
    request = OsmoBackend().dry_run(tutorial_job, {"pool": "p"})
    paths = request.write(tmp_path / "out")
    assert paths == [tmp_path / "out" / "workflow.yaml"]
    assert paths[0].read_bytes() == request.spec_text.encode()


def test_escape_of_text_without_jinja_is_the_text_plus_the_dropped_newline() -> None:
    assert escape_for_server("workflow:\n  a: 1") == "workflow:\n  a: 1\n"
    assert escape_for_server("workflow:\n  a: 1\n") == "workflow:\n  a: 1\n\n"


def test_escape_examples() -> None:
    assert escape_for_server("workflow: ${#a[@]} {%x%} {#") == \
        "workflow: ${{ '{' }}#a[@]} {{ '{' }}%x%} {{ '{' }}#\n"
    assert escape_for_server("workflow:\nfoo: 1") == "workflow:\n{##}foo: 1\n"
    assert escape_for_server("workflow: {{input:0}}{{{output}}") == \
        "workflow: {{input:0}}{{ '{' }}{{output}}\n"
    assert escape_for_server("workflow: {{input: 0 }}") == "workflow: {{ '{' }}{input: 0 }}\n"


# --- files: localpath ---------------------------------------------------------------

def _write_localpath_workflow(folder: Path, files_block: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "train.yaml"
    path.write_text(
        "workflow:\n  name: w\n  tasks:\n  - name: t\n    image: ubuntu\n"
        "    command: [bash, /tmp/run.sh]\n    files:\n" + files_block
        + "    args: ['{{input:0}}']\n"
    )
    return path


def test_localpath_is_replaced_by_the_file_contents(tmp_path: Path) -> None:
    folder = tmp_path / "job dir"
    path = _write_localpath_workflow(
        folder, "    - path: /tmp/run.sh\n      localpath: scripts/run.sh\n"
                "    - localpath: '{{ \"cfg.txt\" }}'\n      path: /tmp/cfg.txt\n")
    (folder / "scripts").mkdir()
    script = "#!/bin/bash\nn=${#arr[@]}\necho \"{{input:0}}\" 'q' \\\n\tdone\n"
    (folder / "scripts" / "run.sh").write_text(script)
    (folder / "cfg.txt").write_text("x: 1")
    job = job_for(path)
    request = OsmoBackend().dry_run(job, {})
    server_view = render_text(request.spec_text, ValueOptions()).text
    document = yaml.safe_load(server_view)
    files = document["workflow"]["tasks"][0]["files"]
    assert files == [{"path": "/tmp/run.sh", "contents": script},
                     {"contents": "x: 1", "path": "/tmp/cfg.txt"}]
    # every other line of the preview is sent unchanged
    kept = [line for line in job.rendered.text.splitlines() if "localpath" not in line]
    assert kept == [line for line in server_view.splitlines() if "contents" not in line]


def test_localpath_in_flow_style_falls_back_to_a_yaml_dump(tmp_path: Path) -> None:
    path = _write_localpath_workflow(tmp_path, "    - {path: /tmp/a, localpath: a.txt}\n")
    (tmp_path / "a.txt").write_text("hello\n")
    sent = inline_localpaths(job_for(path).rendered.text, tmp_path)
    assert yaml.safe_load(sent)["workflow"]["tasks"][0]["files"] == \
        [{"path": "/tmp/a", "contents": "hello\n"}]


def test_missing_localpath_is_a_clear_error(tmp_path: Path) -> None:
    path = _write_localpath_workflow(tmp_path, "    - path: /tmp/a\n      localpath: nope.sh\n")
    with pytest.raises(BackendError) as caught:
        OsmoBackend().dry_run(job_for(path), {})
    assert "localpath 'nope.sh' cannot be read" in str(caught.value)
    assert str(tmp_path / "nope.sh") in str(caught.value)


def test_groups_localpath_and_absolute_paths(tmp_path: Path) -> None:
    local = tmp_path / "abs.txt"
    local.write_text("abs")
    text = (f"workflow:\n  groups:\n  - name: g\n    tasks:\n    - name: t\n      files:\n"
            f"      - path: /x\n        localpath: {local}\n")
    sent = inline_localpaths(text, Path("/nonexistent"))
    assert yaml.safe_load(sent)["workflow"]["groups"][0]["tasks"][0]["files"] == \
        [{"path": "/x", "contents": "abs"}]


# --- submit -------------------------------------------------------------------------

def test_submit_without_osmo_says_how_to_install_it(
    tutorial_job: FakeJob, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    request = OsmoBackend().dry_run(tutorial_job, {})
    with pytest.raises(BackendError) as caught:
        OsmoBackend().submit(request)
    message = str(caught.value)
    assert "`osmo` CLI is not on PATH" in message and "install script" in message
    assert "github.com/NVIDIA/OSMO/releases" in message and "\n" not in message


FAKE_OSMO = """#!{python}
import json, os, sys
record = {{"argv": sys.argv[1:], "file": open(sys.argv[3], encoding="utf-8").read()}}
with open(os.environ["FAKE_OSMO_RECORD"], "w", encoding="utf-8") as out:
    json.dump(record, out)
code = int(os.environ.get("FAKE_OSMO_EXIT", "0"))
if code:
    print("Error: pool a100 is not accessible", file=sys.stderr)
else:
    print("Workflow submit successful.")
    print("Workflow ID        - train-7")
    print("Workflow Overview  - https://osmo.example/workflows/train-7")
sys.exit(code)
"""


@pytest.fixture
def fake_osmo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "osmo"
    script.write_text(FAKE_OSMO.format(python=sys.executable))
    script.chmod(0o755)
    record = tmp_path / "record.json"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_OSMO_RECORD", str(record))
    return record


def test_submit_runs_osmo_with_the_exact_argv_and_file(tutorial_job: FakeJob,
                                                       fake_osmo: Path) -> None:
    request = OsmoBackend().dry_run(tutorial_job, {"pool": "a100", "priority": "HIGH"})
    result = OsmoBackend().submit(request)
    sent = json.loads(fake_osmo.read_text())
    argv = sent["argv"]
    assert argv[:2] == ["workflow", "submit"]
    assert argv[3:] == ["--pool", "a100", "--priority", "HIGH"]
    assert Path(argv[2]).name == "workflow.yaml" and not Path(argv[2]).exists()  # temp, removed
    assert sent["file"] == request.spec_text
    assert render_text(sent["file"], ValueOptions()).text == tutorial_job.rendered.text
    assert result.backend == "osmo" and result.job_id == "train-7"
    assert result.message == "submitted to OSMO as train-7"


def test_a_failing_osmo_is_a_backend_error(tutorial_job: FakeJob, fake_osmo: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_OSMO_EXIT", "3")
    with pytest.raises(BackendError) as caught:
        OsmoBackend().submit(OsmoBackend().dry_run(tutorial_job, {}))
    assert str(caught.value) == ("osmo workflow submit failed (exit 3): "
                                 "Error: pool a100 is not accessible")


def test_submit_refuses_other_requests() -> None:
    with pytest.raises(BackendError, match="cannot submit a object"):
        OsmoBackend().submit(object())  # type: ignore[arg-type]


def _tasks(document: dict[str, Any]) -> list[dict[str, Any]]:
    workflow = document["workflow"]
    return workflow.get("tasks", []) + [t for g in workflow.get("groups", []) for t in g["tasks"]]


SHIPPED = sorted((Path(__file__).parents[1] / "templates").glob("*.yaml"))


@pytest.mark.parametrize("template", SHIPPED, ids=lambda path: path.name)
def test_shipped_templates_through_the_real_pipeline(template: Path, tmp_path: Path) -> None:
    from workflows.pipeline import load_workflow

    job = load_workflow(template, ValueOptions(sets=("upload_location=s3://team/run7",)))
    request = OsmoBackend().dry_run(job, {"pool": "a100"})
    assert request.argv == ("osmo", "workflow", "submit", "workflow.yaml", "--pool", "a100")
    server_view = render_text(request.spec_text, ValueOptions()).text
    preview = yaml.safe_load(job.rendered.text)
    sent = yaml.safe_load(server_view)
    # the sent spec is the preview with each localpath replaced by the file's contents
    assert "localpath" in job.rendered.text and "localpath" not in server_view
    for task in _tasks(preview):
        for entry in task.get("files", []):
            if "localpath" in entry:
                entry["contents"] = (template.parent / entry.pop("localpath")).read_text()
    assert sent == preview
    assert (tmp_path / "workflow.yaml") in request.write(tmp_path)
