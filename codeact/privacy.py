"""Keep personal data out of the model's context: stable placeholders for what the user names.

Opt in with a :class:`PrivacyFilter`: patterns (``"email"``, ``"phone"``, or
``(LABEL, regex)`` of your own) and JSON paths into named tools' results
(``{"get_customer": ["$.email", "$.address.street"]}``). Then

* what the model sees (observations, the notes the agent adds) carries
  placeholders such as ``<EMAIL_1>`` instead of the values; the same value
  always gets the same placeholder within a session;
* the values stay real in the sandbox: tool results reach the code
  unchanged, and the code can pass them to other tools;
* a placeholder the model writes into a tool call (``send_email(to="<EMAIL_1>")``)
  is replaced by its value on the host, just before the tool runs;
* the run log records placeholders only (``log_real_values=True`` keeps the
  real values there); the events your program receives keep real values;
* images are not sent to the model (``send_images=True`` sends them): a figure
  or a screenshot may show what the filter hides, and pixels cannot be given
  placeholders. Each step's observation names the images withheld and says
  why; the images are still saved as artifacts and reach your program's events.

The mapping lives on the host, one per chat session (:class:`Redactor`),
never in the sandbox and never shared between sessions: a placeholder
another session issued means nothing here and stays as it is.

Example::

    from codeact import CodeActAgent
    from codeact.privacy import PrivacyFilter

    agent = CodeActAgent(model, tools, privacy=PrivacyFilter(
        patterns=["email", "phone", ("IBAN", r"\\b[A-Z]{2}\\d{2}[A-Z0-9]{11,30}\\b")],
        fields={"get_customer": ["$.name", "$.address.street"]},
    ))
"""

from __future__ import annotations

import dataclasses
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard, Union

from .errors import ConfigError

#: Built-in patterns by name: (label, regular expression).
BUILTIN_PATTERNS: dict[str, tuple[str, str]] = {
    "email": ("EMAIL", r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"),
    # A candidate; phone numbers are then told apart from other numbers by their digits (9 to 15)
    # and their form (a leading + or separators between groups), see _looks_like_phone.
    "phone": ("PHONE", r"(?<![\w+])\+?\(?\d[\d ().-]{6,20}\d(?![\w])"),
}

PatternSpec = Union[str, tuple[str, str], "re.Pattern[str]"]
_LABEL = re.compile(r"^[A-Z][A-Z0-9_]{0,30}$")
_PLACEHOLDER = re.compile(r"<([A-Z][A-Z0-9_]{0,30})_(\d{1,9})>")
#: What the model is told of the images the filter keeps from it.
IMAGES_WITHHELD = ("withheld by the privacy filter: an image may show what it hides; "
                   "PrivacyFilter(send_images=True) sends images")
#: Most distinct values one session maps (beyond it new values are still replaced, by a shared placeholder).
MAX_VALUES = 100_000


@dataclass(frozen=True)
class PrivacyFilter:
    """What to hide from the model (see the module docs).

    Args:
        patterns: ``"email"``, ``"phone"``, ``(LABEL, regex)`` pairs, or compiled
            patterns (labelled ``REDACTED``). Default: emails and phone numbers.
        fields: per tool name, JSON paths of values in its results to hide
            (``$.email``, ``$.contacts[*].phone``, ``$..email`` for any depth,
            ``$[0].name``). A path's last key is the label (``<EMAIL_1>``); give
            a dict ``{path: LABEL}`` to choose it.
        log_real_values: record real values in the run log (default: placeholders).
        restore_answers: give the final answer to your program with placeholders
            replaced by the values (the run log keeps the placeholders).
        send_images: send the images a step shows or saves (figures, image files, images
            tools return) to the model. Off by default: an image may carry what the filter
            hides (a chart's labels, a screenshot of a record) and cannot be redacted; the
            model is told which images were withheld and why.

    Raises:
        ConfigError: an unknown pattern name, a regex that does not compile,
            a bad label or JSON path.
    """

    patterns: Sequence[PatternSpec] = ("email", "phone")
    fields: Mapping[str, Sequence[str] | Mapping[str, str]] = field(default_factory=dict)
    log_real_values: bool = False
    restore_answers: bool = True
    send_images: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", _compile_patterns(self.patterns))
        object.__setattr__(self, "_paths", _compile_fields(self.fields))

    def session(self) -> Redactor:
        """A fresh mapping for one chat session."""
        return Redactor(self)


class Redactor:
    """One session's placeholders: value <-> ``<LABEL_n>``; thread-safe (tools run on worker threads)."""

    def __init__(self, config: PrivacyFilter) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._by_value: dict[str, str] = {}
        self._by_placeholder: dict[str, Any] = {}
        self._counts: dict[str, int] = {}
        self._known: re.Pattern[str] | None = None

    def __len__(self) -> int:
        return len(self._by_placeholder)

    # --- learning values --------------------------------------------------------------------

    def placeholder(self, value: Any, label: str) -> str:
        """The placeholder of ``value`` (a new one the first time it is seen)."""
        text = str(value)
        with self._lock:
            existing = self._by_value.get(text)
            if existing is not None:
                return existing
            if len(self._by_placeholder) >= MAX_VALUES:
                return f"<{label}>"
            n = self._counts.get(label, 0) + 1
            self._counts[label] = n
            token = f"<{label}_{n}>"
            self._by_value[text] = token
            self._by_placeholder[token] = value
            self._known = None
            return token

    def learn(self, tool: str, result: Any) -> None:
        """Remember the values at the configured JSON paths of ``tool``'s result."""
        for path, label in self.config._paths.get(tool, ()):  # type: ignore[attr-defined]
            for value in _select(result, path):
                if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
                    self.placeholder(value, label)

    # --- hiding and restoring ---------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with every known value and every pattern match replaced by its placeholder."""
        if not text:
            return text
        for label, pattern in self.config._compiled:  # type: ignore[attr-defined]
            for m in pattern.finditer(text):
                found = m.group(0)
                if label == "PHONE" and not _looks_like_phone(found):
                    continue
                self.placeholder(found, label)
        known = self._known_pattern()
        if known is None:
            return text
        return known.sub(lambda m: self._by_value.get(m.group(0), m.group(0)), text)

    def redact_value(self, value: Any) -> Any:
        """``value`` with :meth:`redact` applied to every string in it (dicts, lists, tuples, dataclasses)."""
        return _walk(value, self.redact, 0)

    def restore(self, value: Any) -> Any:
        """``value`` with this session's placeholders replaced by their values (others are left alone).

        A string that is exactly one placeholder becomes the value itself (an
        int stays an int); placeholders inside longer strings are replaced as text.
        """
        def one(text: str) -> Any:
            whole = self._by_placeholder.get(text)
            if whole is not None:
                return whole
            if "<" not in text:
                return text
            return _PLACEHOLDER.sub(lambda m: str(self._by_placeholder.get(m.group(0), m.group(0))), text)

        return _walk(value, one, 0)

    def _known_pattern(self) -> re.Pattern[str] | None:
        with self._lock:
            if self._known is None and self._by_value:
                values = sorted(self._by_value, key=len, reverse=True)
                alternatives = "|".join(
                    (r"(?<!\w)" if v[:1].isalnum() else "") + re.escape(v) + (r"(?!\w)" if v[-1:].isalnum() else "")
                    for v in values)
                self._known = re.compile(alternatives)
            return self._known


# --- events for the run log -----------------------------------------------------------------------


class ChatPrivacy:
    """The privacy filter as one chat session applies it; every method is a no-op when the filter is off.

    What reaches the model (and, unless the filter says otherwise, the run log) carries placeholders; what
    reaches the tools and the caller carries the values again.
    """

    def __init__(self, privacy: PrivacyFilter | None) -> None:
        #: This session's placeholders (host side only), or None when the filter is off.
        self.redactor = privacy.session() if privacy is not None else None

    @property
    def on(self) -> bool:
        return self.redactor is not None

    def redact(self, text: str) -> str:
        """``text`` as the model may see it: placeholders for the values the filter hides."""
        return self.redactor.redact(text) if self.redactor is not None else text

    def images_withheld(self) -> str:
        """Why the step's images are kept from the model ("" when they may be sent)."""
        if self.redactor is None or self.redactor.config.send_images:
            return ""
        return IMAGES_WITHHELD

    def redact_user_messages(self, messages: list[Any]) -> list[Any]:
        """``messages`` with the user's own words (tasks, notes) redacted too (observations already are)."""
        redactor = self.redactor
        if redactor is None:
            return messages
        return [dataclasses.replace(m, content=redactor.redact(m.content))
                if m.role == "user" and isinstance(m.content, str) else m for m in messages]

    def restore_answer(self, answer: Any) -> Any:
        """The model's answer for the caller: placeholders it wrote become the values (when the filter says so)."""
        if self.redactor is None or not self.redactor.config.restore_answers:
            return answer
        return self.redactor.restore(answer)

    def restore_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """A tool call's arguments with the placeholders the model wrote turned back into the values."""
        return self.redactor.restore(arguments) if self.redactor is not None else arguments

    def learn(self, tool: str, value: Any) -> None:
        """Note the values a tool returned that the filter hides (they get placeholders from now on)."""
        if self.redactor is not None:
            self.redactor.learn(tool, value)

    def log_transform(self) -> Any:
        """What the run log records instead of each event (placeholders), or None to record events as they are."""
        redactor = self.redactor
        if redactor is None or redactor.config.log_real_values:
            return None
        return lambda event: redact_event(event, redactor)

    def content_filter(self) -> Any:
        """What captured trace content passes first, or None."""
        return self.redactor.redact if self.redactor is not None else None


def redact_event(event: Any, redactor: Redactor) -> Any:
    """A copy of ``event`` with every string in it redacted (for the run log); bytes are kept."""
    return _walk(event, redactor.redact, 0)


# --- helpers ------------------------------------------------------------------------------------


def _walk(value: Any, fn: Any, depth: int) -> Any:
    if depth > 60:
        return value
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: (v if k == "b64" else _walk(v, fn, depth + 1)) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, fn, depth + 1) for v in value]
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_walk(v, fn, depth + 1) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _walk(getattr(value, f.name), fn, depth + 1) for f in dataclasses.fields(value)
                   if f.init}
        try:
            return dataclasses.replace(value, **changes)
        except Exception:  # a dataclass that cannot be rebuilt is kept as it is
            return value
    return value


def _looks_like_phone(text: str) -> bool:
    digits = sum(c.isdigit() for c in text)
    if not 9 <= digits <= 15:
        return False
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}(?:[ T]\d.*)?", text):  # an ISO date
        return False
    return text.startswith("+") or bool(re.search(r"\d[ ().-]+\d", text))


def _is_pair(value: object) -> TypeGuard[tuple[str, str]]:
    """A ``(LABEL, regex)`` pair: a tuple of two strings."""
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(p, str) for p in value)


def _compile_patterns(patterns: PatternSpec | Sequence[PatternSpec]) -> list[tuple[str, re.Pattern[str]]]:
    specs: Sequence[PatternSpec]
    if isinstance(patterns, (str, re.Pattern)):
        specs = [patterns]
    elif _is_pair(patterns) and _LABEL.match(patterns[0]):
        specs = [patterns]  # one (LABEL, regex) pair
    else:
        specs = patterns
    out = []
    for spec in specs:
        if isinstance(spec, re.Pattern):
            out.append(("REDACTED", spec))
            continue
        if isinstance(spec, str):
            if spec not in BUILTIN_PATTERNS:
                raise ConfigError(f"unknown privacy pattern {spec!r}: use one of {', '.join(BUILTIN_PATTERNS)} "
                                  "or a (LABEL, regex) pair")
            label, regex = BUILTIN_PATTERNS[spec]
        elif _is_pair(spec):
            label, regex = spec
        else:
            raise ConfigError(f"a privacy pattern is a name, a (LABEL, regex) pair or a compiled regex, not {spec!r}")
        if not _LABEL.match(label):
            raise ConfigError(f"privacy label {label!r} must be upper-case letters, digits and _ (e.g. 'ACCOUNT')")
        try:
            out.append((label, re.compile(regex)))
        except re.error as exc:
            raise ConfigError(f"privacy pattern {label}: {exc}") from None
    return out


_STEP = re.compile(r"\.\.(\w+)|\.(\w+)|\[\*\]|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def _compile_fields(fields: Mapping[str, Any]) -> dict[str, list[tuple[list[tuple[str, Any]], str]]]:
    out: dict[str, list[tuple[list[tuple[str, Any]], str]]] = {}
    for tool, paths in dict(fields or {}).items():
        items = paths.items() if isinstance(paths, Mapping) else [(p, None) for p in ([paths] if isinstance(
            paths, str) else paths)]
        for path, label in items:
            steps = _parse_path(str(path))
            if label is None:
                last = next((v for kind, v in reversed(steps) if kind in ("key", "deep")), "VALUE")
                label = re.sub(r"[^A-Z0-9_]", "_", str(last).upper())[:31] or "VALUE"
                if not label[0].isalpha():
                    label = "V" + label[:30]
            if not _LABEL.match(label):
                raise ConfigError(f"privacy label {label!r} for {tool} {path}: use upper-case letters, digits and _")
            out.setdefault(str(tool), []).append((steps, label))
    return out


def _parse_path(path: str) -> list[tuple[str, Any]]:
    if not path.startswith("$"):
        raise ConfigError(f"JSON path {path!r} must start with $ (e.g. $.email, $.items[*].phone)")
    steps: list[tuple[str, Any]] = []
    pos = 1
    while pos < len(path):
        m = _STEP.match(path, pos)
        if m is None:
            raise ConfigError(f"JSON path {path!r}: cannot read it from {path[pos:]!r}; supported: .key, ..key, "
                              "[*], [n], ['key']")
        deep, key, index, q1, q2 = m.groups()
        if deep is not None:
            steps.append(("deep", deep))
        elif key is not None or q1 is not None or q2 is not None:
            steps.append(("key", key if key is not None else (q1 if q1 is not None else q2)))
        elif index is not None:
            steps.append(("index", int(index)))
        else:
            steps.append(("all", None))
        pos = m.end()
    return steps


def _children(value: Any) -> list[Any]:
    if isinstance(value, Mapping):
        return list(value.values())
    if isinstance(value, (list, tuple)):
        return list(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [getattr(value, f.name) for f in dataclasses.fields(value)]
    return []


def _get(value: Any, key: str) -> list[Any]:
    if isinstance(value, Mapping):
        return [value[key]] if key in value else []
    if dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, key):
        return [getattr(value, key)]
    if hasattr(value, "model_dump") and hasattr(value, key):  # pydantic
        return [getattr(value, key)]
    return []


def _select(value: Any, steps: list[tuple[str, Any]]) -> list[Any]:
    current = [value]
    for kind, arg in steps:
        nxt: list[Any] = []
        for v in current:
            if kind == "key":
                nxt.extend(_get(v, arg))
            elif kind == "index":
                if isinstance(v, (list, tuple)) and -len(v) <= arg < len(v):
                    nxt.append(v[arg])
            elif kind == "all":
                nxt.extend(_children(v))
            else:  # deep: the key at any depth
                stack, seen = [v], 0
                while stack and seen < 100_000:
                    item = stack.pop()
                    seen += 1
                    nxt.extend(_get(item, arg))
                    stack.extend(reversed(_children(item)))
        current = nxt
    return current


#: What the system prompt says when a privacy filter is on.
PROMPT_NOTE = (
    "Privacy: some values (e-mail addresses, phone numbers, fields the user marked) are shown to you as "
    "placeholders such as <EMAIL_1>. The code's variables hold the real values: keep working with the "
    "variables, and compare or filter inside the code, not against placeholders. A placeholder you write "
    "in a tool call's arguments is replaced by its real value before the tool runs."
)

#: The same note for a ReAct agent, whose model calls the tools itself and holds no variables.
REACT_PROMPT_NOTE = (
    "Privacy: some values (e-mail addresses, phone numbers, fields the user marked) are shown to you as "
    "placeholders such as <EMAIL_1>. Write a placeholder as it is wherever you need its value: in a tool "
    "call's arguments it is replaced by its real value before the tool runs, and in your final answer "
    "before the user reads it. Never guess the real values."
)


__all__ = ["BUILTIN_PATTERNS", "PROMPT_NOTE", "REACT_PROMPT_NOTE", "PrivacyFilter", "Redactor", "ChatPrivacy",
           "redact_event"]
