"""Credentials never reach a terminal, a log line or a record: one function for all.

``redact(text)`` masks, in any free text:
- the user-info of a URL (``s3://KEY:SECRET@host/bucket`` -> ``s3://***@host/bucket``),
  also without its scheme (``KEY:SECRET@host``, as libraries echo a stripped path; a
  "scheme" no store or service uses is masked too: ``KEY://SECRET@host`` is what a secret
  that starts with ``//`` looks like once its scheme was stripped);
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

plus command-line options and argv lists whose flag names a secret, and known token
shapes (``AKIA...``, ``hf_...``, ``ghp_...``, JWTs, ...). It is applied to every text the
CLI prints (``wrapper.safe_output``) and to every record and history file written.
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
# (The "scheme" may start with a digit: "0000://SECRET@" is a stripped "0000:" key whose
# secret starts with "//", and _masked_url_userinfo masks it whole.)
# The password runs to the LAST "@" of the token: a password may hold "@" and "/" (people
# paste them unencoded), and masking a path segment too is better than half a secret.
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z0-9][A-Za-z0-9+.-]*://)(?P<user>[^\s/@:?#'\"]*)(?P<pw>:[^\s'\"]*)?@"
)
# The same user-info once a library stripped the scheme ("KEY:SECRET@host/bucket"). A
# "host" that is only a duration or a checkpoint count is a chaos spec
# ("kill:master@20s", "term:master@3ckpt", "hang:master@500step", also as "fault kill:master@20s: ..." in the
# report), which has the same shape and no secret.
# A known scheme's "x://...@" is the URL pattern's to judge (it keeps the scheme readable and
# leaves "https://host/@user" paths alone); any other "X://...@" is a key whose secret
# starts with "//" as far as anyone can tell, and is masked whole.
# (URL schemes of the object stores and fsspec protocols resched is given, and of the
# services whose URLs logs quote.)
_KNOWN_SCHEMES = (r"s3[an]?|gs|gcs|https?|wss?|az|abfss?|wasbs?|adl|hdfs|webhdfs|file|local|memory|"
                  r"oci|oss|cos|obs|r2|s?ftps?|ssh|smb|webdavs?|git|github|lakefs|zip|tar|rediss?|"
                  r"postgres(?:ql)?|mysql|mongodb(?:\+srv)?|amqps?|hf|dbfs")
_KNOWN_SCHEME = re.compile(_KNOWN_SCHEMES, re.IGNORECASE)
_BARE_USERINFO = re.compile(
    rf"(?<![/\w.%+-])(?!(?i:{_KNOWN_SCHEMES})://)[^\s/@:'\"=(\[,]+:[^\s'\"]*@"
    r"(?!\d+(?:\.\d+)?(?:ms|us|s|m|h|d|ckpt|steps?)?(?:(?![\w.:/])|:(?:\s|$)))")
# User-info never spans whitespace or quotes: it is looked for token by token, and only in
# tokens with an "@", so that the backtracking of the two patterns above stays within one
# short token (a 200 KB "a:a:a:..." line took 38 s when they ran over the whole text).
_TOKEN = re.compile(r"[^\s'\"]*@[^\s'\"]*")
_LONG_TOKEN = 4096


def _userinfo_in_token(match: re.Match[str]) -> str:
    token = match.group(0)
    if len(token) > _LONG_TOKEN and ":" in token:
        return MASK  # too long to take apart cheaply: none of it is shown
    token = _URL_USERINFO.sub(_masked_url_userinfo, token)
    return _BARE_USERINFO.sub(f"{MASK}@", token)


def _masked_url_userinfo(match: re.Match[str]) -> str:
    """``s3://KEY:SECRET@`` -> ``s3://***@``. User-info without a password is masked with
    what looks like its scheme: "KEY://SECRET@host" is also what a library prints of a
    stripped "KEY:SECRET@host" whose secret starts with "//" (an AWS secret key may), and
    then the "scheme" is the key (found by the property test in test_checkpoint_redact)."""
    if match["pw"] or match["user"] == MASK or _KNOWN_SCHEME.fullmatch(match["scheme"][:-3]):
        return f"{match['scheme']}{MASK}@"  # (the user MASK: already redacted, kept as is)
    return f"{MASK}@"


_QUERY_SECRET = re.compile(
    rf"(?P<lead>[?&;](?i:{_SECRET_NAME}{_QUERY_ONLY_NAME})=)[^&\s#'\"]*")
# "name=value" / "name: value" / "'name': 'value'"; the name is judged by secret_name().
_PAIR_SECRET = re.compile(
    r"(?P<lead>(?<![\w.-])(?P<name>[A-Za-z][\w.-]*)['\"]?\s*[=:]\s*['\"]?)"
    r"(?P<value>[^\s'\",;&}\]]+)"
)
# fsspec storage options spell the S3 pair "key" / "secret": a quoted "key" is one.
_QUOTED_KEY = re.compile(r"(?P<lead>(['\"])key\2\s*:\s*(['\"]))(?P<value>[^'\"]*)")
# Known token shapes, masked wherever they appear even with no name beside them (a log
# line echoing a header, a traceback quoting an argument). Sources: AWS IAM key ids
# (AKIA/ASIA...), Hugging Face (hf_), GitHub (ghp_/gho_/ghu_/ghs_/ghr_, github_pat_),
# GitLab (glpat-), Slack (xox?-), OpenAI / Anthropic style (sk-...), Google API keys
# (AIza...) and OAuth access tokens (ya29.), JSON web tokens, PEM private keys.
_TOKEN_SHAPES = re.compile(
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"
    r"|\bhf_[A-Za-z0-9]{30,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{30,}|\bgithub_pat_[A-Za-z0-9_]{40,}"
    r"|\bglpat-[A-Za-z0-9_-]{20,}"
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"
    r"|\bsk-(?:[A-Za-z0-9_-]{4,}-)?[A-Za-z0-9_-]{20,}"
    r"|\bAIza[0-9A-Za-z_-]{35}"
    r"|\bya29\.[0-9A-Za-z_.-]{10,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
    re.DOTALL)
# "Authorization: Bearer <token>" / "Basic <base64>": the scheme word is not the secret.
_AUTH_SCHEME = re.compile(r"(?P<lead>\b(?i:bearer|basic|token)\s+)(?P<value>[A-Za-z0-9._~+/=-]{8,})")
# A secret given as a command-line option, "--hf-token hf_x" / "--password=s3cr3t".
_OPTION = re.compile(r"(?P<lead>(?<!\S)--?(?P<name>[A-Za-z][\w-]*)(?:=|\s+))(?P<value>[^\s'\"]+)")
_FLAG = re.compile(r"--?[A-Za-z][\w-]*")
# Words of a variable or option name that say it holds a credential. "key" only with a
# qualifier before it (AWS_ACCESS_KEY_ID, WANDB_API_KEY, AZURE_STORAGE_KEY), so that
# "KEY" or "SORT_KEY"-like one-word names stay out.
_SECRET_WORDS = frozenset({
    "secret", "secrets", "password", "passwd", "passphrase", "token", "credential",
    "credentials", "apikey", "signature", "sas", "auth", "authorization", "pat",
})
_NOT_A_VALUE = frozenset({"file", "path", "dir", "url", "endpoint", "region", "type", "name",
                          "len", "length", "count", "limit", "sock", "socket"})


def secret_name(name: str) -> bool:
    """True for a variable / option / field name that holds a credential
    (``AWS_SECRET_ACCESS_KEY``, ``HF_TOKEN``, ``WANDB_API_KEY``, ``--db-password``),
    false for ``TOKENIZERS_PARALLELISM``, ``PWD``, ``max_tokens`` or ``AWS_CONFIG_FILE``."""
    words = [w for w in re.split(r"[_.\-\s]+|(?<=[a-z])(?=[A-Z])", name.strip("-")) if w]
    words = [w.lower() for w in words]
    if not words or words[-1] in _NOT_A_VALUE:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if any("secret" in w or "password" in w or "passwd" in w for w in words):
        return True  # MYSQLPASSWORD, clientSecret
    last = words[-2] if words[-1] == "id" and len(words) > 2 else words[-1]
    return last in ("key", "accesskey", "privatekey", "accountkey", "connectionstring") \
        and len(words) > 1 or "connection" in words and "string" in words


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
                                       or secret_name(name)):
            found.append(value)
    for value in found:
        pieces = [value, *re.split(r"[/:+=%&]", value)]
        _known.update(piece for piece in pieces if len(piece) >= _MIN_ENV_SECRET)


def _env_secrets(env: Mapping[str, str]) -> list[str]:
    values = {value for name, value in env.items()
              if len(value) >= _MIN_ENV_SECRET and secret_name(name)}
    return sorted(values, key=len, reverse=True)  # longest first: no partial leftovers


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """``text`` with every credential it shows replaced by ``***``."""
    if not text:
        return text
    literal = _env_secrets(os.environ if env is None else env) + list(_known)
    for value in sorted(literal, key=len, reverse=True):
        text = text.replace(value, MASK)

    if "@" in text:
        text = _TOKEN.sub(_userinfo_in_token, text)
    text = _QUERY_SECRET.sub(lambda m: f"{m['lead']}{MASK}", text)

    text = _AUTH_SCHEME.sub(lambda m: m["lead"] + MASK, text)

    def pair(match: re.Match[str]) -> str:
        if match["value"] == MASK or match["value"].lower() in ("bearer", "basic") \
                or match["value"].startswith("//") or not secret_name(match["name"]):
            return match.group(0)
        return match["lead"] + MASK

    text = _PAIR_SECRET.sub(pair, text)
    text = _QUOTED_KEY.sub(lambda m: f"{m['lead']}{MASK}", text)
    text = _TOKEN_SHAPES.sub(MASK, text)

    def option(match: re.Match[str]) -> str:
        if match["value"] == MASK or match["value"].startswith("-") \
                or not secret_name(match["name"]):
            return match.group(0)
        return match["lead"] + MASK

    return _OPTION.sub(option, text)


def redact_data(data: Any, env: Mapping[str, str] | None = None) -> Any:
    """A copy of JSON-like ``data`` with every string (keys included) redacted."""
    if isinstance(data, str):
        return redact(data, env)
    if isinstance(data, Mapping):
        return {redact(str(k), env) if isinstance(k, str) else k: redact_data(v, env)
                for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        items = [redact_data(item, env) for item in data]
        for index in range(1, len(items)):  # an argv: "--password", "VALUE"
            flag = data[index - 1]
            if isinstance(flag, str) and isinstance(items[index], str) \
                    and _FLAG.fullmatch(flag) and secret_name(flag):
                items[index] = MASK
        return items
    return data
