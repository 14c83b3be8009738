"""The backend contract (torchx style): ``submit(dry_run(job, options))``.

``dry_run`` is pure: it returns a typed request whose ``materialize()`` is the exact
text that will be handed over (argv + spec for OSMO, the sbatch script for Slurm, the
plan for the local executor). ``--dry-run``, golden-file tests and ``submit`` all look
at that one object. ``submit`` is the only side effect.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from workflows.backends.options import BackendOption, parse_options

if TYPE_CHECKING:
    from workflows.pipeline import LoadedWorkflow


class Request(ABC):
    """What a backend will hand over, fully resolved."""

    #: True: ``--dry-run`` writes the files and prints :meth:`brief` (too long to read)
    long_request: ClassVar[bool] = False

    @abstractmethod
    def materialize(self) -> str:
        """The human-readable exact request (printed by ``--dry-run``)."""

    @abstractmethod
    def write(self, directory: Path) -> list[Path]:
        """Write the request's files under ``directory`` (``--output DIR``); return them."""

    def brief(self, written: list[Path]) -> str:
        """A short ``--dry-run`` summary naming the files just written and the exact
        command that submits them (for a :attr:`long_request`)."""
        return "\n".join(f"wrote {path}" for path in written)


@dataclass(frozen=True)
class SubmitResult:
    """What ``submit`` reports: an id to follow the job by, and a one-line message."""

    backend: str
    job_id: str
    message: str
    exit_code: int = 0


class Backend(ABC):
    """One place a workflow can run."""

    name: str = ""
    #: the backend's options, declared once: ``submit``'s flags and the checks come from it.
    options: tuple[BackendOption, ...] = ()
    #: True when resched runs OSMO's runtime itself (local, Slurm); False when the
    #: orchestrator does (osmo): then e.g. another workflow's task outputs are its business.
    emulates_runtime: bool = True
    #: the lint target (``osmo`` flags file:// urls, the others accept them).
    lint_target: str = "osmo"

    @property
    def option_help(self) -> Mapping[str, str]:
        """Option name -> help (derived from :attr:`options`)."""
        return {o.name: o.help for o in self.options}

    def parse_options(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every option, given ones checked and converted, the rest at their defaults."""
        return parse_options(self.options, given, self.name)

    @abstractmethod
    def dry_run(self, job: LoadedWorkflow, options: Mapping[str, Any]) -> Request:
        """Pure: build the exact request for ``job``."""

    @abstractmethod
    def submit(self, request: Request) -> SubmitResult:
        """Hand ``request`` over (the only side effect)."""
