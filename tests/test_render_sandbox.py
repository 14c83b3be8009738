"""The sandboxed worker: escapes refused, CPU and memory limits, worker life cycle."""

from __future__ import annotations

import datetime
import os
import signal
import threading

import pytest

from workflows import render_worker
from workflows.errors import RenderError
from workflows.render import render_text
from workflows.values import ValueOptions

MIB = 1024 * 1024


def error_of(template_body: str) -> str:
    with pytest.raises(RenderError) as caught:
        render_text(f"workflow:\n  a: 1\n  x: {template_body}\n", ValueOptions(), source="t.yaml")
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    "expression",
    [
        "{{ ''.__class__.__mro__[1].__subclasses__() }}",
        "{{ ''.__class__ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ lipsum.__globals__['os'] }}",
        "{{ (1).__class__.__base__.__subclasses__() }}",
    ],
)
def test_sandbox_escapes_fail_with_a_security_error_line(expression: str) -> None:
    message = error_of(expression)
    assert message.startswith("t.yaml:3: the template sandbox refused: access to attribute")
    assert "unsafe" in message


def test_format_string_escape_is_refused() -> None:
    message = error_of("{{ '{0.__class__}'.format('') }}")
    assert "sandbox refused" in message


def test_infinite_loop_stops_at_the_cpu_limit() -> None:
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    message = error_of(loop)
    assert message.startswith("t.yaml:3: rendering stopped at the CPU-time limit of 0.5 s")


def test_self_growing_loop_stops_at_a_limit() -> None:
    message = error_of("{% set l = [1] %}{% for x in l %}{% if l.append(x) %}{% endif %}{% endfor %}")
    assert "rendering stopped at the" in message  # CPU, or memory on a very fast machine


@pytest.mark.parametrize("expression", ["{{ 'x' * 10**9 }}", "{{ 'ab' * 60000000 }}",
                                        "{{ [0] * 10**8 }}"])
def test_memory_bomb_stops_at_the_memory_limit(expression: str) -> None:
    assert "rendering stopped at the memory limit of 100 MiB" in error_of(expression)


def test_the_template_gets_about_100_mib_of_its_own() -> None:
    # 60 MiB of string (plus its copy into the output) fits; 120 MiB does not
    ok = render_text("workflow: {{ ('x' * 60 * 1048576) | length }}\n", ValueOptions())
    assert ok.text == f"workflow: {60 * MIB}"
    assert "memory limit" in error_of("{{ ('x' * 120 * 1048576) | length }}")


def test_recursion_is_stopped() -> None:
    message = error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}")
    assert "recursion" in message


def test_the_worker_is_reused_and_replaced_after_a_limit() -> None:
    first = render_worker.worker_info()["pid"]
    render_text("workflow: {{ 1 }}\n", ValueOptions())
    assert render_worker.worker_info()["pid"] == first
    error_of("{{ 'x' * 10**9 }}")
    replaced = render_worker.worker_info()["pid"]
    assert replaced != first
    assert render_text("workflow: {{ 2 }}\n", ValueOptions()).text == "workflow: 2"


def test_worker_measures_itself() -> None:
    info = render_worker.worker_info()
    # an interpreter with jinja2 imported: tens of MiB, far from the 100 MiB it adds
    assert 5 * MIB < info["rss_bytes"] <= info["vm_bytes"] < 400 * MIB


def test_a_killed_worker_is_replaced() -> None:
    os.kill(render_worker.worker_info()["pid"], 9)
    assert render_text("workflow: {{ 3 }}\n", ValueOptions()).text == "workflow: 3"


def test_a_forked_child_starts_its_own_worker() -> None:
    parent_worker = render_worker.worker_info()["pid"]
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            text = render_text("workflow: {{ 4 }}\n", ValueOptions()).text
            mine = render_worker.worker_info()["pid"]
            os.write(write_end, f"{text}|{mine}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    reply = os.read(read_end, 1000).decode()
    os.waitpid(child, 0)
    os.close(read_end)
    text, child_worker = reply.split("|")
    assert text == "workflow: 4" and int(child_worker) != parent_worker
    assert render_worker.worker_info()["pid"] == parent_worker  # the parent's is untouched


def test_values_of_every_yaml_type_reach_the_worker() -> None:
    template = "workflow: {{ d }} {{ t.year }} {{ s | sort | list }} {{ b }}\n"
    values = {"d": datetime.date(2024, 1, 2), "t": datetime.datetime(2025, 3, 4),
              "s": {3, 1}, "b": b"x"}
    result = render_worker.render_in_sandbox(template, values)
    assert result.failure is None and result.text == "workflow: 2024-01-02 2025 [1, 3] b'x'"


def test_lone_surrogates_survive_the_worker() -> None:
    result = render_worker.render_in_sandbox("{{ v }}", {"v": "a\udcffb"})
    assert result.text == "a\udcffb"



def test_a_worker_ended_by_sigxcpu_is_reported_as_the_cpu_limit() -> None:
    # RLIMIT_CPU is the backstop for C code that never returns to the interpreter. CPython
    # checks signals even inside big-int arithmetic, so no template reaches it within
    # 100 MiB; send the kernel's signal ourselves, with the alarm set far away.
    pid = render_worker.worker_info()["pid"]
    loop = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    timer = threading.Timer(0.5, os.kill, (pid, signal.SIGXCPU))
    timer.start()
    try:
        result = render_worker.render_in_sandbox(loop, {}, cpu_seconds=60)
    finally:
        timer.cancel()
    assert result.failure == render_worker.SandboxFailure(
        "cpu", "the render worker was stopped at its CPU-time limit")
    assert render_worker.worker_info()["pid"] != pid
    assert render_text("workflow: {{ 5 }}\n", ValueOptions()).text == "workflow: 5"
