"""Rendering rules: sections, tokens, values, errors (one line, mapped to the source line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflows.errors import RenderError, UsageError
from workflows.render import is_templated, protect_tokens, render_file, render_text
from workflows.values import ValueOptions

NO_VALUES = ValueOptions()


def render(text: str, *sets: str, set_strings: tuple[str, ...] = ()) -> str:
    return render_text(text, ValueOptions(sets=sets, set_strings=set_strings), source="t.yaml").text


def render_error(text: str, *sets: str) -> str:
    with pytest.raises(RenderError) as caught:
        render_text(text, ValueOptions(sets=sets), source="t.yaml")
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- top-level sections -------------------------------------------------------------

def test_only_the_workflow_section_is_returned_wherever_it_is() -> None:
    before = "default-values:\n  a: 1\nversion: 2\nworkflow:\n  a: {{ a }}\n"
    after = "workflow:\n  a: {{ a }}\n\ndefault-values:\n  a: 1\nversion: 2\n"
    assert render(before) == "workflow:\n  a: 1"  # last section: the final newline is dropped
    assert render(after) == "workflow:\n  a: 1\n"  # the blank line before the next key stays


def test_text_before_the_first_key_is_not_part_of_any_section() -> None:
    assert render("# header\n---\nworkflow:\n  a: 1\n") == "workflow:\n  a: 1"


@pytest.mark.parametrize("key", ["foo", "Workflow", "default_values", "resources"])
def test_unknown_top_level_key(key: str) -> None:
    message = render_error(f"workflow:\n  a: 1\n{key}: 2\n")
    assert message.startswith(f't.yaml:3: Unknown top-level key "{key}"')


@pytest.mark.parametrize("key", ["workflow", "default-values", "version"])
def test_duplicate_top_level_key(key: str) -> None:
    text = f"workflow:\n  a: 1\n{key}: 2\n" if key != "workflow" else "workflow: 1\nworkflow: 2\n"
    if key != "workflow":
        text = f"{key}: 2\n" + text
    message = render_error(text)
    assert f'Duplicate top-level key "{key}"' in message


def test_no_workflow_section() -> None:
    assert "no `workflow:` section" in render_error("  workflow:\n    a: 1\n")
    assert "byte-order mark" in render_error("\ufeffworkflow:\n  a: 1\n")


def test_indented_and_commented_keys_do_not_start_sections() -> None:
    text = "workflow:\n  foo: 1\n# bar: 2\n {% if true %}\nbaz : 3\n {% endif %}\n"
    assert render(text) == "workflow:\n  foo: 1\n# bar: 2\n \nbaz : 3\n "


@pytest.mark.parametrize("version", ["2", "'2'", "2.0"])
def test_version_two_is_accepted(version: str) -> None:
    assert render(f"version: {version}\nworkflow:\n  a: 1\n") == "workflow:\n  a: 1"


@pytest.mark.parametrize("version", ["1", "3", "true", "two"])
def test_other_versions_are_refused(version: str) -> None:
    assert "Unsupported workflow version" in render_error(f"version: {version}\nworkflow: {{}}\n")


# --- default-values -----------------------------------------------------------------

@pytest.mark.parametrize("body", ["", " ~", " []", " {}"])
def test_empty_default_values_mean_none(body: str) -> None:
    assert render(f"default-values:{body}\nworkflow:\n  a: 1\n") == "workflow:\n  a: 1"


def test_default_values_must_be_a_mapping() -> None:
    message = render_error("default-values:\n  - a\nworkflow:\n  a: 1\n")
    assert message.startswith("t.yaml:1: default-values must be a mapping")


def test_default_values_yaml_error_names_its_line() -> None:
    message = render_error("workflow:\n  a: 1\ndefault-values:\n  a: [1\n  b: 2\n")
    assert message.startswith("t.yaml:") and "default-values is not valid YAML" in message


def test_default_values_types_render_as_python_prints_them() -> None:
    text = "workflow:\n  {{ a }} {{ b }} {{ c }} {{ d }} {{ e }}\ndefault-values:\n" \
           "  a: 22.04\n  b: 1.10\n  c: yes\n  d: ~\n  e: 2024-01-02\n"
    assert render(text) == "workflow:\n  22.04 1.1 True None 2024-01-02"


# --- runtime tokens -----------------------------------------------------------------

@pytest.mark.parametrize(
    "token",
    ["{{input:0}}", "{{input:12}}", "{{input:task}}", "{{input:wf-1:task}}", "{{host:master}}",
     "{{host:worker_1}}", "{{output}}", "{{workflow_id}}", "{{uuid}}"],
)
def test_runtime_tokens_are_kept_verbatim(token: str) -> None:
    assert render(f"workflow:\n  x: \"{token}/a\" {token}{{{{ n }}}}\n", "n=1") == \
        f"workflow:\n  x: \"{token}/a\" {token}1"


@pytest.mark.parametrize("token", ["{{ workflow_id }}", "{{ input:0 }}", "{{ output}}", "{{uuid }}"])
def test_tokens_with_spaces_are_not_tokens(token: str) -> None:
    message = render_error(f"workflow:\n  name: x\n  id: {token}\n")
    assert message.startswith("t.yaml:3: ")


def test_workflow_id_with_spaces_is_an_undefined_value() -> None:
    message = render_error("workflow:\n  id: {{ workflow_id }}\n")
    assert message.startswith("t.yaml:2: undefined value: 'workflow_id' is undefined")
    assert "{{workflow_id}}" in message  # the fix names the token form


def test_protect_tokens_uses_osmo_hash_names() -> None:
    protected, placeholders = protect_tokens("a {{input:0}} b {{input:0}} {{host:m}}")
    assert protected.count("{{hash") == 3 and "{{input" not in protected
    assert sorted(placeholders.values()) == ["{{host:m}}", "{{input:0}}"]


def test_a_value_that_looks_like_a_token_is_output_as_is() -> None:
    assert render("workflow:\n  {{ x }}\n", "x={{input:0}} {% raw %}") == \
        "workflow:\n  {{input:0}} {% raw %}"


# --- values -------------------------------------------------------------------------

def test_set_string_wins_over_set_and_keeps_leading_zeros() -> None:
    assert render("workflow: {{ v }} {{ w }}\n", "v=08", "w=1", set_strings=("v=08",)) == \
        "workflow: 08 1"


def test_set_coercion_shows_in_the_text() -> None:
    text = "workflow: {{ a }} {{ b }} {{ c }} {{ d }} {{ e }} {{ f }}\n"
    assert render(text, "a=08", "b=1_000", "c=1e3", "d=nan", "e=0x10", "f= 5 ") == \
        "workflow: 8 1000 1000.0 nan 0x10 5"


def test_novalue_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="--set novalue: expected KEY=VALUE"):
        render_text("workflow: 1\n", ValueOptions(sets=("novalue",)))


def test_dotted_set_renders_like_osmo_when_osmo_renders() -> None:
    defaults = "default-values:\n  a:\n    b: 1\n"
    rendered = render_text("workflow: {{ a.b }}\n" + defaults, ValueOptions(sets=("a.b=2",)))
    assert rendered.text == "workflow: 1"  # OSMO keeps a.b=1: the flat key 'a.b' is unused
    assert len(rendered.notes) == 1 and "a.b" in rendered.notes[0]
    # a template that tests definedness renders OSMO's text: `a` is NOT defined there
    text = "workflow: {{ a | default('none') }} {% if a is defined %}yes{% endif %}\n"
    assert render(text, "a.b=2") == "workflow: none "


def test_dotted_set_fills_in_where_osmo_fails() -> None:
    assert render("workflow: {{ a.b }} {{ c.d.e }}\n", "a.b=2", "c.d.e=x") == "workflow: 2 x"
    defaults = "default-values:\n  a:\n    keep: 1\n"
    rendered = render_text("workflow: {{ a.keep }} {{ a.b }}\n" + defaults,
                           ValueOptions(set_strings=("a.b=08",)))
    assert rendered.text == "workflow: 1 08"
    assert rendered.values["a"] == {"keep": 1, "b": "08"}


def test_dotted_set_still_failing_reports_the_error() -> None:
    assert "undefined" in render_error("workflow: {{ a.b }} {{ zzz }}\n", "a.b=2")


# --- errors and their lines ---------------------------------------------------------

def test_undefined_value_line_is_the_source_line() -> None:
    text = "# c\nversion: 2\n\nworkflow:\n  a: 1\n\n  b: {{ missing }}\n"
    message = render_error(text)
    assert message.startswith("t.yaml:7: undefined value: 'missing' is undefined")
    assert "--set missing=VALUE" in message


def test_undefined_attribute() -> None:
    message = render_error("workflow:\n  a: {{ d.nope }}\ndefault-values:\n  d: {x: 1}\n")
    assert message.startswith("t.yaml:2: undefined value:") and "nope" in message


def test_syntax_error_line_and_raw_hint() -> None:
    message = render_error("workflow:\n  a: 1\n  script: echo ${#arr[@]}\n")
    assert message.startswith("t.yaml:3: Jinja syntax error:")
    assert "{% raw %}" in message
    assert render_error("workflow:\n\n  {% if %}\n").startswith("t.yaml:3: Jinja syntax error")


def test_runtime_type_error_is_one_line() -> None:
    message = render_error("workflow:\n  a: {{ 'a' + 1 }}\n")
    assert message.startswith("t.yaml:2: Jinja template error: TypeError")


def test_rendered_fields(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    text = "default-values:\n  n: 1\n\nworkflow:\n  n: {{ n }}\n"
    path.write_text(text)
    rendered = render_file(path, ValueOptions(sets=("m=2",)))
    assert rendered.source == path and rendered.source_text == text
    assert rendered.workflow_line == 4
    assert rendered.values == {"n": 1, "m": 2}  # the token placeholders are not values
    assert rendered.text == "workflow:\n  n: 1"


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="cannot read the workflow file"):
        render_file(tmp_path / "absent.yaml", NO_VALUES)
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"workflow:\n  a: \xe9\n")
    with pytest.raises(RenderError, match="not UTF-8"):
        render_file(bad, NO_VALUES)


def test_is_templated_is_osmos_client_test() -> None:
    assert not is_templated("workflow:\n  a: '}}'\n")
    for marker in ("{{", "{%", "{#", "default-values"):
        assert is_templated(f"workflow:\n  a: '{marker}'\n")


def test_untemplated_files_render_like_templated_ones() -> None:
    # the server's dry run renders them too: only the cut, CRLF and final newline change
    assert render("version: 2\r\nworkflow:\r\n  a: 1\r\n") == "workflow:\n  a: 1"
