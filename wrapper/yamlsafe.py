"""One safe YAML loader for every file a user hands us (specs, values, rules).

``yaml.safe_load`` is safe against code execution, not against hostile shapes:

* **Alias bombs.** Nine anchors of nine aliases each are 450 bytes and 9**9 nodes once
  expanded; the data stays small (shared references) but anything that walks it (a line
  map, pydantic, ``json.dumps``) expands it. Aliases may add at most
  ``ALIAS_EXPANSION_BUDGET`` nodes beyond those written in the file.
* **Recursive aliases** (``a: &x [*x]``) build a self-containing object.
* **Deep nesting.** libyaml's composer recurses in C: a hundred thousand ``[`` crash the
  process with SIGSEGV, and PyYAML's constructor raises RecursionError much earlier.
* **Duplicate keys** silently keep the last value (an injected second ``command:`` wins);
  here they are an error naming both lines.

The shape is checked on the parser's event stream, which libyaml produces without
recursion, before anything is composed; only then are nodes composed and constructed.
All failures are :class:`YamlLoadError` with a 0-based ``line`` where one is known.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]

# libyaml when present: parsing dominates validation time on large specs.
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

MAX_DEPTH = 100  # real specs nest about 10 levels; libyaml's C stack is the hard limit
ALIAS_EXPANSION_BUDGET = 100_000  # nodes aliases may add; real specs add a few hundred
_MERGE_TAG = "tag:yaml.org,2002:merge"
_ALIAS_FIX = "write the values out instead of the `*alias`"


class YamlLoadError(Exception):
    """YAML that cannot (or must not) be loaded; ``line`` is 0-based when known."""

    def __init__(self, problem: str, line: int | None, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.fix = fix



@dataclass(frozen=True)
class YamlShape:
    """What the event pass measured: nodes written, nodes after alias expansion, depth."""

    nodes: int
    expanded: int
    depth: int


def check_shape(text: str, *, max_depth: int = MAX_DEPTH,
                alias_budget: int = ALIAS_EXPANSION_BUDGET, line_offset: int = 0) -> YamlShape:
    """Walk the event stream once; refuse deep nesting, recursive aliases and alias bombs.

    ``line_offset``: where ``text`` starts in its file (0-based), for the error's line.
    """
    loader = _BASE_LOADER(text)
    # Per open collection: [expanded size so far, anchor or None]; anchors -> expanded size.
    stack: list[list[Any]] = []
    sizes: dict[str, int] = {}
    nodes = expanded = depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            line = event.start_mark.line + line_offset if event.start_mark is not None else None
            if isinstance(event, yaml.AliasEvent):
                size = sizes.get(event.anchor)
                if size is None:
                    open_anchors = {frame[1] for frame in stack}
                    problem = (f"alias *{event.anchor} refers to a node that contains it "
                               "(a recursive YAML alias)" if event.anchor in open_anchors
                               else f"found undefined alias *{event.anchor}")
                    raise YamlLoadError(problem, line, _ALIAS_FIX)
                expanded += size
                if expanded - nodes > alias_budget:
                    raise YamlLoadError(
                        f"aliases expand to more than {alias_budget} extra nodes "
                        f"(an alias bomb?) at *{event.anchor}", line, _ALIAS_FIX)
                if stack:
                    stack[-1][0] += size
            elif isinstance(event, (yaml.ScalarEvent, yaml.CollectionStartEvent)):
                nodes += 1
                expanded += 1
                if isinstance(event, yaml.ScalarEvent):
                    _close(stack, sizes, 1, event.anchor)
                else:
                    stack.append([1, event.anchor])
                    depth = max(depth, len(stack))
                    if len(stack) > max_depth:
                        raise YamlLoadError(f"nested more than {max_depth} levels deep", line,
                                            "flatten the structure")
            elif isinstance(event, yaml.CollectionEndEvent):
                size, anchor = stack.pop()
                _close(stack, sizes, size, anchor)
    except yaml.YAMLError as error:
        # libyaml's scanner reads a flow collection to its end before the parser yields
        # its first event, and newer libyaml builds refuse deep nesting there, in their
        # own words: our limit is reported in ours, whatever the libyaml version.
        too_deep = _flow_nesting_over(text, max_depth)
        if too_deep is not None:
            raise YamlLoadError(f"nested more than {max_depth} levels deep",
                                too_deep + line_offset, "flatten the structure") from None
        raise _yaml_error(error, line_offset) from None
    finally:
        loader.dispose()
    return YamlShape(nodes=nodes, expanded=expanded, depth=depth)


# Flow brackets outside quoted scalars and comments; a diagnostic for text libyaml already
# refused, so an approximation (block scalars are not told apart) cannot refuse good YAML.
_FLOW_TOKEN = re.compile(r"""[\[{]|[\]}]|\n|'[^'\n]*'|"(?:[^"\\\n]|\\.)*"|(?:^|(?<=\s))#[^\n]*""")


def _flow_nesting_over(text: str, max_depth: int) -> int | None:
    """The 0-based line where flow nesting first passes ``max_depth``, else None."""
    depth = line = 0
    for match in _FLOW_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            if depth > max_depth:
                return line
        elif token in "]}":
            depth = max(depth - 1, 0)
        elif token == "\n":
            line += 1
        else:
            line += token.count("\n")
    return None


def _close(stack: list[list[Any]], sizes: dict[str, int], size: int, anchor: str | None) -> None:
    if anchor is not None:
        sizes[anchor] = size  # a redefined anchor: later aliases mean the newer node
    if stack:
        stack[-1][0] += size


def _yaml_error(error: yaml.YAMLError, line_offset: int) -> YamlLoadError:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return YamlLoadError(problem, mark.line + line_offset if mark is not None else None)


def _check_duplicate_keys(loader: Any, root: yaml.Node, line_offset: int,
                          found: list[YamlLoadError] | None) -> None:
    """Every mapping's explicit keys are distinct (compared as constructed values).

    With ``found``, each duplicate is appended there instead of raised (the last one
    wins, as in ``yaml.safe_load``): for text whose meaning OSMO fixes.
    """
    seen_nodes: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen_nodes:
            continue  # an alias: checked where it was written
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, value_node in node.value:
                todo.extend((key_node, value_node))
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue  # `<<:` may be overridden on purpose; complex keys are rare
                key = loader.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + line_offset
                try:
                    earlier = first_line.get(key)
                except TypeError:
                    continue  # unhashable: the constructor reports it
                if earlier is not None:
                    duplicate = YamlLoadError(
                        f"duplicate key {key_node.value!r} (first on line {earlier + 1}); "
                        "YAML would silently keep only the last one", line,
                        "keep only one of the two")
                    if found is None:
                        raise duplicate
                    found.append(duplicate)
                first_line[key] = line


def compose_and_construct(
    text: str, *, line_offset: int = 0, duplicates: list[YamlLoadError] | None = None
) -> tuple[yaml.Node | None, Any]:
    """The node tree (for line maps) and the data of one YAML document, checked.

    Error lines are 0-based in the file, ``text`` starting ``line_offset`` lines into it.
    """
    check_shape(text, line_offset=line_offset)
    loader = _BASE_LOADER(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_duplicate_keys(loader, node, line_offset, duplicates)
        return node, loader.construct_document(node)
    except yaml.YAMLError as error:
        raise _yaml_error(error, line_offset) from None
    except RecursionError:
        raise YamlLoadError("nested too deeply", None) from None
    except (ValueError, TypeError, OverflowError) as error:
        # PyYAML raises more than YAMLError: `2001-13-01` is a ValueError from datetime,
        # `!!int x` a ValueError, `!!float 1e999999` fine but `!!timestamp` overflows.
        raise YamlLoadError(str(error).splitlines()[0] if str(error) else type(error).__name__,
                            None) from None
    finally:
        loader.dispose()


def safe_load(text: str, *, line_offset: int = 0,
              duplicates: list[YamlLoadError] | None = None) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys, alias bombs and deep nesting.

    ``duplicates``: collect duplicate keys there instead of refusing them.
    """
    return compose_and_construct(text, line_offset=line_offset, duplicates=duplicates)[1]


__all__ = [
    "ALIAS_EXPANSION_BUDGET", "MAX_DEPTH", "YamlLoadError", "YamlShape", "check_shape",
    "compose_and_construct", "safe_load",
]
