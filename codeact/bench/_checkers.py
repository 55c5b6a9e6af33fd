"""Checkers: did an episode's answer solve the task?

A checker is any callable ``(answer, expected, ctx) -> CheckResult | bool``.
The built-ins, by name or built with options:

``exact``
    equal after normalising: strings compared without surrounding space,
    case or a trailing full stop; numbers numerically (tolerance 1e-9);
    lists in order and dicts key by key, element by element the same way.
``numeric``
    numbers within ``rel_tol`` / ``abs_tol``; lists and dicts element-wise.
``unordered``
    the same items in any order (a list compared as a multiset).
``custom(fn)``
    your function ``fn(answer, expected, ctx) -> bool | CheckResult``.
``all_of(...)``
    every checker passes (e.g. a number and a plot).
``artifact(pattern)``
    the episode produced a file matching ``pattern`` (a plot: a real PNG).

Answers from ReAct models often arrive as text. Before comparing, a text
answer is read as JSON or a Python literal when the expected value is not a
string (``"[1, 2]"``, ``"{'a': 1}"``); for a number, the last number in the
text counts (``"The total is 1,234.50 EUR"`` -> 1234.5).
"""

from __future__ import annotations

import ast
import fnmatch
import json
import math
import numbers
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Union

from ..errors import BenchError


@dataclass(frozen=True)
class CheckResult:
    """A checker's verdict and why."""

    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class CheckContext:
    """What a checker may look at besides the answer.

    Attributes:
        task_id: the task's id.
        artifacts: files the episode produced: the run's artifacts (CodeAct:
            files the code wrote) and files in the episode's working directory
            (where host tools write).
        workdir: the episode's working directory on the host.
        result: the run's :class:`~codeact.events.RunResult` (None if the run never started);
            in a multi-turn task, this user turn's run.
        turn: in a multi-turn task, the user turn just finished (0-based); None otherwise.
        state: the episode's ``TaskContext.state`` (what the tool factory left for its checker).
    """

    task_id: str = ""
    artifacts: tuple[Path, ...] = ()
    workdir: Path | None = None
    result: Any = None
    turn: int | None = None
    state: dict[str, Any] = field(default_factory=dict)


class Checker(Protocol):
    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult | bool: ...


CheckSpec = Union[str, Callable[[Any, Any, CheckContext], Union[CheckResult, bool]]]


# --------------------------------------------------------------------------- normalising


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def _is_number(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)  # numpy scalars too


def parse_text(answer: Any, expected: Any) -> Any:
    """A text answer read as the kind of value ``expected`` is (see module docs); other answers as they are."""
    if not isinstance(answer, str) or isinstance(expected, str):
        return answer
    text = answer.strip().strip("`").strip()
    for reader in (json.loads, ast.literal_eval):
        try:
            return reader(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    if _is_number(expected):
        found = _NUMBER.findall(text)
        if found:
            return float(found[-1].replace(",", ""))
    if isinstance(expected, bool):
        low = text.lower().rstrip(".!")
        if low in ("yes", "true"):
            return True
        if low in ("no", "false"):
            return False
    if isinstance(expected, (list, tuple, set, frozenset)):
        parts = [p.strip() for p in re.split(r"[\n,;]+", text) if p.strip()]
        return [re.sub(r"^[-*\d.)\s]+", "", p).strip() or p for p in parts]
    return answer


def _norm_text(s: str) -> str:
    return " ".join(s.strip().rstrip(".").split()).casefold()


def _plain(value: Any) -> Any:
    """Restore a codec preview (answers from the run log) to a Python value."""
    if isinstance(value, dict) and "$" in value:
        from ..values import restore

        return restore(value)
    return value


def _equal(answer: Any, expected: Any, tol: float) -> bool:
    answer = _plain(parse_text(answer, expected))
    if isinstance(expected, str):
        return isinstance(answer, (str, int, float)) and _norm_text(str(answer)) == _norm_text(expected)
    if isinstance(expected, bool):
        return answer is expected or (isinstance(answer, str) and parse_text(answer, expected) is expected)
    if _is_number(expected):
        if isinstance(answer, str):
            answer = parse_text(answer, expected)
        return _is_number(answer) and math.isclose(float(answer), float(expected), rel_tol=tol, abs_tol=tol)
    if isinstance(expected, (list, tuple)):
        return (isinstance(answer, (list, tuple)) and len(answer) == len(expected)
                and all(_equal(a, e, tol) for a, e in zip(answer, expected, strict=True)))
    if isinstance(expected, dict):
        if not isinstance(answer, dict):
            return False
        keys_a = {_norm_text(str(k)): v for k, v in answer.items()}
        keys_e = {_norm_text(str(k)): v for k, v in expected.items()}
        return keys_a.keys() == keys_e.keys() and all(_equal(keys_a[k], keys_e[k], tol) for k in keys_e)
    return bool(answer == expected)


def _show(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- built-in checkers


@dataclass(frozen=True)
class Exact:
    """Equal after normalising (see module docs)."""

    tol: float = 1e-9

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
        if _equal(answer, expected, self.tol):
            return CheckResult(True, "equal")
        return CheckResult(False, f"expected {_show(expected)}, got {_show(answer)}")


@dataclass(frozen=True)
class Numeric:
    """Numbers within tolerance; lists and dicts element by element."""

    rel_tol: float = 1e-6
    abs_tol: float = 1e-6

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
        ok = self._close(answer, expected)
        return CheckResult(ok, "within tolerance" if ok else
                           f"expected {_show(expected)} (rel {self.rel_tol:g}, abs {self.abs_tol:g}), "
                           f"got {_show(answer)}")

    def _close(self, answer: Any, expected: Any) -> bool:
        answer = _plain(parse_text(answer, expected))
        if _is_number(expected):
            return _is_number(answer) and math.isclose(float(answer), float(expected), rel_tol=self.rel_tol,
                                                       abs_tol=self.abs_tol)
        if isinstance(expected, (list, tuple)):
            return (isinstance(answer, (list, tuple)) and len(answer) == len(expected)
                    and all(self._close(a, e) for a, e in zip(answer, expected, strict=True)))
        if isinstance(expected, dict):
            if not isinstance(answer, dict):
                return False
            a = {_norm_text(str(k)): v for k, v in answer.items()}
            e = {_norm_text(str(k)): v for k, v in expected.items()}
            return a.keys() == e.keys() and all(self._close(a[k], e[k]) for k in e)
        return _equal(answer, expected, self.abs_tol)


@dataclass(frozen=True)
class Unordered:
    """The same items in any order (duplicates count)."""

    tol: float = 1e-9

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
        answer = _plain(parse_text(answer, list(expected)))
        if not isinstance(answer, (list, tuple, set, frozenset)):
            return CheckResult(False, f"expected a list of {len(expected)} items, got {_show(answer)}")
        remaining = list(expected)
        for item in answer:
            match = next((i for i, e in enumerate(remaining) if _equal(item, e, self.tol)), None)
            if match is None:
                return CheckResult(False,
                                   f"unexpected item {_show(item)}; expected {_show(sorted(map(str, expected)))}")
            remaining.pop(match)
        if remaining:
            return CheckResult(False, f"missing {_show(remaining)}")
        return CheckResult(True, "same items")


@dataclass(frozen=True)
class Artifact:
    """The episode produced a file matching ``pattern`` (``*.png`` files must be real PNGs)."""

    pattern: str = "*.png"
    min_bytes: int = 100

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
        for path in ctx.artifacts:
            if not fnmatch.fnmatch(path.name, self.pattern):
                continue
            try:
                with open(path, "rb") as f:
                    head = f.read(8)
                size = path.stat().st_size
            except OSError:
                continue
            if size < self.min_bytes:
                continue
            if path.suffix.lower() == ".png" and head != b"\x89PNG\r\n\x1a\n":
                continue
            return CheckResult(True, f"{path.name} ({size:,} bytes)")
        names = ", ".join(p.name for p in ctx.artifacts) or "none"
        return CheckResult(False, f"no file matching {self.pattern!r} of at least {self.min_bytes} bytes "
                                  f"(files: {names})")


@dataclass(frozen=True)
class AllOf:
    """Every checker passes; ``expected`` goes to each (an :class:`Artifact` ignores it)."""

    checkers: tuple[Any, ...] = field(default_factory=tuple)

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
        details = []
        for checker in self.checkers:
            verdict = run_check(checker, answer, expected, ctx)
            if not verdict.ok:
                return verdict
            details.append(verdict.detail)
        return CheckResult(True, "; ".join(d for d in details if d))


@dataclass(frozen=True)
class Custom:
    """Your function ``fn(answer, expected, ctx) -> bool | CheckResult``."""

    fn: Callable[[Any, Any, CheckContext], CheckResult | bool]

    def __call__(self, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult | bool:
        return self.fn(answer, expected, ctx)


def exact(tol: float = 1e-9) -> Exact:
    """Equal after normalising (strings, numbers within ``tol``, lists in order, dicts)."""
    return Exact(tol)


def numeric(rel_tol: float = 1e-6, abs_tol: float = 1e-6) -> Numeric:
    """Numbers within tolerance: ``numeric(rel_tol=0.01)`` accepts 1 %."""
    return Numeric(rel_tol, abs_tol)


def unordered() -> Unordered:
    """The same items in any order."""
    return Unordered()


def artifact(pattern: str = "*.png", min_bytes: int = 100) -> Artifact:
    """A file the episode produced, e.g. ``artifact("*.png")`` for a plot that must exist."""
    return Artifact(pattern, min_bytes)


def all_of(*checkers: CheckSpec) -> AllOf:
    """Every checker passes: ``all_of(numeric(abs_tol=0.01), artifact("*.png"))``."""
    return AllOf(tuple(resolve_checker(c) for c in checkers))


def custom(fn: Callable[[Any, Any, CheckContext], CheckResult | bool]) -> Custom:
    """Wrap your own function as a checker."""
    return Custom(fn)


_BY_NAME: dict[str, Callable[[], Any]] = {"exact": Exact, "numeric": Numeric, "unordered": Unordered,
                                          "artifact": Artifact}


def resolve_checker(spec: CheckSpec) -> Any:
    """A checker from a name (``"exact"``, ``"numeric"``, ``"unordered"``, ``"artifact"``) or a callable.

    Raises:
        BenchError: an unknown name or something that is not callable.
    """
    if isinstance(spec, str):
        factory = _BY_NAME.get(spec)
        if factory is None:
            raise BenchError(f"unknown checker {spec!r}; use one of {', '.join(_BY_NAME)} or a function")
        return factory()
    if not callable(spec):
        raise BenchError(f"a checker must be a name or a callable (answer, expected, ctx), got {spec!r}")
    return spec


def run_check(checker: Any, answer: Any, expected: Any, ctx: CheckContext) -> CheckResult:
    """Run a checker; a checker that raises fails the episode with the error as the detail."""
    try:
        verdict = checker(answer, expected, ctx)
    except Exception as exc:
        return CheckResult(False, f"the checker raised {type(exc).__name__}: {exc}")
    if isinstance(verdict, CheckResult):
        return verdict
    return CheckResult(bool(verdict), "custom check" if verdict else "custom check failed")


__all__ = ["AllOf", "Artifact", "CheckContext", "CheckResult", "CheckSpec", "Checker", "Custom", "Exact", "Numeric",
           "Unordered", "all_of", "artifact", "custom", "exact", "numeric", "parse_text", "resolve_checker",
           "run_check"]
