"""Every code a rail can give a refund or credit as its outcome has words on the merchant's pages.

A rail's refusal becomes the refund's ``outcome_code`` (refunds.execution: ``exc.code``) and
the refund pages, the list, the CSV and the emails show it through
``refunds.labels.OUTCOME_LABELS``; a code missing there read as its humanized self
("Woocommerce refused", "Shopify unauthorized"). The codes are read from the source, so a
rail that learns a new one fails here until it has words.

Read: each ``RailError`` subclass's ``code``, every ``code="..."`` given to a ``RailError``
(sub)class where a rail raises or returns one, and the values of a rail's table of codes
(PayPal's ``ISSUE_CODES``). Left out: the connection checks (``connect.py``,
``connection.py``, a rail's ``check_connection``), whose codes answer the rail settings form
and never become a refund's outcome.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
from pathlib import Path
from types import ModuleType

import sill.rails
from refunds.labels import OUTCOME_LABELS
from sill.rails.base import RailError

# and the migrations and commands, which raise no rail error.
CONNECTION_MODULES = {"connect", "connection", "migrations", "management"}
CONNECTION_FUNCTIONS = {"check_connection"}
# Beside the rails: where a refund's or a credit's outcome code is given.
ALSO = ("refunds.execution", "refunds.credit_rail")


def _modules() -> list[ModuleType]:
    importlib.import_module("sill.urls")  # the project's import order, as a request has it
    names = [
        info.name
        for info in pkgutil.walk_packages(sill.rails.__path__, prefix="sill.rails.")
        if not CONNECTION_MODULES & set(info.name.split("."))
    ]
    return [importlib.import_module(name) for name in [*names, *ALSO]]


def _resolve(node: ast.expr, module: ModuleType) -> object:
    if isinstance(node, ast.Name):
        return getattr(module, node.id, None)
    if isinstance(node, ast.Attribute):
        owner = _resolve(node.value, module)
        return getattr(owner, node.attr, None) if owner is not None else None
    return None


def _is_rail_error(thing: object) -> bool:
    return inspect.isclass(thing) and issubclass(thing, RailError)


class _Codes(ast.NodeVisitor):
    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.found: dict[str, str] = {}

    def _add(self, code: object, node: ast.AST) -> None:
        if isinstance(code, str) and code:
            where = f"{self.module.__name__}:{getattr(node, 'lineno', '?')}"
            self.found.setdefault(code, where)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name not in CONNECTION_FUNCTIONS:
            self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_rail_error(_resolve(node.func, self.module)):
            for keyword in node.keywords:
                if keyword.arg == "code" and isinstance(keyword.value, ast.Constant):
                    self._add(keyword.value.value, node)
        self.generic_visit(node)

    def _table(self, targets: list[ast.expr], value: ast.expr | None, node: ast.AST) -> None:
        # A table of a provider's codes to Sill's (PayPal's ISSUE_CODES).
        named = [t.id for t in targets if isinstance(t, ast.Name)]
        if any(name.endswith("_CODES") for name in named) and isinstance(value, ast.Dict):
            for code in value.values:
                if isinstance(code, ast.Constant):
                    self._add(code.value, node)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._table(node.targets, node.value, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._table([node.target], node.value, node)
        self.generic_visit(node)


def rail_outcome_codes() -> dict[str, str]:
    """Each code a rail can give a refund, with where it was read."""
    codes: dict[str, str] = {}
    for module in _modules():
        for _name, cls in inspect.getmembers(module, _is_rail_error):
            if cls.__module__ == module.__name__:
                codes.setdefault(cls.code, f"{module.__name__}.{cls.__name__}")
        visitor = _Codes(module)
        visitor.visit(ast.parse(Path(inspect.getfile(module)).read_text()))
        for code, where in visitor.found.items():
            codes.setdefault(code, where)
    return codes


def test_the_codes_are_read_from_every_rail():
    # The enumeration itself: the codes colleagues saw shown without words, and one of each
    # way a code is given (a class's code, a code= argument, PayPal's table).
    codes = rail_outcome_codes()
    for code in (
        "woocommerce_refused",  # code= on a returned PermanentRailError
        "woocommerce_read_only",  # WooCannotWrite.code
        "shopify_unauthorized",
        "rail_unsupported",
        "rail_auth_failed",
        "rail_cannot_look_up",  # CannotLookUp.code (sill.rails.base)
        "already_refunded",  # PayPal's ISSUE_CODES
        "execution_error",  # refunds.execution
    ):
        assert code in codes, code
    # The connection checks' codes answer the settings form, not a refund.
    assert "bad_key" not in codes and "not_a_store" not in codes


def test_every_code_a_rail_can_give_a_refund_has_words():
    missing = {
        code: where for code, where in rail_outcome_codes().items() if code not in OUTCOME_LABELS
    }
    assert not missing, f"no words in refunds.labels.OUTCOME_LABELS for {missing}"
