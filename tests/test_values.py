"""Values: OSMO's --set coercion and precedence, -f files, dotted-key helpers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from workflows.errors import UsageError
from workflows.values import (
    ValueOptions,
    apply_dotted_keys,
    coerce_set_value,
    deep_merge,
    dotted_assignments,
    dotted_key_notes,
    load_values_file,
    resolve_values,
    split_set_item,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("08", 8),  # int() accepts leading zeros in a string
        ("1_000", 1000),  # and underscores
        (" 5 ", 5),  # and surrounding whitespace
        ("-3", -3),
        ("+7", 7),
        ("1e3", 1000.0),  # int() fails, float() takes it
        ("1.10", 1.1),
        ("inf", math.inf),
        ("-Infinity", -math.inf),
        ("0x10", "0x10"),  # neither int() nor float() base-16: stays a string
        ("1,000", "1,000"),
        ("", ""),
        ("true", "true"),  # no YAML booleans: OSMO does not parse YAML here
        ("٣", 3),  # Python's int() takes any Unicode decimal digit
        ("a=b", "a=b"),
    ],
)
def test_coercion_follows_python_int_then_float(text: str, expected: object) -> None:
    value = coerce_set_value(text)
    assert value == expected
    assert type(value) is type(expected)


def test_nan_is_a_float_nan() -> None:
    value = coerce_set_value("nan")
    assert isinstance(value, float) and math.isnan(value)


def test_split_at_the_first_equals() -> None:
    assert split_set_item("a=b=c") == ("a", "b=c")
    assert split_set_item(" k =v") == (" k ", "v")  # the key is used as is
    # issue 13: an empty key is stored by OSMO but no template can read it
    with pytest.raises(UsageError, match="KEY before '=' is empty"):
        split_set_item("=x")


def test_missing_equals_is_a_usage_error_naming_the_argument() -> None:
    with pytest.raises(UsageError) as caught:
        split_set_item("novalue", "--set-string")
    assert str(caught.value).startswith("--set-string novalue: expected KEY=VALUE")
    with pytest.raises(UsageError, match="--set novalue: expected KEY=VALUE"):
        resolve_values({}, ValueOptions(sets=("ok=1", "novalue")))


def test_precedence_defaults_files_set_set_string(tmp_path: Path) -> None:
    first = tmp_path / "a.yaml"
    first.write_text("a: file-a\nb: file-a\nnested: {x: 1, y: 1}\n")
    second = tmp_path / "b.yaml"
    second.write_text("b: file-b\nnested: {y: 2}\n")
    defaults = {"a": "default", "c": "default", "d": "default", "nested": {"z": 0}}
    options = ValueOptions(
        files=(first, second),
        # --set-string is applied after EVERY --set, whatever the order given
        sets=("c=1", "d=2", "d=3"),
        set_strings=("c=string",),
    )
    values = resolve_values(defaults, options)
    assert values == {
        "a": "file-a",
        "b": "file-b",
        "c": "string",
        "d": 3,  # the later --set wins
        "nested": {"x": 1, "y": 2, "z": 0},
    }
    assert defaults["nested"] == {"z": 0}  # the defaults are not changed in place


def test_dotted_set_keys_stay_flat_like_osmo() -> None:
    values = resolve_values({"a": {"b": 1}}, ValueOptions(sets=("a.b=2",)))
    assert values == {"a": {"b": 1}, "a.b": 2}


def test_deep_merge_replaces_non_mappings() -> None:
    assert deep_merge({"a": {"b": 1}, "l": [1]}, {"a": 5, "l": [2]}) == {"a": 5, "l": [2]}
    assert deep_merge({"a": 5}, {"a": {"b": 1}}) == {"a": {"b": 1}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("- a\n- b\n", "must hold a mapping"),
        ("a: [1\n", "not valid YAML"),
    ],
)
def test_bad_values_files_are_usage_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "v.yaml"
    path.write_text(content)
    with pytest.raises(UsageError, match=message) as caught:
        load_values_file(path)
    assert str(path) in str(caught.value)


def test_missing_values_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read values file"):
        load_values_file(tmp_path / "absent.yaml")


def test_empty_values_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "v.yaml"
    path.write_text("# nothing\n")
    assert load_values_file(path) == {}


def test_dotted_assignments_take_the_winning_value() -> None:
    options = ValueOptions(sets=("a.b=1", "plain=2", "a.b=3", "x..y=4", ".z=5"),
                           set_strings=("a.c=08",))
    assert dotted_assignments(options) == {"a.b": 3, "a.c": "08"}


def test_apply_dotted_keys_fills_only_missing_values() -> None:
    values = {"a": {"keep": 1, "b": "old"}, "s": "scalar"}
    extended = apply_dotted_keys(values, {"a.b": "new", "a.c.d": 2, "s.x": 3, "n.m": 4})
    assert extended == {
        "a": {"keep": 1, "b": "old", "c": {"d": 2}},  # existing a.b kept, as OSMO keeps it
        "s": "scalar",  # a scalar in the way: the key stays flat only
        "n": {"m": 4},
    }
    assert values == {"a": {"keep": 1, "b": "old"}, "s": "scalar"}


def test_notes_name_dotted_keys_that_osmo_ignores() -> None:
    notes = dotted_key_notes({"a": {"b": 1}, "c": {"d": 2}}, {"a.b": 5, "c.d": 2, "e.f": 1})
    assert len(notes) == 1
    assert notes[0].startswith("--set a.b=5: OSMO keys are flat")
