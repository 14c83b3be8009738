"""The prefixes that launchers, schedulers and loggers put in front of a program's lines.

The same Python exception line reaches a log as ``ValueError: ...`` from a plain run,
``[rank0]: ValueError: ...`` from torchrun, ``(TrainWorker pid=91, ip=10.0.0.3) ValueError:
...`` from Ray, ``[1,0]<stderr>:ValueError: ...`` from Open MPI, ``worker-3: ValueError:
...`` from DeepSpeed's pdsh runner, ``2024-05-01 10:00:00,123 - ERROR - ValueError: ...``
from a logging handler, ``trainer-0  | ValueError: ...`` from docker compose. A rule whose
pattern is anchored at the start of the message (``^``: "this line IS the exception",
not "this line mentions it") must match all of them, whichever wrapper the run used.

``without_prefix`` removes a run of such prefixes from the start of a line; the scanner
tries a rule's patterns on the line as it is first and on the remainder second, so a
prefix can only add matches to anchored patterns (an unanchored pattern finds the
same text in the whole line anyway).

Sources of the shapes: Ray's log monitor (``(<actor or task> pid=N, ip=A)``:
python/ray/_private/log_monitor.py / worker.py print_to_stdstream) and SkyPilot's output of a
multi-node task's nodes (``(head, rank=0, pid=N)``, ``(worker1, rank=1, pid=N, ip=A)``:
sky/backends/cloud_vm_ray_backend.py), torchrun
``--log-line-prefix-template`` / ``--tee`` (``[rank0]:``, ``[default0]:``:
torch/distributed/elastic/multiprocessing/api.py), Open MPI ``--tag-output``
(``[jobid,rank]<stderr>:``), pdsh / DeepSpeed's multinode runner (``host: ``:
deepspeed/launcher/multinode_runner.py), ``srun --label`` (``0: ``), glog
(``E0501 10:00:00.123456  1234 file.cc:12] ``), Python logging's default and common
formats (``LEVEL:name:``, ``asctime - name - LEVEL - ``, the Hugging Face examples'
``05/01/2024 10:00:00 - LEVEL - name - ``, mmengine's ``05/01 10:00:00 - mmengine - LEVEL -
``, Hydra's ``[asctime][name][LEVEL] - ``), loguru (``asctime | LEVEL | mod:func:line -
``), ``kubectl logs --prefix`` (``[pod/name/container] ``), ``docker compose logs``
(``service-1  | ``), a wrapper's ``Error: `` or upper-case tag (``TRAINER: ``) before an
exception line, torchelastic's error handler's JSON dump of a worker's error file
(``"message": "``), the marks a line
picks up when it is pasted into an issue thread (an inline-code backtick, a ``> `` quote
marker, the REPL's ``>>> ``, a diff's ``+``, a bracketed prefix whose ``[`` the copy cut
off, markdown bold, pdb's ``*** `` error mark), the kubelet's CRI
container logs (``<RFC 3339> stderr F ``),
journald / syslog (``May 01 10:00:00 host python3[1234]: ``), and a tqdm bar that the
error's first line is glued to (tqdm ends its bar with a carriage return).
"""

from __future__ import annotations

import re
from typing import Any

_LEVEL = r"(?:TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|CRITICAL|FATAL|SEVERE)"

# One prefix; the run of them is matched by repeating this group. Every alternative
# consumes at least one character, and each is bounded, so the scan is linear.
_ONE = (
    r"(?:"
    # Ray: (TrainWorker pid=91, ip=10.0.0.3)  (pid=91)  (raylet, ip=10.0.0.3); SkyPilot's
    # multi-node task output: (head, rank=0, pid=4773)  (worker1, rank=1, pid=91, ip=10.0.0.3)
    r"\((?:[\w.:<>-]{1,80}(?:,? )?)?(?:rank=\d+, )?(?:pid=\d+|ip=[\w.:]+)(?:, [\w]+=[^()\s]{1,80}){0,4}\)"
    # torchrun / kubectl / Megatron / most loggers: [rank0]: [default1]: [2024-05-01 10:00:00];
    # Hydra's job logging closes its brackets with " - ": [asctime][name][LEVEL] - msg
    r"|\[[^\]\n]{1,120}\](?::|<std(?:out|err)>:| -(?= ))?"
    # the same prefix with its opening bracket cut off: an excerpt copied from a column
    # after the line's start ("rank0]:Traceback ...", "ank3]: ValueError: ...")
    r"|[\w.-]{1,40}\]:"
    # a line of a unified diff that adds it (a log pasted into a pull request's patch):
    # "+E0511 10:00:00.123456  915 session_master.cc:505] ...", "+Traceback ..."; not
    # a shell's xtrace ("+ python train.py"), whose "+" a space follows
    r"|\+(?=[^\s+])"
    # srun --label, and a bare rank number: "12: "
    r"|\d{1,6}: "
    # pdsh / DeepSpeed's multinode runner: "worker-3: ", "node012: ", "10.0.0.3: "
    # (a host name with a digit, so "ValueError: " or "ERROR: " is never taken for one)
    r"|(?=[\w.-]{0,62}\d)[a-z0-9][a-z0-9.-]{0,62}: "
    # a wrapper's "Error: " in front of the exception line it passes on (mim / OpenMMLab's
    # CLI, shell scripts), or its own upper-case tag for the child's stream (a GUI's
    # "TRAINER: ", "STDERR: "): only when an exception line follows (its class, then a
    # colon or the line's end)
    r"|(?:Error|[A-Z][A-Z0-9_]{2,19}): (?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::|\s*$))"
    # torchelastic's error handler, which logs a failed worker's error file as indented
    # JSON (torch/distributed/elastic/multiprocessing/errors/error_handler.py
    # dump_error_file: '"message": "TypeError: ..."'), the exception's line escaped into a
    # string: only when an exception class opens the string
    r'|"message": "(?=(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)\b)'
    # a line as it reaches an issue thread or a chat: an inline-code backtick, a markdown
    # quote marker, markdown bold ("**ValueError: ...**"), an interactive prompt (">>> "
    # of the Python REPL), pdb's error mark ("*** ValueError: ..." when a command run in
    # the debugger raised: Lib/pdb.py error()): the message after them is the program's
    r"|`|>{1,3} |\*\*\*? ?(?=[^\s*])"
    # docker compose: "trainer-0  | "
    r"|[\w.-]{1,64} +\| "
    # timestamps: 2024-05-01 10:00:00,123 / 2024-05-01T10:00:00.123456789Z / 10:00:00.123
    r"|\d{4}[-/]\d{2}[-/]\d{2}(?:[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?(?:Z|[+-]\d{2}:?\d{2})?)?"
    r"|\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
    # month first, as the Hugging Face examples' datefmt (%m/%d/%Y %H:%M:%S) and mmengine
    # (%m/%d %H:%M:%S) write it: 05/01/2024 10:00:00, 05/01 10:00:00
    r"|\d{2}/\d{2}(?:/\d{2,4})?[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d{1,9})?"
    # syslog / journald (journalctl's short format): May 01 10:00:00 host python3[1234]:
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]?\d \d{2}:\d{2}:\d{2}"
    r" [\w.-]{1,64} [\w.@/-]{1,64}(?:\[\d+\])?:"
    # the CRI log format kubelet keeps per container (/var/log/pods): after its RFC 3339
    # timestamp, the stream and F (full line) or P (partial line)
    r"|std(?:out|err) [FP](?= )"
    # loguru's default format: " | ERROR    | module:function:line - "
    rf"|\| ?{_LEVEL} *\| ?[\w.<>-]{{1,120}}:[\w.<>-]{{1,120}}:\d+ -(?= )"
    # a tqdm bar the program was drawing when the error came: tqdm ends it with a carriage
    # return, not a newline, so the exception's first line is glued to the bar
    # ("Epoch 1:  4%|4         | 18/387 [05:44<1:57:56, 19.13s/it]ValueError: ...")
    r"|[^|\n]{0,80}?\d{1,3}%\|[^|\n]{0,200}\|[^\[\n]{0,80}\[[^\]\n]{0,160}\]"
    # glog: E0501 10:00:00.123456  1234 file.cc:12]
    r"|[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d{1,9} +\d+ [\w./-]{1,120}:\d+\]"
    # Python logging: "ERROR:torch.distributed:" (basicConfig's default), "ERROR - ",
    # "- name - ERROR - "
    rf"|{_LEVEL}:[\w.-]{{0,120}}:"
    rf"|(?:- )?(?:[\w.]{{1,120}} - )?{_LEVEL}(?: -|:|\b)(?: [\w.]{{1,120}} -(?= ))?"
    r")"
)
_PREFIXES = re.compile(rf"(?:[ \t]*{_ONE}[ \t]*){{1,8}}")

# a pattern that starts at the start of the line, after optional inline flags: "(?i)^..."
_ANCHORED = re.compile(r"^(?:\(\?[aiLmsux]+\))*\^")

# A line the program logged at warning / info level (it went on after it): glog's W/I,
# a WARNING / INFO level word, a Python warning ("UserWarning: ..."), at the start of
# the message or in the prefix in front of it.
# (also torch 2.1's own logging format, "[time] torch._dynamo.convert_frame: [WARNING] msg":
# the logger's name, then the level in brackets; dynamo logs a compile failure it recovered
# from by falling back to eager that way)
_WARNING_START = re.compile(r"^(?:\[[^\]]*\]:?\s*)*(?:\[?[WI]\d{4} |\[?(?:WARNING|INFO)\b|(?:\w+)?Warning: "
                            r"|[A-Za-z_][\w.]*: \[(?:WARNING|INFO|DEBUG)\] )")
_WARNING_IN_PREFIX = re.compile(r"(?:^|[\s\[(|:-])(?:WARNING|WARN|INFO|DEBUG)\b|(?:^|[\s\[])[WI]\d{4} ")


def without_prefix(line: str) -> str | None:
    """``line`` after its launcher / logger prefixes, or None when it has none."""
    found = _prefix_end(line)
    return None if found is None else found[1]


def _prefix_end(line: str) -> tuple[int, str] | None:
    found = _PREFIXES.match(line)
    if found is None or found.end() == 0:
        return None
    rest = line[found.end():]
    if rest.endswith("`") and "`" in line[:found.end()]:
        rest = rest[:-1]  # the inline code's closing backtick: the message ends before it
    elif rest.endswith("**") and "**" in line[:found.end()]:
        rest = rest[:-2].rstrip()  # markdown bold's closing mark, likewise
    return (found.end(), rest) if rest else None


# A Python traceback whose newlines were lost on its way to the log or the thread (a
# quoted block pasted as one paragraph, a JSON field printed with its "\n" as spaces):
# "Traceback (most recent call last): File "x.py", line 3, in main() File ... TypeError:
# sequence item 0: expected str instance". Read only when the line holds a traceback's
# header and a frame, or two frames: then each frame and the exception line start a part
# of their own, as they would have started a line.
_FRAME = r'File "[^"\n]{1,400}", line \d+'
# a class as a traceback names it (dotted module path, CapWords name), and an exception
# class as an exception line names it
_CLASS_NAME = r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*"
_EXCEPTION_CLASS = rf"{_CLASS_NAME}(?:Error|Exception|Interrupt|Exit)"
_FLAT_TRACEBACK = re.compile(rf'Traceback \(most recent call last\):\s*{_FRAME}|{_FRAME}.*?\s{_FRAME}')
# where a part starts: after white space, the header, a frame, or an exception class
# followed by ":" (not a frame's source line that raises or catches it: "raise
# KeyError(k)", "except KeyError:")
_FLAT_PART = re.compile(
    rf'(?<=\s)(?:Traceback \(most recent call last\):|{_FRAME}'
    rf'|(?<!except )(?<!raise ){_EXCEPTION_CLASS}(?=:(?:\s|$)))')


# The same exception line printed by several ranks into one stream at once: CPython's
# default excepthook writes the class name, ": " and the message as separate writes, so
# two ranks interleave them ("KeyErrorKeyError: : 'input_ids'"). The class repeated
# whole, then its ": " repeated as often, is read as the one line each rank meant.
_INTERLEAVED = re.compile(rf"({_EXCEPTION_CLASS})(?:\1)+((?::\s*){{2,}})")
# what the scanner's prefilter must let through for such a line to reach the rules: the
# text after the repair is no substring of the line, so no rule's own pattern can vouch
# for it (a form without the back-reference, which Hyperscan does not take)
INTERLEAVED_PROBE = re.compile(r"(?:Error|Exception|Interrupt|Exit)(?::[ \t]*){2}")

# IPython's traceback (a Jupyter / Colab cell, the form threads paste most from
# notebooks) opens with the exception's class, padded, then "Traceback (most recent call
# last)" on the same line (IPython/core/ultratb.py, VerboseTB's header); the exception
# line itself comes last, after every frame, and an excerpt cut short of it keeps only
# this header. The class is read as an exception line without its message.
_IPYTHON_HEADER = re.compile(rf"({_CLASS_NAME}) {{2,}}Traceback \(most recent call")
_IPYTHON_PROBE = re.compile(r"\w {2,}Traceback \(most recent call")

# the lines whose message an anchored pattern reads in a form that is no substring of
# the line: the scanner's prefilter must propose them (LineScanner adds these)
REPAIR_PROBES = (INTERLEAVED_PROBE, _IPYTHON_PROBE)


def message_starts(line: str) -> list[tuple[int, str]]:
    """Where a message may start in ``line`` other than at its first character, as
    (offset, text): after the line's prefixes (``without_prefix``), at each part of a
    traceback flattened onto the line, and an exception line several ranks wrote into
    each other (its text then is the line one rank meant), and the exception class that
    heads an IPython traceback (its text then is the class alone). An anchored pattern is
    tried on each."""
    out = []
    found = _prefix_end(line)
    if found is not None:
        out.append(found)
    body_at, body = found if found is not None else (0, line)
    header = _IPYTHON_HEADER.match(body) if "  Traceback (most recent call" in body else None
    if header is not None:
        out.append((body_at, header.group(1)))
    twice = _INTERLEAVED.match(body)
    # as many ": " as copies of the class: one write of each per rank
    if twice is not None and twice.group(2).count(":") == twice.start(2) // len(twice.group(1)):
        out.append((body_at, f"{twice.group(1)}: {body[twice.end():]}"))
    if 'File "' in line and _FLAT_TRACEBACK.search(line):
        # each part runs to the line's end (a pattern's "$" then means what it means on
        # the whole line, so the prefilter's unanchored patterns stay a superset)
        out += [(m.start(), line[m.start():]) for m in _FLAT_PART.finditer(line)]
    return out


def anchored(pattern: Any) -> bool:
    """Whether the pattern (``re`` or RE2) must match at the start of the line."""
    return _ANCHORED.match(pattern.pattern) is not None


def unanchored(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The pattern without its leading ``^``: a superset of its matches at any prefix
    (what a prefilter that must propose every prefixed line needs)."""
    found = _ANCHORED.match(pattern.pattern)
    if found is None:
        return pattern
    text = pattern.pattern
    return re.compile(text[:found.end() - 1] + text[found.end():], pattern.flags)


def search(pattern: Any, line: str) -> Any:
    """``pattern.search`` on the line, and for an anchored pattern at each other place a
    message may start (``message_starts``: after the prefixes, a flattened traceback's
    parts, an exception line ranks wrote into each other, an IPython header's class) too:
    the one way every part of the classifier tests a line."""
    found = pattern.search(line)
    if found is None and anchored(pattern):
        for _, rest in message_starts(line):
            found = pattern.search(rest)
            if found is not None:
                break
    return found


def warning_level(line: str) -> bool:
    """Whether the line was logged at warning / info level (the program went on)."""
    if _WARNING_START.match(line):
        return True
    rest = without_prefix(line)
    if rest is None:
        return False
    return bool(_WARNING_START.match(rest) or _WARNING_IN_PREFIX.search(line[:len(line) - len(rest)]))
