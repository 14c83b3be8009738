"""What publish / restore / list / verify / stage return (frozen, plain data)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class PublishResult:
    url: str
    checkpoint_id: str
    step: int | None
    files: int
    size: int
    uploaded_files: int  # blobs actually sent (the rest were already in the store)
    uploaded_bytes: int
    changed: bool  # False: the store's latest already held exactly this content
    seconds: float
    deleted_manifests: int = 0  # garbage and retired checkpoints removed afterwards
    deleted_blobs: int = 0


@dataclass(frozen=True)
class RestoreResult:
    url: str
    local_dir: Path
    checkpoint_id: str
    step: int | None
    files: int
    size: int
    fell_back_from: tuple[str, ...] = ()  # newer checkpoint ids that failed verification
    reason: str | None = None  # why the newest one(s) were not used
    seconds: float = 0.0

    @property
    def fell_back(self) -> bool:
        return bool(self.fell_back_from)


@dataclass(frozen=True)
class CheckpointInfo:
    checkpoint_id: str
    step: int | None
    time: float
    size: int
    files: int
    state: str  # "complete" (committed by the pointer) | "torn" (manifest never committed)
    latest: bool = False
    # torn saves this checkpoint keeps aside (``.resched-torn/<set>/``), never restored
    torn_sets: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckpointCheck:
    checkpoint_id: str
    step: int | None
    ok: bool
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class VerifyResult:
    url: str
    checks: tuple[CheckpointCheck, ...]
    orphan_blobs: int = 0

    @property
    def ok(self) -> bool:
        return bool(self.checks) and self.checks[0].ok

    @property
    def all_ok(self) -> bool:
        return all(check.ok for check in self.checks)


@dataclass(frozen=True)
class StageResult:
    url: str
    dest: Path
    kind: str  # "store" (verified restore) | "tree" (plain copy) | "empty" (nothing there)
    files: int
    step: int | None = None
    restore: RestoreResult | None = None
