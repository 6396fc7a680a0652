"""The requested cost of an Admin GraphQL operation, by Shopify's documented rules.

shopify.dev, "GraphQL Admin API rate limits" → Cost calculation: a field that returns a scalar
or an enum costs 0, an object 1, an interface or union the most of its possible selections, a
mutation 10, and a connection is sized by its ``first``/``last`` argument. Worked out as
Shopify's examples do: a connection costs 2 plus ``first`` times what one of its nodes costs
(the node object and everything selected under it), plus its other fields (``pageInfo``). A
plain list with a ``first`` argument (``Order.transactions``, ``Order.refunds``) is sized the
same way, without the 2. A query whose requested cost passes ``MAX_COST`` is refused
(``MAX_COST_EXCEEDED``) and never runs.

No schema is read: a field with a selection set is an object, one without a scalar. Lists
with no size argument (``disputes``) are counted as one object. This errs high, never low,
which is the side a test that pins Sill's queries under the limit should err on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MAX_COST = 1000

_TOKEN = re.compile(
    r'\.\.\.|[{}():$!,\[\]=@]|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|-?\d+(?:\.\d+)?'
)


@dataclass
class _Field:
    name: str
    arguments: dict[str, str] = field(default_factory=dict)
    selections: list[Any] | None = None


@dataclass
class _Spread:
    fragment: str


@dataclass
class _Inline:
    selections: list[Any]


class _Parser:
    def __init__(self, text: str) -> None:
        # Comments and commas are insignificant in GraphQL.
        text = re.sub(r"#[^\n]*", "", text)
        self.tokens = [t for t in _TOKEN.findall(text) if t != ","]
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if expected is not None and token != expected:
            raise ValueError(f"expected {expected!r}, found {token!r}")
        self.at += 1
        return token

    def skip_parenthesised(self) -> None:
        depth = 0
        while True:
            token = self.take()
            depth += token == "("
            depth -= token == ")"
            if depth == 0:
                return

    def document(self) -> tuple[list[tuple[str, list[Any]]], dict[str, list[Any]]]:
        operations: list[tuple[str, list[Any]]] = []
        fragments: dict[str, list[Any]] = {}
        while self.peek():
            kind = self.take()
            if kind == "fragment":
                name = self.take()
                self.take("on")
                self.take()
                fragments[name] = self.selection_set()
                continue
            if kind not in ("query", "mutation"):
                raise ValueError(f"unexpected {kind!r}")
            if self.peek() not in ("{", "("):
                self.take()  # the operation's name
            if self.peek() == "(":
                self.skip_parenthesised()
            operations.append((kind, self.selection_set()))
        return operations, fragments

    def selection_set(self) -> list[Any]:
        self.take("{")
        selections: list[Any] = []
        while self.peek() != "}":
            if self.peek() == "...":
                self.take()
                if self.peek() == "on":
                    self.take()
                    self.take()
                    selections.append(_Inline(self.selection_set()))
                else:
                    selections.append(_Spread(self.take()))
                continue
            name = self.take()
            if self.peek() == ":":  # an alias
                self.take()
                name = self.take()
            found = _Field(name)
            if self.peek() == "(":
                self.take()
                while self.peek() != ")":
                    argument = self.take()
                    self.take(":")
                    value = self.take()
                    if value == "$":
                        value = "$" + self.take()
                    found.arguments[argument] = value
                self.take(")")
            while self.peek() == "@":
                self.take()
                self.take()
                if self.peek() == "(":
                    self.skip_parenthesised()
            if self.peek() == "{":
                found.selections = self.selection_set()
            selections.append(found)
        self.take("}")
        return selections


def requested_cost(query: str, variables: dict[str, Any] | None = None) -> int:
    """The requested cost of the (one) operation in ``query`` with ``variables``."""
    operations, fragments = _Parser(query).document()
    variables = variables or {}
    (kind, selections), *rest = operations
    if rest:
        raise ValueError("one operation per document")

    def size(found: _Field) -> int | None:
        for name in ("first", "last"):
            value = found.arguments.get(name)
            if value is None:
                continue
            value = variables.get(value[1:]) if value.startswith("$") else value
            if value is not None:
                return int(value)
        return None

    def cost(selections: list[Any], *, top_mutation: bool = False) -> int:
        total = 0
        inline = 0
        for selection in selections:
            if isinstance(selection, _Spread):
                total += cost(fragments[selection.fragment])
            elif isinstance(selection, _Inline):
                inline = max(inline, cost(selection.selections))  # the costliest possibility
            else:
                total += field_cost(selection, top_mutation=top_mutation)
        return total + inline

    def field_cost(found: _Field, *, top_mutation: bool) -> int:
        if found.selections is None:
            return 0  # a scalar or an enum
        own = 10 if top_mutation else 1
        sized = size(found)
        names = {s.name for s in found.selections if isinstance(s, _Field)}
        if sized is not None and names & {"nodes", "edges"}:
            per_node = 0
            others = 0
            for s in found.selections:
                if isinstance(s, _Field) and s.name == "nodes":
                    per_node = max(per_node, field_cost(s, top_mutation=False))
                elif isinstance(s, _Field) and s.name == "edges" and s.selections:
                    # ``edges { cursor node { … } }``: a node's cost once, not the edge's too.
                    per_node = max(per_node, cost(s.selections))
                else:
                    others += cost([s])
            return 2 + sized * per_node + others
        if sized is not None:
            return sized * (own + cost(found.selections))
        return own + cost(found.selections)

    return cost(selections, top_mutation=kind == "mutation")
