"""Rules on the SOURCE text: what Jinja or OSMO will read differently than the user meant."""

from __future__ import annotations

import re
from collections.abc import Iterator

from workflows.lint.core import Finding, LintContext, source_line

_SPACED_TOKEN = re.compile(
    r"\{\{(?P<inner>\s*(?:uuid|workflow_id|output|input:[^}]*|host:[^}]*)\s*)\}\}"
)
_RAW = re.compile(r"\{%-?\s*raw\s*-?%\}.*?\{%-?\s*endraw\s*-?%\}", re.DOTALL)
_TOP_LEVEL_KEY = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]*:", re.MULTILINE)


def _workflow_section(ctx: LintContext) -> tuple[int, int]:
    """Character span of the `workflow:` section in the source (what OSMO renders)."""
    text = ctx.rendered.source_text
    lines = text.splitlines(keepends=True)
    start = sum(len(line) for line in lines[: max(ctx.rendered.workflow_line - 1, 0)])
    after = _TOP_LEVEL_KEY.search(text, start + 1)
    return start, after.start() if after else len(text)


def rs013_spaced_runtime_token(ctx: LintContext) -> Iterator[Finding]:
    """OSMO protects ``{{workflow_id}}`` only without spaces; with them Jinja resolves it."""
    text = ctx.rendered.source_text
    start, end = _workflow_section(ctx)
    for match in _SPACED_TOKEN.finditer(text, start, end):
        inner = match.group("inner")
        if inner == inner.strip():
            continue
        token = "{{" + inner.strip().replace(" ", "") + "}}"
        yield Finding(
            "RS013", "error", "workflow",
            f"`{match.group(0)}` has spaces inside the braces, so it is not OSMO's runtime token "
            "but a Jinja variable: OSMO fails it as undefined, or silently puts in a "
            "default-value of that name",
            f"write `{token}` (no spaces)",
            source_line(text, match.start()),
        )


def rs014_jinja_comment_in_shell(ctx: LintContext) -> Iterator[Finding]:
    """``${#arr[@]}`` holds ``{#``: Jinja drops text up to the next ``#}`` or fails."""
    text = ctx.rendered.source_text
    start, end = _workflow_section(ctx)
    raw_spans = [m.span() for m in _RAW.finditer(text, start, end)]
    for match in re.finditer(r"\{#", text[:end]):
        at = match.start()
        if at < start or any(low <= at < high for low, high in raw_spans):
            continue
        shell = at > 0 and text[at - 1] == "$"
        if not shell and "#}" in text[at + 2 : end]:
            continue  # a deliberate Jinja comment
        line = source_line(text, at)
        snippet = text[at - (1 if shell else 0) : at + 12].split("\n")[0]
        yield Finding(
            "RS014", "error", "workflow",
            f"`{snippet}` contains `{{#`, which Jinja reads as the start of a comment: the text "
            "up to the next `#}` disappears from the rendered spec (or rendering fails)",
            "wrap that script in `{% raw %}` ... `{% endraw %}`",
            line,
        )


RULES = (rs013_spaced_runtime_token, rs014_jinja_comment_in_shell)
