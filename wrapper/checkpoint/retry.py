"""Retry of transient store errors with capped exponential backoff (sleep injected)."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

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


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 5  # as OSMO's checkpoint uploads: up to 5 tries
    base_s: float = 0.5
    max_s: float = 10.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def delay(self, failures: int) -> float:
        return min(self.max_s, self.base_s * (2 ** (failures - 1)))

    def call(self, operation: Callable[[], T], *, what: str) -> T:
        failures = 0
        while True:
            try:
                return operation()
            except Exception as error:  # classified below; permanent ones re-raise at once
                failures += 1
                if not is_transient(error) or failures >= self.attempts:
                    raise StoreOperationError(what, error, failures) from error
                self.sleep(self.delay(failures))


class StoreOperationError(Exception):
    """A store operation that failed for good (internal; the store turns it into a
    CheckpointError with the context of the whole publish/restore)."""

    def __init__(self, what: str, cause: BaseException, attempts: int) -> None:
        super().__init__(f"{what}: {type(cause).__name__}: {cause} (after {attempts} attempt(s))")
        self.cause = cause
        self.attempts = attempts
