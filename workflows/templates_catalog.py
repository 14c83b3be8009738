"""The shipped workflow templates: list them, and copy one into a folder to start from.

``resched templates`` lists every ``templates/*.yaml`` with the first line of its leading
comment. ``resched init NAME DIR`` writes ``DIR/train.yaml`` (the name the docs use) and
every file the template uploads through a relative ``localpath:`` (found by rendering it
with its default values), dereferencing symlinks. A user file is never overwritten
silently: without ``force`` the init is refused; with it, the old file is kept as
``<name>.bak``.

``resched init NAME DIR --script train.py --script-args "..."`` starts from the user's own
script instead of the example: the script is copied next to the spec (instead of the
template's example) and ``DIR/values.yaml`` names it (``train_script``) and its flags
(``script_args``), for ``-f DIR/values.yaml``. Only templates that take ``script_args``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from workflows.errors import UsageError

TEMPLATES_DIR = Path(__file__).resolve().parent.parent / "templates"
SPEC_NAME = "train.yaml"
VALUES_NAME = "values.yaml"
SCRIPT_VALUE = "script_args"


@dataclass(frozen=True)
class Template:
    name: str
    path: Path
    description: str


@dataclass(frozen=True)
class InitResult:
    written: tuple[Path, ...]
    backups: tuple[Path, ...]


def _description(path: Path) -> str:
    """The first line of the template's leading ``#`` comment."""
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if text:
            return text
    return "(no description)"


def list_templates(directory: Path = TEMPLATES_DIR) -> tuple[Template, ...]:
    return tuple(
        Template(path.stem, path, _description(path))
        for path in sorted(directory.glob("*.yaml"))
        if not path.name.startswith("_")
    )


def find_template(name: str, directory: Path = TEMPLATES_DIR) -> Template:
    templates = {t.name: t for t in list_templates(directory)}
    key = name.removesuffix(".yaml")
    if key not in templates:
        raise UsageError(
            f"no shipped template named {name!r}",
            fix=f"use one of {', '.join(templates) or '(none shipped)'}; `resched templates` lists them",
        )
    return templates[key]


def referenced_files(template: Template) -> tuple[Path, ...]:
    """Relative ``localpath:`` files of the template rendered with its default values."""
    from workflows.pipeline import parse_rendered
    from workflows.render import render_file
    from workflows.values import ValueOptions

    spec = parse_rendered(render_file(template.path, ValueOptions(files=(), sets=(), set_strings=())))
    found: list[Path] = []
    for task in spec.all_tasks():
        for file in task.files:
            if file.localpath is None or Path(file.localpath).is_absolute():
                continue
            relative = Path(file.localpath)
            source = template.path.parent / relative
            if ".." in relative.parts or not source.exists():
                raise UsageError(
                    f"template {template.name} references localpath {file.localpath}, which "
                    "is not shipped next to it",
                    fix="report this: the shipped template is broken",
                )
            if relative not in found:
                found.append(relative)
    return tuple(found)


def _same_content(source: Path, dest: Path) -> bool:
    try:
        return dest.is_file() and dest.read_bytes() == source.resolve().read_bytes()
    except OSError:
        return False


def _backup_name(path: Path) -> Path:
    backup = path.with_name(path.name + ".bak")
    number = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak{number}")
        number += 1
    return backup


def init_template(name: str, directory: Path, *, force: bool = False,
                  script: Path | None = None, script_args: str = "") -> InitResult:
    """Copy template ``name`` to ``directory/train.yaml`` plus the files it uploads (or,
    with ``script``, that script and a ``values.yaml`` naming it)."""
    template = find_template(name)
    copies = [(template.path, directory / SPEC_NAME)]
    values_text = None
    if script is None:
        copies += [(template.path.parent / rel, directory / rel)
                   for rel in referenced_files(template)]
    else:
        _check_takes_script(template)
        if not script.is_file():
            raise UsageError(f"--script {script}: no such file", fix="give the path of your training script")
        copies.append((script, directory / script.name))
        values_text = (f"# resched init {name} --script {script.name}: use with -f {VALUES_NAME}\n"
                       f"train_script: {json.dumps(script.name)}\n"
                       f"{SCRIPT_VALUE}: {json.dumps(script_args)}\n")
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory", fix="choose another DIR")
    # A file that already holds exactly what we would write is no user file at risk.
    existing = [
        dest for source, dest in copies
        if (dest.exists() or dest.is_symlink()) and not _same_content(source, dest)
    ]
    if existing and not force:
        raise UsageError(
            "refusing to overwrite " + ", ".join(str(p) for p in existing),
            fix="choose an empty DIR, or pass --force (the old files are kept as .bak)",
        )
    backups = []
    for dest in existing:
        if dest.is_dir():
            raise UsageError(f"{dest} is a directory", fix="move it away or choose another DIR")
        backup = _backup_name(dest)
        dest.rename(backup)
        backups.append(backup)
    for source, dest in copies:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source.resolve(), dest)  # dereferences symlinks (train.py), keeps mode
    written = [dest for _, dest in copies]
    if values_text is not None:
        written.append(_write_new(directory / VALUES_NAME, values_text, force=force,
                                  backups=backups))
    return InitResult(tuple(written), tuple(backups))


def _check_takes_script(template: Template) -> None:
    from workflows.values import safe_load_yaml

    head = template.path.read_text(encoding="utf-8").split("\nworkflow:", 1)[0]
    defaults = (safe_load_yaml(head) or {}).get("default-values") or {}
    if SCRIPT_VALUE not in defaults:
        takes = [t.name for t in list_templates() if t.path != template.path
                 and SCRIPT_VALUE in t.path.read_text(encoding="utf-8")]
        raise UsageError(f"template {template.name} does not take your own script (no "
                         f"{SCRIPT_VALUE} value)", fix=f"use one of: {', '.join(takes)}")


def _write_new(path: Path, text: str, *, force: bool, backups: list[Path]) -> Path:
    """Write ``path``; an existing different file is refused, or kept as .bak with force."""
    if path.exists() or path.is_symlink():
        if path.is_file() and path.read_text(encoding="utf-8", errors="replace") == text:
            return path
        if not force:
            raise UsageError(f"refusing to overwrite {path}",
                             fix="choose an empty DIR, or pass --force (the old file is kept as .bak)")
        backup = _backup_name(path)
        path.rename(backup)
        backups.append(backup)
    path.write_text(text, encoding="utf-8")
    return path
