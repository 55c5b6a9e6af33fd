"""Parse Python source on the host, one thread at a time.

CPython 3.11 counts the AST converter's recursion depth in interpreter-wide state, so two threads building or
compiling ASTs at once (bench episodes run side by side, web sessions, the restricted sandbox's worker) can fail with
``SystemError: AST constructor recursion depth mismatch``. Every host-side parse goes through :func:`parse`, and code
that compiles an AST object holds :data:`AST_LOCK` while it does.

Example::

    from sandbox.pyparse import parse

    tree = parse("x = 1")
"""

from __future__ import annotations

import ast
import threading
from typing import Literal, overload

#: Held while the ast module converts between C and Python trees (parse, and compile() of an AST object).
AST_LOCK = threading.RLock()


@overload
def parse(source: str, filename: str = ..., mode: Literal["exec"] = ...) -> ast.Module: ...
@overload
def parse(source: str, filename: str = ..., *, mode: Literal["eval"]) -> ast.Expression: ...
@overload
def parse(source: str, filename: str, mode: Literal["eval"]) -> ast.Expression: ...


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse(source, filename, mode)`` under :data:`AST_LOCK`; raises what it raises (SyntaxError, ValueError)."""
    with AST_LOCK:
        return ast.parse(source, filename, mode)
