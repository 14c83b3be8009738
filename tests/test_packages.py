"""Issue 21 part 7: the suite passes on pinned and on the newest allowed packages.

The README's test command failed on a fresh machine because a test matched a message
that PyYAML's libyaml writes in its own words. So: the README and CI install the pinned
versions of constraints.txt; ``.ci/run --newest`` runs the newest allowed ones; no test
matches a third-party library's wording; the code compiles and imports without the
warnings the suite used to print (Click's ``make_default_short_help`` deprecation,
invalid escape sequences).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_the_readme_and_ci_run_one_command_and_it_uses_the_constraints() -> None:
    done = subprocess.run([str(REPO / ".ci" / "run"), "--check"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    readme = (REPO / "README.md").read_text()
    block = readme.split("<!-- test-command -->", 1)[1].split("```")[1]
    assert block.count("-c constraints.txt") == 2  # torch first, then the package
    assert "--newest" in (REPO / ".ci" / "run").read_text()


def test_constraints_pin_every_declared_dependency() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_requirement_name(s) for s in project["dependencies"]}
    for extra in ("test", "s3", "fast"):
        declared |= {_requirement_name(s) for s in project["optional-dependencies"][extra]}
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    assert declared - set(pins) == set(), "pin them in constraints.txt"
    assert pins["torch"] == "2.13.0" and "resched" not in pins
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", v) for v in pins.values())


def test_no_source_has_an_invalid_escape_sequence() -> None:
    found = []
    for path in sorted(REPO.glob("**/*.py")):
        if any(part.startswith(".") or part in ("build", "dist") for part in path.relative_to(REPO).parts):
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(path.read_text(encoding="utf-8"), str(path), "exec")
        found += [f"{path}:{w.lineno}: {w.message}" for w in caught]
    assert found == []


def test_the_cli_imports_and_lists_commands_without_deprecation_warnings() -> None:
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-m",
                           "workflows.cli", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "classify" in done.stdout


def test_no_test_matches_a_third_party_exception_by_its_words() -> None:
    # a library's message changes with its version (and its C build): tests match our
    # own errors, which say what resched says
    foreign = re.compile(r"pytest\.raises\(\s*\(?\s*(?:yaml|pydantic|click|torch|jinja2|fsspec|"
                         r"s3fs|botocore)\.[\w.]*[^)]*match=")
    hits = [f"{p.name}:{n}" for p in sorted((REPO / "tests").glob("*.py"))
            for n, line in enumerate(p.read_text().splitlines(), 1) if foreign.search(line)]
    assert hits == []
