"""docker/Dockerfile (resched in the NGC PyTorch image), checked without docker: its COPY
lines hold everything the package is built from (a wheel is built from exactly those
files here), it installs that folder, and the command it checks resolves to the console
script pyproject.toml declares."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from click.testing import CliRunner

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "docker" / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _copies() -> list[tuple[list[str], str]]:
    return [(rest.split()[:-1], rest.split()[-1]) for word, rest in _instructions() if word == "COPY"]


def test_it_builds_on_the_ngc_pytorch_image() -> None:
    steps = _instructions()
    args = dict(rest.split("=", 1) for word, rest in steps if word == "ARG")
    assert args["BASE_IMAGE"].startswith("nvcr.io/nvidia/pytorch:")
    assert ("FROM", "${BASE_IMAGE}") in steps


def test_the_copied_files_build_the_package_with_its_entrypoint(tmp_path: Path) -> None:
    context = tmp_path / "opt-resched"
    for sources, target in _copies():
        assert target.startswith("/opt/resched")
        for source in sources:
            destination = context / Path(target).relative_to("/opt/resched")
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, destination,
                                ignore=shutil.ignore_patterns("__pycache__"))
            else:
                destination.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / source, destination / source)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                            "--no-build-isolation", "-w", str(tmp_path / "dist"), str(context)],
                           capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "dist").glob("resched-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert f"resched = {scripts['resched']}" in entry_points
    for needed in ("wrapper/classifier/catalogue.yaml", "wrapper/integrations/hf.py", "workflows/cli/__init__.py"):
        assert needed in names
    assert any(n.startswith("templates/") and n.endswith(".yaml") for n in names)


def test_it_installs_that_folder_and_checks_the_entrypoint_it_declares() -> None:
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    assert re.search(r'pip install [^&]*"/opt/resched(\[[a-z0-9,]+\])?"', runs)
    assert "resched --version" in runs
    module, function = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"][
        "resched"].split(":")
    main = getattr(__import__(module, fromlist=[function]), function)
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and "resched" in result.output
