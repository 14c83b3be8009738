"""Slurm backend: one sbatch job per group, requeue on RESCHEDULE, failing nodes excluded.

See docs/slurm.md. ``dry_run`` is pure and returns a :class:`SlurmRequest` whose
``materialize()`` is the exact sbatch script; ``submit`` writes it and runs sbatch.
"""

from workflows.backends.slurm.backend import SbatchJob, SlurmBackend, SlurmRequest
from workflows.backends.slurm.script import SlurmOptions

__all__ = ["SbatchJob", "SlurmBackend", "SlurmOptions", "SlurmRequest"]
