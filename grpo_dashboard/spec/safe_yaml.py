"""The one YAML loader for text a user sends (run specs, form fields): it cannot be made to explode.

On top of PyYAML's safe loader (no tags beyond plain data), it refuses what lets a few hundred bytes cost seconds
of CPU and gigabytes of memory or crash the parser:

- aliases and anchors (`*name`, `&name`): a "billion laughs" bomb of ~400 bytes expands to a billion nodes as soon
  as anything walks the result; the loader stops at the first alias or anchor, before any expansion. TRL recipes
  (`anchors=True`: published ones use anchors, and TRL's parser reads them) may use them as long as the document
  expanded stays within MAX_EXPANDED nodes: each node's expanded size is counted once, while composing, so the
  bomb is refused after a few hundred nodes of work;
- text over MAX_BYTES: even with libyaml's parser, composing and constructing costs up to ~2 µs a byte (~8 µs in
  pure Python), and a run spec is normally a few KiB;
- nesting deeper than MAX_DEPTH, checked while composing (the composer recurses, so `[[[[...` would otherwise raise
  RecursionError).

Every failure, a syntax error included, is a SpecError whose FieldError names the field, a shortened value, what is
allowed and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent
from yaml.resolver import Resolver

from grpo_dashboard.errors import FieldError, SpecError, shorten

MAX_BYTES = 128 * 1024
MAX_DEPTH = 50
MAX_EXPANDED = 100_000  # nodes of a document with every alias written out (a large recipe has a few thousand)


def read_text(path: str | Path) -> str:
    """A YAML file's text; a SpecError on `(file)` that names the path when it cannot be read."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        problem = FieldError("(file)", str(path), f"cannot be read: {exc}. Give a readable YAML file.")
        raise SpecError([problem]) from exc


def yaml_problem(exc: Exception) -> str:
    """A YAML parse error as one line with its place first (so shortening never cuts it off): `is not valid YAML at
    line 3, column 9: did not find expected ',' or ']' (while parsing a flow sequence). Fix the syntax.`"""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if problem and context else (problem or str(exc))
    return f"is not valid YAML{where}: {shorten(' '.join(str(what).split()), 300)}. Fix the syntax."


def _line(event: Any) -> str:
    mark = getattr(event, "start_mark", None)
    return f" (line {mark.line + 1})" if mark is not None else ""


class _Guard:
    """Composer hooks shared by both loaders: no alias, no anchor, no node deeper than MAX_DEPTH.

    `load` sets `what` and `field` on the loader so the SpecError raised here names the caller's field.
    """

    what = "the run spec"
    field = "(yaml)"
    head = ""
    allow_anchors = False
    _depth = 0
    _sizes: dict[int, int] | None = None  # id(node) -> its size with aliases expanded (anchors=True only)

    def _refuse(self, value: str, message: str) -> SpecError:
        return SpecError([FieldError(self.field, value, message)])

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[attr-defined]
        no_refs = f"aliases (`*name`) and anchors (`&name`) are not supported in {self.what}; write the value out."
        if self.allow_anchors:
            return self._compose_counted(parent, index, event)
        if isinstance(event, AliasEvent):
            name = shorten(str(event.anchor), 40)
            raise self._refuse(f"*{name}", f"uses the alias `*{name}`{_line(event)}; {no_refs}")
        if getattr(event, "anchor", None) is not None:
            name = shorten(str(event.anchor), 40)
            raise self._refuse(f"&{name}", f"defines the anchor `&{name}`{_line(event)}; {no_refs}")
        if self._depth >= MAX_DEPTH:
            raise self._refuse(
                self.head,
                f"nests deeper than {MAX_DEPTH} levels{_line(event)}; at most "
                f"{MAX_DEPTH} levels are allowed in {self.what} (a normal spec uses 3 or 4). "
                "Flatten the structure.",
            )
        self._depth += 1
        try:
            return Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1

    def _compose_counted(self, parent: Any, index: Any, event: Any) -> Any:
        """compose_node with anchors allowed: every node's expanded size from its children's (an alias costs what
        its anchor's node expands to), refused once any node passes MAX_EXPANDED."""
        if self._sizes is None:
            self._sizes = {}
        if not isinstance(event, AliasEvent) and self._depth >= MAX_DEPTH:
            raise self._refuse(
                self.head,
                f"nests deeper than {MAX_DEPTH} levels{_line(event)}; at most "
                f"{MAX_DEPTH} levels are allowed in {self.what} (a normal spec uses 3 or 4). "
                "Flatten the structure.",
            )
        self._depth += 1
        try:
            node = Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1
        if isinstance(event, AliasEvent):
            size = self._sizes.get(id(node), 1)
        elif isinstance(node.value, list):
            items = [x for pair in node.value for x in pair] if node.id == "mapping" else node.value
            size = 1 + sum(self._sizes.get(id(x), 1) for x in items)
        else:
            size = 1
        self._sizes[id(node)] = size
        if size > MAX_EXPANDED:
            name = shorten(str(getattr(event, "anchor", None) or ""), 40)
            where = f" (the alias `*{name}`{_line(event)})" if isinstance(event, AliasEvent) else _line(event)
            raise self._refuse(
                f"*{name}" if isinstance(event, AliasEvent) else self.head,
                f"expands to more than {MAX_EXPANDED} nodes with its aliases written out{where}; {self.what} "
                f"may use anchors and aliases up to that size (a recipe needs a few thousand). Write repeated "
                "values out, or reuse fewer of them.",
            )
        return node


class PySafeLoader(_Guard, yaml.SafeLoader):
    """Pure-Python safe loader with the guards (used where libyaml is missing, and in tests)."""


if yaml.__with_libyaml__:
    from yaml._yaml import CParser

    class CSafeLoader(_Guard, CParser, Composer, SafeConstructor, Resolver):
        """libyaml's parser (about 4x faster) under PyYAML's Python composer, so the guards see every node.

        CSafeLoader composes in C, out of reach of the guards; here CParser only supplies the events and the
        composer methods it also defines are pointed back at the Python ones.
        """

        def __init__(self, stream: str | bytes) -> None:
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)

        get_single_node = Composer.get_single_node
        get_node = Composer.get_node
        check_node = Composer.check_node
        compose_document = Composer.compose_document

    Loader: type = CSafeLoader
else:  # pragma: no cover - PyYAML wheels ship libyaml
    Loader = PySafeLoader


def _size(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB" if n >= 1024 * 1024 else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} bytes"


def load(
    text: str,
    *,
    what: str = "the run spec",
    field: str = "(yaml)",
    loader: type | None = None,
    anchors: bool = False,
) -> Any:
    """Parse YAML `text` (plain data only), raising SpecError on bad syntax and on anything that could explode.

    Args:
        text: the YAML text, as the user sent it.
        what: what the text is, for messages ("the run spec", "reward params").
        field: the field the FieldError names ("(yaml)" for a whole spec, or e.g. "rewards[0].params").
        loader: the loader class (default: the libyaml-backed one where available); for tests.
        anchors: accept anchors and aliases within MAX_EXPANDED expanded nodes (TRL recipes), instead of refusing.
    """

    head = shorten(text[:80], 60)

    def refuse(message: str) -> SpecError:
        return SpecError([FieldError(field, head, message)])

    size = len(text)
    if size <= MAX_BYTES:  # a character is at least one byte: only short texts need encoding to be measured
        size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise refuse(
            f"is {_size(size)} of YAML; {what} may be at most {_size(MAX_BYTES)} ({MAX_BYTES} bytes). "
            "A spec is normally a few KiB: shorten it (long prompts or data belong in files the spec names)."
        )
    ldr: Any = None
    try:
        ldr = (loader or Loader)(text)
        ldr.what, ldr.field, ldr.head, ldr.allow_anchors = what, field, head, anchors
        return ldr.get_single_data()
    except SpecError:
        raise
    except RecursionError:
        raise refuse(
            f"nests too deeply to parse; at most {MAX_DEPTH} levels are allowed in {what}. Flatten the structure."
        ) from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's own cap (PyYAML >= 6.0.4) ran before the composer's
            raise refuse(
                f"nests deeper than {MAX_DEPTH} levels; at most {MAX_DEPTH} levels are allowed in {what} "
                "(a normal spec uses 3 or 4). Flatten the structure."
            ) from None
        raise refuse(yaml_problem(exc)) from exc
    except (ValueError, OverflowError) as exc:  # e.g. `2001-13-45` as a date, an int past Python's digit limit
        raise refuse(
            f"holds a value YAML cannot convert: {shorten(str(exc), 200)}. Quote it to keep it as text, or fix it."
        ) from None
    finally:
        if ldr is not None:
            ldr.dispose()
