"""An uncaught exception of a class no specific rule knows: its name decides how sure the
judge may be (PEP 8 names a class for what went wrong). A class named for a mistake in
what the program was given aborts (python-config-exception); any other library class is
no evidence that the failure recurs, so it is retried once and its repeat aborts
(python-uncaught-exception, costs.py: 50 for aborting what a restart fixes, 3 for one
wasted restart). Lines are written from the shapes the cited sources raise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.test_rules_tables import diagnose
from workflows.cli import main

TB = ["Traceback (most recent call last):",
      '  File "/opt/train/train.py", line 88, in <module>',
      "    main(cfg)"]


@pytest.mark.parametrize("line", [
    # OmegaConf errors.py, Lightning's fabric exceptions, pydantic-core, TensorFlow's
    # errors_impl, json.decoder, PyYAML's scanner / parser, huggingface_hub errors.py
    "omegaconf.errors.ConfigTypeError: Cannot merge DictConfig with ListConfig",
    "omegaconf.errors.InterpolationKeyError: Interpolation key 'data.root' not found",
    "lightning.fabric.utilities.exceptions.MisconfigurationException: No `val_dataloader()` method defined",
    "pydantic_core._pydantic_core.ValidationError: 1 validation error for TrainConfig",
    "tensorflow.python.framework.errors_impl.InvalidArgumentError: indices[3] = 70000 is not in [0, 32000)",
    "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 3 column 1 (char 18)",
    "yaml.scanner.ScannerError: mapping values are not allowed here",
    "yaml.parser.ParserError: while parsing a block mapping",
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-0f0f)",
    "huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. (Request ID: Root=1-0f0f)",
    "[rank0]: mylib.errors.UnsupportedDtypeError: bfloat16 is not supported by this kernel",
    # code that does not compile (triton/compiler/errors.py; inductor's C++ build)
    "triton.compiler.errors.CompilationError: at 12:4: tl.static_assert(BLOCK % 16 == 0)",
    "torch._inductor.exc.CppCompileError: C++ compile error",
])
def test_a_class_named_for_a_mistake_in_the_inputs_aborts(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", *TB, line])
    assert (d.rule_id, str(d.decision)) == ("python-config-exception", "abort"), d.why_won


@pytest.mark.parametrize("line", [
    # a remote job's status, raised by the client that waited for it (sagemaker session.py)
    "sagemaker.exceptions.UnexpectedStatusException: Error for Training job tj-1: Failed. Reason: AlgorithmError: "
    "ExecuteUserScriptError:",
    # a port still held by a process that is exiting (DGL's socket communicator)
    "dgl._ffi.base.DGLError: [10:00:00] /opt/dgl/src/rpc/network/socket_communicator.cc:197: Cannot bind to 10.0.0.3:30050",
    # an object that another process removed while this one listed it (gsutil / boto)
    "NotFoundException: 404 gs://bucket/run/checkpoint_900.tmp-1/state/0.0 does not exist.",
    # a library's own error that says nothing about recurring
    "deepspeed.runtime.zero.utils.ZeRORuntimeException: ZeRO-Offload with a client optimizer",
])
def test_any_other_library_class_is_retried_once(tmp_path: Path, line: str) -> None:
    d = diagnose(tmp_path, ["step 1 loss 2.31", *TB, line])
    assert (d.rule_id, str(d.decision)) == ("python-uncaught-exception", "retry"), d.why_won


@pytest.mark.parametrize(("line", "rule", "decision"), [
    # names the two rules above must leave to others: a transient name retries by its own
    # rule, a built-in class is the python table's, "Configured" is no configuration error
    ("google.api_core.exceptions.ServiceUnavailableError: 503 backend unavailable", "python-transient-error", "retry"),
    ("ValueError: invalid literal for int() with base 10: 'x'", "python-user-error", "abort"),
    ("UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0", "python-user-error", "abort"),
    # a frame's source line that raises such a class is no uncaught exception
    ("    raise ConfigAttributeError(msg)", "unknown-failure", "retry"),
])
def test_near_misses_of_the_exception_names(tmp_path: Path, line: str, rule: str, decision: str) -> None:
    lines = ["step 1 loss 2.31", line] if line.startswith("    ") else ["step 1 loss 2.31", *TB, line]
    d = diagnose(tmp_path, lines)
    assert (d.rule_id, str(d.decision)) == (rule, decision), d.why_won


def _decide_with_history(tmp_path: Path, lines: list[str], *attempts: dict) -> dict:
    """`resched classify --history` on a log of ``lines`` after ``attempts``: its JSON."""
    log, history = tmp_path / "train.log", tmp_path / "history.json"
    log.write_text("\n".join(lines) + "\n")
    history.write_text(json.dumps({"version": 1, "attempts": list(attempts), "node_failures": {}}))
    result = CliRunner().invoke(main, ["classify", "--log", str(log), "--exit-code", "1", "--node", "n1",
                                       "--history", str(history), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def _earlier(rule: str) -> dict:
    """An earlier attempt of this job that the rule decided (retried in place)."""
    return {"rule": rule, "decision": "retry", "node": "n1", "allocation": "a1",
            "counts_as_failure": True, "checkpoint_step_after": 100}


def test_the_same_unknown_exception_again_aborts(tmp_path: Path) -> None:
    lines = ["step 1 loss 2.31", *TB, "mylib.core.PipelineStateError: stage 3 has no inputs"]
    first = _decide_with_history(tmp_path, lines)
    assert (first["rule"], first["decision"], first["policy"]["decision"]) == (
        "python-uncaught-exception", "retry", "retry")
    again = _decide_with_history(tmp_path, lines, _earlier("python-uncaught-exception"))
    assert again["policy"]["decision"] == "abort", again["policy"]


def test_an_nccl_shm_segment_failure_is_retried_once_then_aborts(tmp_path: Path) -> None:
    # no "No space left on device": the node's /dev/shm state or a cause not shown, so one
    # restart first (an abort costs 50 if it fixed it); the same failure again aborts
    lines = ["n1:7:9 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
             "nccl-shm-recv-1-0-1-0 (size 4460544)",
             "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"]
    first = _decide_with_history(tmp_path, lines)
    assert (first["rule"], first["policy"]["decision"]) == ("nccl-shm-segment", "retry"), first
    again = _decide_with_history(tmp_path, lines, _earlier("nccl-shm-segment"))
    assert again["policy"]["decision"] == "abort", again["policy"]
