"""A checkpoint torn by a crash during its save, read back by the real libraries (torch's
zip and legacy formats, its weights-only unpickler, pickle, safetensors): whatever each
says, the failure is a truncated file, retried once (the wrapper sets torn saves aside),
then aborted. The messages are the libraries' own, produced here, not copied."""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.test_rules_tables import diagnose

torch = pytest.importorskip("torch")


def _error_text(load: Callable[[], object]) -> list[str]:
    try:
        load()
    except Exception as error:  # noqa: BLE001 (the library's own exception, whatever its class)
        return "".join(traceback.format_exception(error)).splitlines()
    raise AssertionError("the truncated file loaded")


def _cut(path: Path, keep: float) -> Path:
    data = path.read_bytes()
    cut = path.with_name(f"cut-{path.name}")
    cut.write_bytes(data[:int(len(data) * keep)])
    return cut


def _torch_zip(tmp: Path) -> Callable[[], object]:
    torch.save({"w": torch.zeros(1000)}, tmp / "a.pt")
    cut = _cut(tmp / "a.pt", 0.5)
    return lambda: torch.load(cut)


def _torch_legacy(tmp: Path) -> Callable[[], object]:
    torch.save({"w": torch.zeros(1000)}, tmp / "l.pt", _use_new_zipfile_serialization=False)
    cut = _cut(tmp / "l.pt", 0.4)
    return lambda: torch.load(cut, weights_only=False)


def _torch_empty_weights_only(tmp: Path) -> Callable[[], object]:
    (tmp / "e.pt").write_bytes(b"")
    return lambda: torch.load(tmp / "e.pt")


def _torch_empty_full_unpickler(tmp: Path) -> Callable[[], object]:
    (tmp / "e.pt").write_bytes(b"")
    return lambda: torch.load(tmp / "e.pt", weights_only=False)


def _pickle(tmp: Path) -> Callable[[], object]:
    data = pickle.dumps(list(range(1000)))[:100]
    return lambda: pickle.loads(data)


def _safetensors(tmp: Path) -> Callable[[], object]:
    save_file = pytest.importorskip("safetensors.torch").save_file
    load_file = pytest.importorskip("safetensors.torch").load_file
    save_file({"w": torch.zeros(1000)}, str(tmp / "s.safetensors"))
    cut = _cut(tmp / "s.safetensors", 0.5)
    return lambda: load_file(str(cut))


@pytest.mark.parametrize("make", [_torch_zip, _torch_legacy, _torch_empty_full_unpickler, _pickle,
                                  _safetensors],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_truncated_checkpoint_is_retried_once_then_aborted(tmp_path: Path, make) -> None:
    lines = _error_text(make(tmp_path))
    d = diagnose(tmp_path, ["step 200 loss 1.2", "resuming from the last checkpoint", *lines])
    assert (d.rule_id, str(d.decision)) == ("file-truncated", "retry"), (lines[-1], d.why_won)
    assert d.escalate is not None and str(d.escalate.to) == "abort"


def test_an_empty_file_read_by_the_weights_only_loader_is_retried(tmp_path: Path) -> None:
    # its unpickler says only "EOFError" (no message): an input that ended early, the
    # same words as a pipe whose peer died; never a user error to abort on sight
    lines = _error_text(_torch_empty_weights_only(tmp_path))
    d = diagnose(tmp_path, ["step 200 loss 1.2", *lines])
    assert str(d.decision) == "retry", (lines[-1], d.why_won)


def test_a_whole_file_that_fails_otherwise_is_no_truncation(tmp_path: Path) -> None:
    torch.save({"w": torch.zeros(3)}, tmp_path / "a.pt")
    lines = _error_text(lambda: torch.nn.Linear(2, 2).load_state_dict(torch.load(tmp_path / "a.pt")))
    d = diagnose(tmp_path, ["step 200 loss 1.2", *lines])
    assert d.rule_id != "file-truncated", d.why_won
