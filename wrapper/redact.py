"""Credentials never reach a terminal, a log line or a record: one function for all.

``redact(text)`` masks, in any free text:
- the user-info of a URL (``s3://KEY:SECRET@host/bucket`` -> ``s3://***@host/bucket``),
  also without its scheme (``KEY:SECRET@host``, as libraries echo a stripped path);
  the secret may itself hold ``/`` or ``+`` (AWS secret keys do), so everything from
  the first ``:`` after the scheme up to the ``@`` is masked;
- values of query-string parameters whose name says secret (``X-Amz-Signature``,
  ``X-Amz-Credential``, ``sig``, ``token``, ``password``, ``access_key`` ...), as in
  presigned S3 / Azure SAS URLs;
- ``name=value`` / ``name: value`` pairs whose name says secret (``aws_secret_access_key=``,
  ``'secret': '...'`` in a repr of storage options);
- the literal value of every environment variable whose name says secret
  (``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``*_PASSWORD``, ...), wherever
  it is echoed (an error message from a library that quotes the key it was given).

It is applied where text leaves the process: the top-level CLI error printer, the
checkpoint commands' output, the wrapper's ``say`` / events and its JSON records.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

MASK = "***"

# Names that hold a credential. "key" only with a qualifier (access_key, api-key,
# AccountKey) and the short SAS names only in a query string, so that ordinary words
# ("keys", "session", "signal") in messages stay readable.
_SECRET_NAME = (
    r"[\w.-]*?(?:secret|passw(?:or)?d|pwd|token|signature|credential|authorization)[\w.-]*"
    r"|(?:[\w.-]*?[_.-]?)(?:access|api|private|account|sas|session)[_.-]?key(?:[_.-]?id)?"
)
_QUERY_ONLY_NAME = r"|sig|sk|key|code"
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^\s/@:?#]*)(?::[^\s@]*)?@"
)
# The same user-info once a library stripped the scheme ("KEY:SECRET@host/bucket"). A
# "host" that is only a duration or a checkpoint count is a chaos spec
# ("kill:master@20s", "term:master@3ckpt"), which has the same shape and no secret.
_BARE_USERINFO = re.compile(
    r"(?<![/\w.%+-])[^\s/@:'\"=(\[,]+:(?!//)[^\s@'\"]*@"
    r"(?!\d+(?:\.\d+)?(?:ms|us|s|m|h|d|ckpt)?(?![\w.:/]))")
_QUERY_SECRET = re.compile(
    rf"(?P<lead>[?&;](?i:{_SECRET_NAME}{_QUERY_ONLY_NAME})=)[^&\s#'\"]*")
_PAIR_SECRET = re.compile(
    rf"(?P<lead>(?<![\w.-])(?i:{_SECRET_NAME})['\"]?\s*[=:]\s*['\"]?)"
    r"(?P<value>[^\s'\",;&}\]]+)"
)
# fsspec storage options spell the S3 pair "key" / "secret": a quoted "key" is one.
_QUOTED_KEY = re.compile(r"(?P<lead>(['\"])key\2\s*:\s*(['\"]))(?P<value>[^'\"]*)")
_ENV_SECRET_NAME = re.compile(
    r"(SECRET|PASSWORD|PASSWD|TOKEN|ACCESS_KEY|API_KEY|CREDENTIAL|PRIVATE_KEY|SESSION)",
    re.IGNORECASE,
)
_MIN_ENV_SECRET = 6  # shorter values ("1", "true") would mask unrelated text
_URL_PARTS = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://(?P<user>[^/@:?#]*)(?::(?P<pw>[^@]*))?@")
_known: set[str] = set()


def register_url_secrets(url: str, options: Mapping[str, Any] | None = None) -> None:
    """Remember the credentials a store URL (and its storage options) carries, so that
    any later echo of them is masked literally, even cut into pieces by a library
    (a secret with "/" reported as part of a bucket name)."""
    found: list[str] = []
    match = _URL_PARTS.match(url or "")
    if match:
        found += [match["user"] or "", match["pw"] or ""]
    found += [m.group(0).split("=", 1)[1] for m in _QUERY_SECRET.finditer(url or "")]
    for name, value in (options or {}).items():
        if isinstance(value, str) and (name in ("key", "secret", "token", "password")
                                       or _ENV_SECRET_NAME.search(name)):
            found.append(value)
    for value in found:
        pieces = [value, *re.split(r"[/:+=%&]", value)]
        _known.update(piece for piece in pieces if len(piece) >= _MIN_ENV_SECRET)


def _env_secrets(env: Mapping[str, str]) -> list[str]:
    values = {value for name, value in env.items()
              if _ENV_SECRET_NAME.search(name) and len(value) >= _MIN_ENV_SECRET}
    return sorted(values, key=len, reverse=True)  # longest first: no partial leftovers


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with every credential it shows replaced by ``***``."""
    if not text:
        return text
    literal = _env_secrets(os.environ if env is None else env) + list(_known)
    for value in sorted(literal, key=len, reverse=True):
        text = text.replace(value, MASK)

    def userinfo(match: re.Match[str]) -> str:
        return f"{match['scheme']}{MASK}@"

    text = _URL_USERINFO.sub(userinfo, text)
    text = _BARE_USERINFO.sub(f"{MASK}@", text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['lead']}{MASK}", text)

    def pair(match: re.Match[str]) -> str:
        return match["lead"] + (match["value"] if match["value"] == MASK else MASK)

    text = _PAIR_SECRET.sub(pair, text)
    return _QUOTED_KEY.sub(lambda m: f"{m['lead']}{MASK}", text)


def redact_data(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """A copy of JSON-like ``data`` with every string (keys included) redacted."""
    if isinstance(data, str):
        return redact(data, env)
    if isinstance(data, Mapping):
        return {redact(str(k), env) if isinstance(k, str) else k: redact_data(v, env)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(item, env) for item in data]
    return data
