"""Property tests: nothing crashes the renderer; the OSMO escape always round-trips."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from workflows.backends.osmo import escape_for_server
from workflows.errors import ReschedError
from workflows.render import render_text, split_sections
from workflows.values import ValueOptions

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters that matter to YAML, Jinja, the section cut and the token regex.
_ALPHABET = st.sampled_from(list("{}%#-+:=\\'\"!|>&*[]$@ \t\n\rabwxyz019_.~") +
                            ["{{", "}}", "{%", "%}", "{#", "#}", "workflow:", "\nworkflow:",
                             "\ndefault-values:", "\nversion:", "{{input:0}}", "{{host:m}}",
                             "{{output}}", "{{ workflow_id }}", "{% raw %}", "{% endraw %}",
                             "\nfoo:", "é", "\x00", "\u2028", "hash1"])
_TEXT = st.lists(_ALPHABET, max_size=40).map("".join)


def _render_or_user_error(text: str, options: ValueOptions) -> str | None:
    try:
        return render_text(text, options).text
    except ReschedError as error:
        assert "\n" not in str(error)  # one line, whatever went wrong
        return None


@SETTINGS
@given(text=_TEXT)
def test_random_text_never_crashes(text: str) -> None:
    _render_or_user_error(text, ValueOptions())


@SETTINGS
@given(body=_TEXT, defaults=st.text(max_size=60))
def test_random_default_values_never_crash(body: str, defaults: str) -> None:
    _render_or_user_error(f"workflow:\n{body}\ndefault-values:\n{defaults}", ValueOptions())


@SETTINGS
@given(sets=st.lists(st.text(max_size=20), max_size=5),
       set_strings=st.lists(st.text(max_size=20), max_size=3))
def test_random_set_values_never_crash(sets: list[str], set_strings: list[str]) -> None:
    template = "workflow:\n  a: {{ a }}\n  b: {{ b | default('x') }}\ndefault-values:\n  a: 1\n"
    _render_or_user_error(template, ValueOptions(sets=tuple(sets), set_strings=tuple(set_strings)))


@SETTINGS
@given(value=st.text(max_size=30))
def test_any_set_string_value_is_rendered_verbatim(value: str) -> None:
    text = render_text("workflow: <{{ v }}>\n", ValueOptions(set_strings=(f"v={value}",))).text
    assert text == f"workflow: <{value}>"


_PREVIEW_TAILS = st.one_of(_TEXT, st.text(max_size=60))


@SETTINGS
@given(tail=_PREVIEW_TAILS)
@example(tail="\n  script: |\n    n=${#arr[@]}\n")
@example(tail=" {#}\n  a: '{%' #} {{ x }}\n")
@example(tail="\n  t: x{{input:0}}}{{{host:a}} {{input:a }} {{input:{{input:0}}\n")
@example(tail="\ndefault-values:\n  a: 1\nversion: 2\n")
@example(tail="\r\n{% endraw %}\r")
@example(tail="{")
@example(tail="{\r")
@example(tail="\n\n")
def test_escape_for_server_round_trips(tail: str) -> None:
    preview = "workflow:" + tail
    sent = escape_for_server(preview)
    assert list(split_sections(sent)) == ["workflow"]  # the server cuts one section
    assert render_text(sent, ValueOptions()).text == preview


_TEMPLATE_LINES = st.sampled_from([
    "  a: {{ a }}", "  s: {% raw %}${#arr[@]} {{ x }} {%{% endraw %}", "  t: {{input:0}}",
    "  h: {{host:master}}-{{ a }}", "{% for i in range(a) %}  - {{ i }}{% endfor %}",
    "  v: {{ v }}", "", "  # {{ a }}", "  x: \"{{ '{#' }}\"", "{{ '\\n' }}k: 1",
])


@SETTINGS
@given(lines=st.lists(_TEMPLATE_LINES, max_size=8), value=st.text(max_size=12))
def test_every_rendered_template_round_trips_through_the_escape(lines: list[str], value: str) -> None:
    template = "workflow:\n" + "\n".join(lines) + "\ndefault-values:\n  a: 2\n"
    preview = _render_or_user_error(template, ValueOptions(set_strings=(f"v={value}",)))
    if preview is None:
        return
    assert render_text(escape_for_server(preview), ValueOptions()).text == preview


@SETTINGS
@given(content=st.one_of(st.text(max_size=80), _TEXT))
def test_random_values_files_never_crash(content: str) -> None:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "values.yaml"
        path.write_text(content, encoding="utf-8")
        _render_or_user_error("workflow: {{ a | default(1) }}\n", ValueOptions(files=(path,)))
