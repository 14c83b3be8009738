"""Retry of transient store errors: capped exponential backoff, a total deadline (sleep and
clock injected)."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from wrapper.backoff import Backoff

T = TypeVar("T")

# Errors that say "this will not get better by waiting".
_PERMANENT = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
              FileExistsError, ValueError)
# A full disk, a read-only or over-quota filesystem, a name too long: waiting 15 s
# changes nothing, and the publish must clean up and say so at once.
_PERMANENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.ENAMETOOLONG, errno.ELOOP,
                     errno.EFBIG, errno.EINVAL, errno.ENXIO, errno.ENODEV}
# botocore's own "your request is malformed / you have no credentials" errors.
_PERMANENT_NAMES = {"ParamValidationError", "NoCredentialsError", "PartialCredentialsError",
                    "NoRegionError", "InvalidS3AddressingStyleError", "UnknownSignatureVersionError"}


def is_transient(error: BaseException) -> bool:
    if isinstance(error, _PERMANENT) or type(error).__name__ in _PERMANENT_NAMES:
        return False
    if isinstance(error, OSError) and error.errno in _PERMANENT_ERRNOS:
        return False
    if isinstance(error, (ConnectionError, TimeoutError, OSError)):
        return True
    module = type(error).__module__ or ""
    return module.split(".")[0] in ("botocore", "aiohttp", "aiobotocore", "urllib3", "requests")


def _default_deadline() -> float:
    try:
        return float(os.environ.get("RESCHED_STORE_DEADLINE_S", "") or 120.0)
    except ValueError:
        return 120.0


@dataclass(frozen=True)
class RetryPolicy:
    """Up to ``attempts`` tries of one store operation, waiting between them as
    ``wrapper.backoff.Backoff`` says (exponential, capped, optional stable jitter),
    and none started after ``deadline_s`` from the first (``$RESCHED_STORE_DEADLINE_S``,
    default 120 s): a store that is gone costs a bounded time, then one clear error.
    Each try is itself bounded by the client's connect and read timeouts (storefs)."""

    attempts: int = 5  # as OSMO's checkpoint uploads: up to 5 tries
    base_s: float = 0.5
    max_s: float = 10.0
    deadline_s: float = field(default_factory=_default_deadline)
    jitter: float = 0.0  # a fraction of each wait (Backoff's stable jitter); 0: exact waits
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, compare=False)

    def delay(self, failures: int, what: str = "") -> float:
        return Backoff(base_s=self.base_s, max_s=self.max_s, jitter=self.jitter).delay_s(failures, what)

    def call(self, operation: Callable[[], T], *, what: str) -> T:
        failures = 0
        started = self.clock()
        while True:
            try:
                return operation()
            except Exception as error:  # classified below; permanent ones re-raise at once
                failures += 1
                wait = self.delay(failures, what)
                out_of_time = self.clock() - started + wait > self.deadline_s
                if not is_transient(error) or failures >= self.attempts or out_of_time:
                    raise StoreOperationError(what, error, failures) from error
                self.sleep(wait)


class StoreOperationError(Exception):
    """A store operation that failed for good (internal; the store turns it into a
    CheckpointError with the context of the whole publish/restore)."""

    def __init__(self, what: str, cause: BaseException, attempts: int) -> None:
        super().__init__(f"{what}: {type(cause).__name__}: {cause} (after {attempts} attempt(s))")
        self.cause = cause
        self.attempts = attempts
