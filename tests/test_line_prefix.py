"""Launcher / logger prefixes: an anchored rule matches the message whatever wrapper the
run used, and a line without a prefix is never cut."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from wrapper.classifier import load_rules
from wrapper.classifier.line_prefix import message_starts, search, unanchored, warning_level, without_prefix
from wrapper.classifier.verdict import classify_artifacts
from wrapper.decision import Decision

MESSAGE = "ValueError: Size mismatch between saved torch.Size([4, 2]) and current: torch.Size([8])"

# one example of each prefix shape line_prefix.py names, as those tools print it
PREFIXES = [
    "[rank0]: ",                                          # torchrun --log-line-prefix
    "[default1]:",                                        # torchrun --tee
    "(RayTrainWorker pid=9671, ip=10.0.0.3) ",            # Ray's log monitor
    "(pid=9671) ",                                        # Ray, a task without a name
    "(raylet, ip=10.0.0.3) ",                             # Ray, a daemon
    "(head, rank=0, pid=4773) ",                          # SkyPilot, a multi-node task's head
    "(worker1, rank=1, pid=5120, ip=10.0.0.4) ",          # ... and its other nodes
    "[1,0]<stderr>:",                                     # Open MPI --tag-output
    "worker-3: ",                                         # pdsh / DeepSpeed multinode
    "10.0.0.3: ",                                         # pdsh with addresses
    "12: ",                                               # srun --label
    "trainer-0  | ",                                      # docker compose logs
    "[pod/train-0/pytorch] ",                             # kubectl logs --prefix
    "2024-05-01 10:00:00,123 - root - ERROR - ",          # logging format asctime - name - level
    "ERROR:__main__:",                                    # logging.basicConfig default
    "ERROR:exp-run_01:",                                  # ... a logger named for a run, with a hyphen
    "2024-05-01T10:00:00.123456789Z ",                    # kubectl --timestamps
    "E0501 10:00:00.123456  1234 trainer.cc:12] ",        # glog
    "2023-04-29 06:01:12.977 [177/train/578 (pid 28936)] [09c561ee-a44c] ",  # two brackets
    "05/01/2024 10:00:00 - ERROR - __main__ - ",          # Hugging Face examples' format
    "05/01 10:00:00 - mmengine - ERROR - ",               # mmengine's MMLogger
    "[2024-05-01 10:00:00,123][__main__][ERROR] - ",      # Hydra's job logging
    "2024-05-01 10:00:00.123 | ERROR    | __main__:main:42 - ",  # loguru
    "2024-05-01T10:00:00.123456789Z stderr F ",           # kubelet CRI log (/var/log/pods)
    "May 01 10:00:00 gpu-node-7 python3[81234]: ",        # journald / syslog
    "Epoch 1:  4%|4         | 18/387 [05:44<1:57:56, 19.13s/it]",  # tqdm bar, no newline
    " 60%|██████    | 6/10 [00:03<00:02,  1.99it/s]",      # tqdm bar with block characters
    "`",                                                  # pasted as inline code
    "> ",                                                 # a markdown quote
    "> [rank0]: ",                                        # a quoted torchrun line
    ">>> ",                                               # the Python REPL
    "rank0]:",                                            # torchrun's, its "[" cut off
    "+",                                                  # a diff's added line
    "+E0501 10:00:00.123456  1234 trainer.cc:12] ",       # ... of a glog line
    "*** ",                                               # pdb: a command that raised
    "**",                                                 # markdown bold
    "[MusubiTuner WanLoRATrainer] TRAINER: ",             # a GUI's tag for its child's stream
    "STDERR: ",                                           # a wrapper's stream tag
]


def test_inline_code_loses_its_closing_backtick_too() -> None:
    assert without_prefix("`" + MESSAGE + "`") == MESSAGE
    assert without_prefix("[rank0]: " + MESSAGE + "`") == MESSAGE + "`"  # no opening one


def test_bold_loses_its_closing_mark_too() -> None:
    assert without_prefix("**" + MESSAGE + "**") == MESSAGE
    assert without_prefix("[rank0]: " + MESSAGE + "**") == MESSAGE + "**"  # no opening one


@pytest.mark.parametrize("prefix", PREFIXES)
def test_each_prefix_is_removed(prefix: str) -> None:
    assert without_prefix(prefix + MESSAGE) == MESSAGE


@pytest.mark.parametrize("line", [
    MESSAGE,
    "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1275",   # a class name is no host
    "Traceback (most recent call last):",
    '  File "train.py", line 3, in <module>',
    "torch.distributed.DistBackendError: NCCL error",
    "Loss went to 100% of the budget: KeyError later",     # a percent is no tqdm bar
    "- KeyError: 'lr' was raised",                         # a dash alone is no prefix
    "+ python train.py --lr 0.1",                          # a shell's xtrace, not a diff
    "** ",                                                 # a bare bold mark, nothing after
    "NOTE: ValueError handling changed in 2.1",            # a tag before prose, no class line
])
def test_a_line_without_prefix_is_left_whole(line: str) -> None:
    assert without_prefix(line) is None


def test_an_anchored_pattern_matches_after_a_prefix_only_at_the_message_start() -> None:
    pattern = re.compile(r"^ValueError: ")
    assert search(pattern, "(Worker pid=1) " + MESSAGE)
    # mentioned inside a message, it is no exception line
    assert not search(pattern, "[rank0]: caught and logged: ValueError: bad row, skipped")
    # an unanchored pattern is searched as always
    assert search(re.compile("Size mismatch"), "anything Size mismatch")


def test_unanchored_is_a_superset_for_the_prefilter() -> None:
    pattern = re.compile(r"(?i)^\s*killed$")
    relaxed = unanchored(pattern)
    assert relaxed.flags == pattern.flags
    assert relaxed.search("trainer-0  | Killed") and not pattern.search("trainer-0  | Killed")
    plain = re.compile("no anchor")
    assert unanchored(plain) is plain


@pytest.mark.parametrize(("line", "warning"), [
    ("[rank0]:[W310 01:07:17.23 ProcessGroupNCCL.cpp:1250] Warning: WARNING: x", True),
    ("2024-05-01 10:00:00,123 - root - WARNING - ValueError: skipped a row", True),
    ("(Worker pid=3) UserWarning: this is deprecated", True),
    ("W0501 10:00:00.123456  1234 trainer.cc:12] slow", True),
    ("(Worker pid=3) ValueError: x", False),
    ("2024-05-01 10:00:00,123 - root - ERROR - ValueError: x", False),
    ("worker-3: RuntimeError: x", False),
])
def test_warning_level_reads_the_prefix_too(line: str, warning: bool) -> None:
    assert warning_level(line) is warning


def test_a_ray_actor_exception_is_judged_as_the_exception(tmp_path: Path) -> None:
    log = tmp_path / "ray.log"
    log.write_text(
        "(TrainWorker pid=91, ip=10.0.0.3) Traceback (most recent call last):\n"
        '(TrainWorker pid=91, ip=10.0.0.3)   File "train.py", line 7, in load\n'
        "(TrainWorker pid=91, ip=10.0.0.3)     raise KeyError('optimizer')\n"
        "(TrainWorker pid=91, ip=10.0.0.3) KeyError: 'optimizer'\n")
    diagnosis = classify_artifacts(logs=[log], error_files=[], exit_code=1, signal=None,
                                   rules=load_rules())
    assert diagnosis.rule_id == "python-user-error"
    assert diagnosis.decision is Decision.ABORT


FLAT = ('Traceback (most recent call last): File "/opt/train/run.py", line 435, in <module> main() '
        'File "/opt/train/run.py", line 319, in main logger.info(" ".join(files)) TypeError: sequence '
        'item 0: expected str instance, NoneType found')


def test_a_traceback_flattened_onto_one_line_is_read_part_by_part() -> None:
    parts = [text for _, text in message_starts(FLAT)]
    assert parts[-1] == "TypeError: sequence item 0: expected str instance, NoneType found"
    assert [p.split(",")[0] for p in parts[:2]] == ['File "/opt/train/run.py"'] * 2
    assert all(FLAT.endswith(p) for p in parts)  # each part runs to the line's end
    assert search(re.compile(r"^TypeError: "), FLAT)
    offset, text = message_starts(FLAT)[-1]
    assert FLAT[offset:] == text


@pytest.mark.parametrize(("line", "repaired"), [
    ("KeyErrorKeyError: : 'input_ids_j'", "KeyError: 'input_ids_j'"),
    ("[rank0]: ValueErrorValueErrorValueError: : : bad shape", "ValueError: bad shape"),
    ("torch.OutOfMemoryErrortorch.OutOfMemoryError: : CUDA out of memory.", "torch.OutOfMemoryError: CUDA out of memory."),
])
def test_an_exception_line_two_ranks_wrote_into_each_other_is_read_repaired(line: str, repaired: str) -> None:
    assert repaired in [text for _, text in message_starts(line)]


@pytest.mark.parametrize("line", [
    "KeyErrorKeyError: 'x'",          # the ": " not repeated as often as the class
    "KeyErrorKeyError: : : 'x'",      # ... nor more often
    "MyKeyError: : 'x'",              # one class, an empty message part
])
def test_no_interleaving_is_read_where_the_counts_do_not_agree(line: str) -> None:
    assert all(text == line or not text.startswith(("KeyError: ", "MyKeyError: '"))
               for _, text in message_starts(line))


@pytest.mark.parametrize("line", [
    # one frame whose source line raises a class: no flattened traceback, no exception line
    '  File "train.py", line 3, in main    raise KeyError(name)',
    # a message that mentions an exception after a frame's words, without a frame
    "caught in main(): TypeError: bad row, skipped",
    # two frames, but the class only raised or caught in their source lines
    'File "a.py", line 1, in f  raise ValueError(x) File "b.py", line 2, in g  except ValueError: pass',
])
def test_no_exception_line_is_made_up_from_a_frame_or_a_mention(line: str) -> None:
    assert not search(re.compile(r"^(?:ValueError|TypeError|KeyError): "), line)


@pytest.mark.parametrize(("line", "cls"), [
    ("AttributeError                            Traceback (most recent call last)", "AttributeError"),
    ("huggingface_hub.errors.HFValidationError  Traceback (most recent call last)", "huggingface_hub.errors.HFValidationError"),
    ("ImportError                               Traceback (most recent call", "ImportError"),  # a wrapped copy
])
def test_the_class_heading_an_ipython_traceback_is_read_as_its_exception_line(line: str, cls: str) -> None:
    assert (0, cls) in message_starts(line)
    assert search(re.compile(r"^(?:[A-Za-z_]\w*\.)*\w+Error(?::\s|:?$)"), line)


@pytest.mark.parametrize("line", [
    "Traceback (most recent call last):",                    # the plain header names no class
    "ValueError Traceback (most recent call last)",          # one space: no IPython padding
    "see the stack below   Traceback (most recent call last)",  # no class name
])
def test_no_class_is_read_from_a_line_that_is_no_ipython_header(line: str) -> None:
    assert not search(re.compile(r"^\w*Error(?::\s|:?$)"), line)
