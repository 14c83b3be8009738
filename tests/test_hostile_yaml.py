"""Hostile YAML and input files: one clear line and a non-zero exit, never a blow-up.

Issue 13: a 458-byte alias bomb drove validate/lint/run to 5 GB (the line map follows
aliases), `render /dev/zero` was OOM-killed, duplicate keys silently kept the last value
(an injected second `command:` won), deep nesting crashed libyaml with SIGSEGV.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workflows.errors import UsageError
from workflows.render import render_file
from workflows.values import ValueOptions, load_values_file
from wrapper import yamlsafe
from wrapper.inputfile import MAX_INPUT_BYTES
from wrapper.classifier.rules import RulesError, load_rule_file

from tests.hostile_helpers import assert_clear_error, run_cli

TASK = "  tasks:\n  - name: t\n    image: ubuntu\n    command: [sh]\n"


def alias_bomb(levels: int = 9, width: int = 9) -> str:
    """The issue's shape: each anchor is a list of ``width`` aliases of the previous one."""
    lines = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"  a{level}: &a{level} [" + ",".join([f"*a{level - 1}"] * width) + "]")
    return "workflow:\n  name: bomb\n" + TASK + "\n".join(lines) + "\n"


def assert_one_clear_line(code: int, output: str, *needles: str) -> None:
    assert code == 2, output
    assert_clear_error(code, output, *needles)


# -- the alias bomb -----------------------------------------------------------------


def test_the_issue_alias_bomb_is_small() -> None:
    assert len(alias_bomb().encode()) < 600


def _limit_memory() -> None:  # runs in the child only: 1 GiB of address space
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


@pytest.mark.e2e
@pytest.mark.parametrize("command", [["validate"], ["lint"], ["run", "--dry-run"]])
def test_alias_bomb_under_a_memory_limit_in_a_real_process(tmp_path: Path, command: list[str]) -> None:
    """Before the fix: MemoryError at the 1 GiB limit, exit 70. Now: one line, exit 2, at once.

    A real process with a memory limit, never in-process: a regression must not take the
    test run's memory with it.
    """
    spec = tmp_path / "bomb.yaml"
    spec.write_text(alias_bomb())
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", *command, str(spec)],
        capture_output=True, text=True, timeout=120, preexec_fn=_limit_memory,
        env={**os.environ, "RESCHED_DEBUG": ""},
    )
    assert_one_clear_line(done.returncode, done.stderr, "alias bomb", f"{spec}:")


def test_alias_budget_counts_expansion_not_aliases() -> None:
    # Many small aliases are fine (shared resources, env blocks); only the expansion counts.
    text = "base: &b {cpu: 1, gpu: 1}\n" + "".join(f"t{i}: *b\n" for i in range(2000))
    # the root, its 2001 keys, and the 5-node mapping once per use
    assert yamlsafe.check_shape(text).expanded == 1 + 2001 + 5 * 2001
    assert yamlsafe.safe_load(text)["t1999"] == {"cpu": 1, "gpu": 1}
    with pytest.raises(yamlsafe.YamlLoadError, match="alias bomb"):
        yamlsafe.check_shape(text, alias_budget=1000)


@pytest.mark.parametrize("text", ["a: &x [*x]", "a: &x {b: [1, *x]}", "workflow: &w\n  t: [*w]\n"])
def test_recursive_aliases_are_refused(text: str) -> None:
    with pytest.raises(yamlsafe.YamlLoadError, match="recursive YAML alias"):
        yamlsafe.safe_load(text)


# -- deep nesting -------------------------------------------------------------------


@pytest.mark.parametrize("opener,closer", [("[", "]"), ("{a: ", "}")])
def test_deep_nesting_is_refused_before_libyaml_recurses(opener: str, closer: str) -> None:
    # 100 000 levels crashed the process with SIGSEGV inside libyaml's composer.
    text = "workflow: " + opener * 100_000 + "1" + closer * 100_000
    with pytest.raises(yamlsafe.YamlLoadError, match="nested more than"):
        yamlsafe.safe_load(text)


@pytest.mark.parametrize("loader", ["CSafeLoader", "SafeLoader"])
def test_deep_nesting_is_reported_in_our_words_whatever_the_yaml_build(
        loader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # PyYAML 6.0.4's libyaml refuses deep flow nesting in its scanner, before the first
    # event reaches our depth check; the pure-Python loader lets our check see it.
    if not hasattr(yamlsafe.yaml, loader):
        pytest.skip(f"this PyYAML has no {loader}")
    monkeypatch.setattr(yamlsafe, "_BASE_LOADER", getattr(yamlsafe.yaml, loader))
    text = "workflow:\n  x: 1\n  cmd: ['a # [', \"b]\"]\n  y: " + "[" * 5000 + "1" + "]" * 5000
    with pytest.raises(yamlsafe.YamlLoadError, match="nested more than") as raised:
        yamlsafe.safe_load(text)
    assert raised.value.line == 3


def test_nesting_below_the_limit_loads() -> None:
    depth = yamlsafe.MAX_DEPTH - 1
    assert yamlsafe.check_shape("[" * depth + "]" * depth).depth == depth


# -- duplicate keys -----------------------------------------------------------------


def test_injected_second_command_is_refused_with_both_lines(tmp_path: Path) -> None:
    spec = tmp_path / "train.yaml"
    spec.write_text("version: 2\nworkflow:\n  name: d\n" + TASK + "    command: [curl, evil]\n")
    code, output = run_cli("validate", str(spec))
    assert_one_clear_line(code, output, f"{spec}:8", "duplicate key 'command'", "first on line 7")


@pytest.mark.parametrize("text,key", [
    ("a: 1\na: 2\n", "a"),
    ("a: 1\n'a': 2\n", "a"),           # quoting does not make another key
    ("1: x\n0x1: y\n", "0x1"),         # the same int written twice
    ("m: {x: 1, y: 2, x: 3}\n", "x"),
    ("l:\n- {k: 1}\n- k: 1\n  k: 2\n", "k"),
])
def test_duplicate_keys_everywhere_in_the_tree(text: str, key: str) -> None:
    with pytest.raises(yamlsafe.YamlLoadError, match=f"duplicate key '{key}'"):
        yamlsafe.safe_load(text)


def test_merge_keys_may_be_overridden() -> None:
    text = "base: &b {x: 1, y: 1}\nuse: {<<: *b, x: 2}\n"
    assert yamlsafe.safe_load(text)["use"] == {"x": 2, "y": 1}


def test_duplicate_key_in_default_values_is_refused_by_every_command_but_render(
    tmp_path: Path,
) -> None:
    """OSMO's server renders it (last wins), so `render` must show that text, and warns;
    validate / lint / submit / run refuse to go on with it."""
    spec = tmp_path / "t.yaml"
    spec.write_text("# header\ndefault-values:\n  image: a\n  image: b\nworkflow:\n"
                    "  name: x\n  tasks:\n  - name: t\n    image: '{{image}}'\n    command: [sh]\n")
    rendered = render_file(spec, ValueOptions())
    assert "image: 'b'" in rendered.text
    assert rendered.refusals == ((f"{spec}:4", rendered.refusals[0][1]),)
    assert any("duplicate key 'image'" in note for note in rendered.notes)
    for command in (["validate"], ["lint"], ["submit", "--dry-run"], ["run", "--dry-run"]):
        code, output = run_cli(*command, str(spec))
        assert_one_clear_line(code, output, f"{spec}:4", "duplicate key 'image'", "first on line 3")


def test_duplicate_key_in_a_values_file(tmp_path: Path) -> None:
    values = tmp_path / "v.yaml"
    values.write_text("image: a\nimage: b\n")
    with pytest.raises(UsageError, match="duplicate key 'image'") as caught:
        load_values_file(values)
    assert caught.value.where == f"{values}:2"


def test_duplicate_key_in_a_rules_file(tmp_path: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n- id: a\n  match: {exit_codes: [1]}\n  match: {exit_codes: [2]}\n")
    with pytest.raises(RulesError, match="duplicate key 'match'") as caught:
        load_rule_file(rules)
    assert caught.value.where == f"{rules}:4"


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), st.integers(), min_size=1),
       st.data())
def test_a_repeated_key_is_always_found(mapping: dict[str, int], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(mapping)))
    lines = [f"{k}: {v}" for k, v in mapping.items()]
    position = data.draw(st.integers(0, len(lines)))
    lines.insert(position, f"{key}: 0")
    with pytest.raises(yamlsafe.YamlLoadError, match="duplicate key"):
        yamlsafe.safe_load("\n".join(lines))
    assert yamlsafe.safe_load("\n".join(f"{k}: {v}" for k, v in mapping.items())) == mapping


# -- input files of the wrong kind --------------------------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.yaml"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind", ["fifo", "chardev", "directory-via-link", "too-big", "binary"])
@pytest.mark.parametrize("role", ["spec", "values", "rules"])
def test_inputs_must_be_small_regular_text_files(tmp_path: Path, kind: str, role: str) -> None:
    """A FIFO must not hang, /dev/zero must not be read to the end of memory."""
    if kind == "fifo":
        bad = _fifo(tmp_path)
    elif kind == "chardev":
        bad = Path("/dev/zero")
    elif kind == "directory-via-link":
        bad = tmp_path / "link.yaml"
        bad.symlink_to(tmp_path)
    elif kind == "too-big":
        bad = tmp_path / "big.yaml"
        with bad.open("wb") as handle:
            handle.truncate(MAX_INPUT_BYTES + 1)
    else:
        bad = tmp_path / "bin.yaml"
        bad.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe")
    spec = tmp_path / "ok.yaml"
    spec.write_text("workflow:\n  name: ok\n" + TASK)
    args = {
        "spec": ["render", str(bad)],
        "values": ["render", "-f", str(bad), str(spec)],
        "rules": ["classify", "--exit-code", "1", "--no-log", "--rules", str(bad)],
    }[role]
    code, output = run_cli(*args)
    assert_clear_error(code, output, str(bad))


def test_crlf_and_symlinked_regular_files_still_read(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_bytes(b"workflow:\r\n  name: ok\r\n  tasks: []\r\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    assert render_file(link, ValueOptions()).text == "workflow:\n  name: ok\n  tasks: []"


@pytest.mark.parametrize("text", [
    "a: !!int x", "a: 2001-13-01", "x: [1, 2", "a: *undefined", "\t- tab", "a: !!python/name:os.system",
    textwrap.dedent("""\
        a: &x 1
        b: &x 2
        c: *x
    """),
])
def test_every_yaml_failure_is_a_yaml_load_error(text: str) -> None:
    with pytest.raises(yamlsafe.YamlLoadError):
        yamlsafe.safe_load(text)
