"""The one root exception of resched.

Both packages raise subclasses of :class:`ReschedError` for anything a user can fix
(bad input, a missing tool, a refused path). The CLI prints ``str(error)`` as one
line and exits non-zero; only ``--debug`` shows a traceback. It lives in ``wrapper``
because ``wrapper`` must never import ``workflows``, while ``workflows`` may import
``wrapper``.
"""

from __future__ import annotations


class ReschedError(Exception):
    """A user-facing error: what is wrong, where, and how to fix it.

    ``where`` is a file / line / key (``train.yaml:12 workflow.groups[0].tasks[1]``),
    ``fix`` one imperative sentence. ``exit_code`` is what the CLI exits with
    (2 = usage / input error, like click).
    """

    exit_code: int = 2

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where
        self.fix = fix

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        text = " ".join(text.split("\n"))
        if self.fix:
            text += f" (fix: {self.fix})"
        return text
