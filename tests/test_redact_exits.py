"""Issue 21 part 5: one redaction pass at every exit.

Findings this file pins (each failed before): lint / validate / run printed
``s3://KEY:SECRET@...`` in clear when the secret held a ``/``; a password holding ``@``
was only partly masked; ``classify`` (text and JSON) repeated secrets found in the log,
even the value of ``AWS_SECRET_ACCESS_KEY``; ``history.json`` kept a secret from the
training's command line and environment; raw terminal control sequences from a log
reached the terminal.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.supervise_fixtures import REPO, child_env, write_script
from workflows.cli import main
from wrapper.redact import MASK, redact, secret_name
from wrapper.safe_output import SafeStream, escape_controls, safe_streams

KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzEXAMPLE"  # AWS's example shape: "/" and "+"
AT_PASSWORD = "p@ss@w0rd!x"
HF = "hf_" + "a1B2c3D4e5" * 4
GHP = "ghp_" + "Z9y8X7w6V5" * 4
SPEC = """workflow:
  name: t
  tasks:
  - name: t
    image: ubuntu
    command: [sh, -c, 'echo hi']
    checkpoint:
    - path: /ckpt
      url: {{ url }}
      frequency: 60
"""


def _cli(*args: str, env: dict[str, str] | None = None) -> str:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.stdout + result.stderr


# -- the filter itself -----------------------------------------------------------------

@pytest.mark.parametrize("text, gone", [
    (f"s3://{KEY}:{SECRET}@minio:9000/b", [KEY, SECRET, "K7MDENG"]),
    (f"s3://user:{AT_PASSWORD}@minio:9000/b", ["p@ss", "ss@w0rd", "w0rd!x"]),
    (f"user:{AT_PASSWORD}@minio:9000/b", ["p@ss", "w0rd!x"]),
    ("https://me:abc%2Fdef%40ghi@host/x", ["abc%2Fdef", "%40ghi"]),
    ("s3://me:a+b+c/d/e@host/x", ["a+b+c", "c/d/e"]),
    (f"loading with token {HF}", [HF]),
    (f"remote: {GHP} accepted", [GHP]),
    (f"key id {KEY} denied", [KEY]),
    ("Authorization: Bearer eyJhbGciOi.J9abcdEFGH", ["eyJhbGciOi"]),
    ("python train.py --db-password hunter22 --lr 3", ["hunter22"]),
    ("python train.py --wandb-api-key=0123456789abcdef", ["0123456789abcdef"]),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEabc\n-----END RSA PRIVATE KEY-----", ["MIIEabc"]),
])
def test_every_credential_shape_is_masked(text: str, gone: list[str]) -> None:
    out = redact(text, env={})
    assert MASK in out
    for secret in gone:
        assert secret not in out, out


@pytest.mark.parametrize("text", [
    '{"max_tokens": 5, "tokenizer": "gpt2"}', "python train.py --max-tokens 5 --lr 3",
    "TOKENIZERS_PARALLELISM=false", "s3://bucket/run@v2/ckpt", "error: something odd",
])
def test_ordinary_text_stays(text: str) -> None:
    assert redact(text, env={"TOKENIZERS_PARALLELISM": "falsehood", "PWD": "/work/wt"}) == text


@pytest.mark.parametrize("name, secret", [
    ("AWS_SECRET_ACCESS_KEY", True), ("AWS_ACCESS_KEY_ID", True), ("AWS_SESSION_TOKEN", True),
    ("HF_TOKEN", True), ("HUGGING_FACE_HUB_TOKEN", True), ("WANDB_API_KEY", True),
    ("AZURE_STORAGE_KEY", True), ("AZURE_STORAGE_CONNECTION_STRING", True),
    ("AZURE_CLIENT_SECRET", True), ("GOOGLE_APPLICATION_CREDENTIALS", True),
    ("MY_SERVICE_TOKEN", True), ("DB_PASSWORD", True), ("GH_PAT", True),
    ("TOKENIZERS_PARALLELISM", False), ("PWD", False), ("AWS_CONFIG_FILE", False),
    ("SSH_AUTH_SOCK", False), ("PATH", False), ("KEY", False),
])
def test_credential_variable_names(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_the_values_of_credential_variables_are_masked_anywhere() -> None:
    env = {"WANDB_API_KEY": "0123456789abcdef0123", "AZURE_STORAGE_KEY": "Zm9vYmFyYmF6cXV4",
           "GOOGLE_CLOUD_TOKEN": "ya-not-shaped-1234", "HOME": "/home/someone"}
    out = redact("w 0123456789abcdef0123 a Zm9vYmFyYmF6cXV4 g ya-not-shaped-1234 /home/someone",
                 env)
    assert out == f"w {MASK} a {MASK} g {MASK} /home/someone"


def test_control_characters_are_shown_escaped() -> None:
    line = "NCCL error \x1b]0;pwned\x07 then\rfake \x1b[2J\u202egnp.exe\x9b"
    shown = escape_controls(line)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]", shown)
    assert "\\x1b]0;pwned\\x07" in shown and "\\r" in shown and "\\u202e" in shown
    assert escape_controls("plain\ttext\n") == "plain\ttext\n"


def test_the_cli_streams_pass_the_filter_and_are_put_back() -> None:
    raw = io.StringIO()
    saved = sys.stdout
    sys.stdout = raw
    try:
        with safe_streams():
            assert isinstance(sys.stdout, SafeStream)
            print(f"url s3://{KEY}:{SECRET}@h/b \x1b[31mred")
        assert sys.stdout is raw
    finally:
        sys.stdout = saved
    assert SECRET not in raw.getvalue() and "\\x1b[31mred" in raw.getvalue()


# -- every command that printed one ----------------------------------------------------

@pytest.mark.parametrize("url, secrets", [
    (f"s3://{KEY}:{SECRET}@minio:9000/bucket/x", [KEY, SECRET, "K7MDENG"]),
    (f"s3://user:{AT_PASSWORD}@minio:9000/bucket/x", ["p@ss", "w0rd!x"]),
])
@pytest.mark.parametrize("command", [["lint"], ["validate"], ["run", "--dry-run"],
                                     ["submit", "--dry-run"]])
def test_lint_validate_run_findings_never_show_url_credentials(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], url: str,
        secrets: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "w.yaml").write_text(SPEC)
    out = _cli(*command, "w.yaml", "--set", f"url={url}")
    assert "RS001" in out, out  # the finding that quotes the URL is there...
    for secret in secrets:
        assert secret not in out, out  # ...without its credentials


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_classify_never_repeats_secrets_or_control_sequences_from_the_log(
        tmp_path: Path, fmt: str) -> None:
    log = tmp_path / "fail.log"
    log.write_text(
        "starting\n"
        f"+ export AWS_SECRET_ACCESS_KEY={SECRET}\n"
        f"RuntimeError: CUDA out of memory. while fetching s3://{KEY}:{SECRET}@h/b "
        f"with {HF} and {GHP} \x1b]0;pwned\x07 oops\r\n")
    out = _cli("classify", "--log", str(log), "--exit-code", "1", "--format", fmt,
               env={"AWS_SECRET_ACCESS_KEY": SECRET})
    assert "out of memory" in out, out
    for secret in (SECRET, KEY, HF, GHP, "K7MDENG"):
        assert secret not in out, out
    assert "\x1b" not in out and "\x07" not in out
    if fmt == "json":
        json.loads(out)  # masking keeps the document valid


def test_history_and_records_of_a_wrapped_run_hold_no_secret(tmp_path: Path) -> None:
    script = write_script(tmp_path / "train.sh", (
        "#!/bin/bash\n"
        f"echo \"using $HF_TOKEN and {GHP}\" >&2\n"
        "echo 'RuntimeError: NCCL error: unhandled system error' >&2\nexit 1\n"))
    state = tmp_path / "state"
    env = child_env(HF_TOKEN="hf_token_value_from_env_0001", MY_DB_PASSWORD="pw-from-env-77")
    done = subprocess.run(
        [sys.executable, "-m", "workflows.cli", "wrap", "--state-dir", str(state), "--node",
         "n1", "--max-retries", "0", "--grace", "1", "--", str(script), "--password", "cl1-s3cr3t",
         f"--store=s3://{KEY}:{SECRET}@h/b", "pw-from-env-77"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and (state / "history.json").is_file(), done.stderr
    written = {p: p.read_text(errors="replace") for p in state.rglob("*") if p.is_file()}
    assert any("cl1-s3cr3t" not in text and "--password" in text for text in written.values())
    # The training's own output is forwarded untouched (the wrapper is transparent to it);
    # what resched itself says and writes holds no secret.
    ours = "\n".join(line for line in done.stderr.splitlines() if line.startswith("resched:"))
    assert "resched: event attempt_started" in ours
    for path, text in [*written.items(), (Path("stderr"), ours)]:
        for secret in ("hf_token_value_from_env_0001", "pw-from-env-77", "cl1-s3cr3t", SECRET,
                       KEY, GHP):
            assert secret not in text, (path, secret)
