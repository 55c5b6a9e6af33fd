"""Compaction: a long session's history folded to fit the model's context window.

The CodeAct and ReAct sessions keep their whole history (``session.messages``,
also what the run log holds) and ask a :class:`Compactor` for the messages to
send before every model call. When the next prompt would pass the **budget**,
the oldest steps are folded, in this order, each stage only as far as needed:

1. old observations are masked (a one-line stand-in saying how long they were);
2. earlier turns' user messages, when long, keep their head and a line saying
   where the rest went: the kernel variables that turn's code assigned and the
   kernel still holds (read from the kernel's live namespace), else the run log;
3. old actions (assistant messages) become a one-line stand-in: how many lines
   of code ran and which names they assigned; long prose is cut;
4. whole old turns are folded into one "session so far" block, appended to the
   system message: the user's messages (shortened), the answers given, the
   files in the workspace and **the kernel's live namespace** (names, types,
   shapes or lengths, a short repr) read from the sandbox at the moment of
   folding, and a line telling the model it can print anything it needs.
   With ``condenser="summary"`` a model call also summarises what was folded
   (its usage is the :class:`~codeact.events.Compacted` event's and the run's).

Never folded: the system prompt, the current task, the last ``keep_steps``
steps of the current turn. The budget is a target, not a wall: a prompt that
stays over it after folding is still sent, and a run ends with
:class:`ContextTooLarge` only when the endpoint refuses a prompt that has
nothing left to fold, or when the system prompt, the current message and the
reply's room alone exceed a known window (the error quotes the three numbers). Once compaction starts it goes down to
``AFTER_SHARE`` of the budget, and what is folded stays folded (the block is
rebuilt only when more turns are folded): endpoints that cache prompt
prefixes see the same prefix step after step.

The budget: ``share`` (default 75%) of the model's context window
(:func:`codeact.context_window.context_window`), less the reply's room
(the model's ``max_tokens`` when set), and never more than ``history_budget``
when that is given: the effective budget is ``min(history_budget, share of
the window)``; with no known window, ``history_budget`` alone.

On a :class:`~codeact.errors.ContextOverflowError` from the endpoint the
session calls :meth:`Compactor.overflow`: the window is learnt (``exc.limit``
when the endpoint named it; otherwise 70% of the prompt that failed), the last
step alone is kept, and the call is retried. When nothing is left to fold the
run ends with a :class:`ContextTooLarge` that says what is too big.

Example (what a session's model call does)::

    compactor = Compactor(model, namespace=lambda: read_namespace(sandbox))
    response = yield from compacted_call(compactor, session.messages, turn_starts,
                                         lambda messages: model_turn(model, messages, ...),
                                         run_id=run_id, step=step)
"""

from __future__ import annotations

import ast
import math
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .context_window import context_window, count_tokens
from .errors import ConfigError, ContextOverflowError
from .events import Compacted, Event
from .images import strip_old_images
from .messages import Message, Usage
from .transcript import TASK_CHARS, elided_observation, task_stand_in

#: Share of the context window a prompt may take before compaction starts.
DEFAULT_SHARE = 0.75
#: Once compaction starts, it folds down to this share of the budget (fewer, larger folds: a stable prefix).
AFTER_SHARE = 0.6
#: Steps of the current turn kept whole (an assistant message and its observation each).
KEEP_STEPS = 2
#: Retries of one model call after a context-length error, each with a smaller target.
MAX_RETRIES = 5
#: Prompts (estimated tokens) shorter than this do not calibrate the count: fixed overheads
#: (chat template, tool schemas) would dominate the ratio.
CALIBRATE_MIN_TOKENS = 200
#: The most the endpoint's count may exceed the estimate by (a bound on what a response can teach).
MAX_SCALE = 8.0
#: Characters of the "session so far" block once the endpoint refused a prompt with nothing else left to fold.
MIN_BLOCK_CHARS = 600
#: An earlier turn's user message longer than this may be cut to its head (TASK_CHARS) and a line
#: saying where the rest went.
TASK_FOLD_CHARS = 800
ANSWER_CHARS = 300
PROSE_CHARS = 400
#: Turns the block lists one by one (older ones are counted); variables and files it lists.
BLOCK_TURNS = 100
BLOCK_VARIABLES = 60
BLOCK_FILES = 40
REPR_CHARS = 80
#: Share of the budget the "session so far" block may take.
BLOCK_SHARE = 0.25
#: Characters of folded transcript a summary call reads.
SUMMARY_INPUT_CHARS = 24_000
SUMMARY_CHARS = 2_000

Condenser = Literal["fold", "summary"]
CONDENSERS = ("fold", "summary")
BLOCK_HEADER = "## Session so far (earlier turns condensed to fit the context window)"

SUMMARY_PROMPT = ("You condense the earlier part of a conversation between a user and a coding agent whose Python "
                  "runs in a persistent kernel. Write a short summary (at most 12 bullet points) of what the user "
                  "wanted, what was found or decided, and what was left open. Do not invent details.")


class ContextTooLarge(ContextOverflowError):
    """The current step alone (system prompt, current task, last step) does not fit the context window."""


@dataclass
class _Folded:
    """What is folded so far; it only grows (the prefix the model sees stays stable)."""

    #: Index in the history -> its stand-in (a masked observation, a shortened action).
    replaced: dict[int, Message] = field(default_factory=dict)
    turns: int = 0  # turns folded into the block, counted from the first
    block: str = ""
    summary: str = ""
    keep_steps: int = KEEP_STEPS
    #: How hard to fold after refusals: 0 as configured; 1 no step of the current turn kept whole;
    #: 2 the block cut to MIN_BLOCK_CHARS too. Back to 0 when a turn starts.
    level: int = 0
    turns_seen: int = 0


@dataclass(frozen=True)
class _Fold:
    """One compaction's doing, for its event."""

    masked: int = 0
    shortened: int = 0
    tasks: int = 0
    turns: int = 0
    usage: Usage = field(default_factory=Usage)


class Compactor:
    """Folds a session's history to fit its model's context window (see the module docstring).

    Args:
        model: the session's model (its window: :func:`~codeact.context_window.context_window`;
            its ``max_tokens``: the reply's room; its ``complete``: the summary call).
        history_budget: a budget in tokens the prompt may never pass, or None.
        share: share of the window a prompt may take (0 < share <= 1).
        condenser: ``"fold"`` (the block lists what was folded) or ``"summary"`` (and a model call
            summarises it).
        elide_observation: the one-line stand-in of an observation message, or None for a message
            that is not one.
        namespace: reads the kernel's variables now (a :class:`codeact._namespace.VariableListing`),
            or None (no kernel: ReAct).
        files: lists the workspace's files now (objects with ``path`` and ``size``), or None.
        redact: applied to the block's text (the privacy filter's placeholders), or None.
        keep_steps: steps of the current turn never folded.
    """

    def __init__(self, model: Any, *, history_budget: int | None = None, share: float = DEFAULT_SHARE,
                 condenser: str = "fold", elide_observation: Callable[[Message], Message | None] | None = None,
                 namespace: Callable[[], Any] | None = None, files: Callable[[], Sequence[Any]] | None = None,
                 redact: Callable[[str], str] | None = None, keep_steps: int = KEEP_STEPS) -> None:
        check_options(condenser, share, history_budget)
        self.model = model
        self.history_budget = history_budget
        self.share = share
        self.condenser = condenser
        self.elide_observation = elide_observation or elided_observation
        self.namespace = namespace
        self.files = files
        self.redact = redact
        self._learned: int | None = None  # a window a context-length error taught
        #: Real tokens per estimated token, as the endpoint's own counts showed (usage, overflow errors):
        #: a model whose tokenizer is unknown may need far more tokens than the estimate (SmolLM2 takes a
        #: token per digit and per punctuation mark).
        self.scale = 1.0
        self._state = _Folded(keep_steps=keep_steps)
        self._base: tuple[int, int] | None = None  # (id, length) of the history the state was made for

    # --- the budget ---------------------------------------------------------------------------

    @property
    def window(self) -> int | None:
        """The context window in tokens: the model's, else what an overflow taught, else None."""
        known = context_window(self.model)
        if known is not None and self._learned is not None:
            return min(known, self._learned)
        return known if known is not None else self._learned

    @property
    def budget(self) -> int | None:
        """Tokens the prompt may take before compaction starts (None: no limit known)."""
        window = self.window
        share = None
        if window is not None:
            share = int(window * self.share)
            reply = getattr(self.model, "max_tokens", None)
            if isinstance(reply, int) and reply > 0:
                share = min(share, window - reply)
            share = max(share, 1)
        if self.history_budget is None:
            return share
        return self.history_budget if share is None else min(self.history_budget, share)

    def count(self, messages: Sequence[Message]) -> int:
        """Tokens ``messages`` take, as calibrated against the endpoint's own counts (:meth:`calibrate`)."""
        tokens = count_tokens(self.model, messages)
        return tokens if self.scale == 1.0 else math.ceil(tokens * self.scale)

    def calibrate(self, sent: Sequence[Message], prompt_tokens: int | None, *, at_least: bool = False) -> None:
        """Learn how the endpoint counts: ``prompt_tokens`` is what it said ``sent`` took (a response's
        usage, or an overflow error's number). The latest ratio wins (``at_least``: only when larger), so a
        history that changes kind (numbers, then code) is counted as the endpoint counts it now."""
        if not isinstance(prompt_tokens, int) or prompt_tokens <= 0:
            return
        estimate = count_tokens(self.model, sent)
        if estimate < CALIBRATE_MIN_TOKENS:
            return
        ratio = min(MAX_SCALE, max(1.0, prompt_tokens / estimate))
        self.scale = max(self.scale, ratio) if at_least else ratio

    # --- what the model sees --------------------------------------------------------------------

    def view(self, messages: Sequence[Message], turn_starts: Sequence[int]) -> list[Message]:
        """The messages to send with what is folded so far applied (nothing new is folded)."""
        self._check_base(messages)
        state = self._state
        out: list[Message] = []
        first = turn_starts[state.turns] if state.turns and state.turns < len(turn_starts) else None
        for i, m in enumerate(messages):
            if i == 0 and m.role == "system" and state.block:
                m = replace(m, content=m.content + "\n\n" + state.block)
            elif first is not None and 0 < i < first:
                continue  # folded into the block
            elif i in state.replaced:
                m = state.replaced[i]
            out.append(m)
        return strip_old_images(out)  # images only on the newest message that has any (codeact.images)

    def prepare(self, messages: Sequence[Message], turn_starts: Sequence[int], *, run_id: str = "",
                step: int = 0) -> tuple[list[Message], Compacted | None]:
        """The messages for the next model call, folded further when they pass the budget; the event if so."""
        state = self._state
        if len(turn_starts) != state.turns_seen:  # a new turn: fold as configured again
            state.turns_seen, state.level, state.keep_steps = len(turn_starts), 0, max(state.keep_steps, 1)
        view = self.view(messages, turn_starts)
        budget = self.budget
        if budget is None:
            return view, None
        before = self.count(view)
        if before <= budget:
            return view, None
        new, event = self._compact(messages, turn_starts, before, int(budget * AFTER_SHARE), "budget", run_id, step)
        # The budget is a target; the window is not: a prompt the count puts past the window (with the reply's
        # room) is folded harder before it is sent, as a refusal would have it.
        window, reply = self.window, self._reply_room()
        while window is not None and event.tokens_after + reply > window and state.level < 2:
            self._harder(messages, turn_starts)
            new, more = self._compact(messages, turn_starts, before, int(budget * AFTER_SHARE), "budget", run_id,
                                      step)
            event = merged(event, more)
        # Nothing left to fold: send what there is (the endpoint may still take it; if not, overflow() decides).
        return (new, event) if event.tokens_after < before else (view, None)

    def _reply_room(self) -> int:
        reply = getattr(self.model, "max_tokens", None)
        return reply if isinstance(reply, int) and reply > 0 else 0

    def _harder(self, messages: Sequence[Message], turn_starts: Sequence[int]) -> None:
        """One level harder (see :attr:`_Folded.level`)."""
        state = self._state
        state.level += 1
        if state.level == 1:
            state.keep_steps = 0
        elif state.turns:
            state.block = self._block(self._folded_turns(messages, turn_starts), limit=MIN_BLOCK_CHARS)

    def overflow(self, exc: ContextOverflowError, messages: Sequence[Message], turn_starts: Sequence[int], *,
                 run_id: str = "", step: int = 0) -> tuple[list[Message], Compacted]:
        """After the endpoint refused the prompt as too long: learn the window and the count, fold harder.

        Each refusal folds harder than the one before: to 70% of what was refused; then no step of the
        current turn kept whole; then the "session so far" block cut short. Raises
        :class:`ContextTooLarge` when nothing is left to fold: the system prompt, the current message and
        the reply's room alone do not fit (its message quotes the three numbers).
        """
        view = self.view(messages, turn_starts)
        self.calibrate(view, exc.requested, at_least=True)
        before = self.count(view)
        limit = exc.limit if isinstance(exc.limit, int) and exc.limit > 0 else None
        # Without the endpoint's number the window is below what was sent: aim well under it.
        learned = limit if limit is not None else int(before * 0.7)
        self._learned = learned if self._learned is None else min(self._learned, learned)
        state = self._state
        state.keep_steps = min(state.keep_steps, 1)
        target = min(self.budget or learned, int(before * 0.7))
        event: Compacted | None = None
        while True:
            new, more = self._compact(messages, turn_starts, before, int(target * AFTER_SHARE), "overflow",
                                      run_id, step)
            event = more if event is None else merged(event, more)
            if event.tokens_after < before:
                return new, event
            if state.level >= 2:
                raise ContextTooLarge(self.too_large(messages, turn_starts, exc), limit=exc.limit,
                                      requested=exc.requested)
            self._harder(messages, turn_starts)

    def too_large(self, messages: Sequence[Message], turn_starts: Sequence[int], exc: BaseException) -> str:
        """What does not fit when nothing is left to fold: the three numbers, and what to change."""
        current = messages[turn_starts[-1]] if turn_starts else messages[-1]
        system = self.count(messages[:1])
        task = self.count([current])
        reply = getattr(self.model, "max_tokens", None)
        room = f"{reply:,} for the reply (max_tokens)" if isinstance(reply, int) and reply > 0 else \
            "the reply's room (max_tokens is not set)"
        window = self.window
        size = f"{window:,} tokens" if window else "a size the endpoint did not name"
        return (f"the current step alone does not fit the model's context window ({size}): the system prompt "
                f"takes ~{system:,} tokens, the current message ~{task:,}, and {room}; everything older is "
                f"folded already (the endpoint said: {one_line(str(exc), 200)}). Shorten the message or the file "
                "it inlines (put data in a file and name it), lower observation_limit or max_tokens, or use a "
                "model with a bigger context window.")

    # --- folding ------------------------------------------------------------------------------

    def _check_base(self, messages: Sequence[Message]) -> None:
        """Start over when the history is not the one the state was made for (a rebuilt or shorter one)."""
        base = (id(messages), len(messages))
        if self._base is not None and (self._base[0] != base[0] or base[1] < self._base[1]):
            self._state = _Folded(keep_steps=self._state.keep_steps)
        self._base = base

    def _compact(self, messages: Sequence[Message], turn_starts: Sequence[int], before: int, target: int,
                 reason: str, run_id: str, step: int) -> tuple[list[Message], Compacted]:
        started = time.perf_counter()
        fold = self._fold(messages, turn_starts, target)
        view = self.view(messages, turn_starts)
        after = self.count(view)
        event = Compacted(run_id=run_id, step=step, reason=reason, observations_masked=fold.masked,
                          actions_shortened=fold.shortened, messages_shortened=fold.tasks, turns_folded=fold.turns,
                          turns_folded_total=self._state.turns, tokens_before=before, tokens_after=after,
                          budget=self.budget or 0, window=self.window, seconds=time.perf_counter() - started,
                          summary=bool(fold.usage.requests), usage=fold.usage)
        return view, event

    def _fold(self, messages: Sequence[Message], turn_starts: Sequence[int], target: int) -> _Fold:
        state = self._state
        current = turn_starts[-1] if turn_starts else len(messages)
        # The last steps of the current turn are kept whole (but never the current task: it is kept anyway).
        tail = max(current + 1, len(messages) - 2 * state.keep_steps)
        first_kept = turn_starts[state.turns] if state.turns < len(turn_starts) else current

        # Counted once, then by difference (the count of a list is the sum of its messages' counts).
        total = self.count(self.view(messages, turn_starts))

        def replace_with(i: int, new: Message) -> None:
            nonlocal total
            total -= self.count([state.replaced.get(i, messages[i])]) - self.count([new])
            state.replaced[i] = new

        masked: list[int] = []
        shortened: list[int] = []
        tasks: list[int] = []
        # 1. old observations
        for i in range(first_kept, tail):
            if total <= target:
                break
            short = self.elide_observation(messages[i]) if i not in state.replaced and i not in turn_starts else None
            if short is not None:
                replace_with(i, short)
                masked.append(i)
        # 2. earlier turns' user messages (their data usually lives on in the kernel)
        variables: dict[str, Any] | None = None
        for k in range(state.turns, len(turn_starts) - 1):
            i = turn_starts[k]
            if total <= target:
                break
            if i in state.replaced or len(messages[i].content) <= TASK_FOLD_CHARS:
                continue
            if variables is None:
                variables = self._live_variables()
            where = where_it_went(messages[i + 1:turn_starts[k + 1]], variables)
            replace_with(i, task_stand_in(messages[i], k + 1, where))
            tasks.append(i)
        # 3. old actions
        for i in range(first_kept, tail):
            if total <= target:
                break
            m = messages[i]
            if m.role == "assistant" and i not in state.replaced:
                short = stand_in(m)
                if short != m:
                    replace_with(i, short)
                    shortened.append(i)
        # 4. whole old turns (never the current one)
        turns, usage = 0, Usage()
        if total > target:
            end = state.turns
            while end < len(turn_starts) - 1:
                end += 1
                if self._fits_without(messages, turn_starts, end, target):
                    break
            if end > state.turns:
                turns = end - state.turns
                usage = self._fold_turns(messages, turn_starts, end)
        # What a folded turn held is counted as the turn, not again as masked or shortened.
        kept = turn_starts[state.turns] if state.turns < len(turn_starts) else len(messages)
        return _Fold(sum(i >= kept for i in masked), sum(i >= kept for i in shortened), sum(i >= kept for i in tasks),
                     turns, usage)

    def _live_variables(self) -> dict[str, Any]:
        """The kernel's variables now, by name (empty when there is no kernel or it cannot be read)."""
        listing, _ = self._read_namespace()
        return {v.name: v for v in listing.variables} if listing is not None else {}

    def _fits_without(self, messages: Sequence[Message], turn_starts: Sequence[int], turns: int,
                      target: int) -> bool:
        """Whether folding the first ``turns`` turns would fit (the block's own size estimated)."""
        rest = messages[turn_starts[turns]:]
        estimate = self.count([messages[0], *rest]) + 600
        return estimate <= target

    def _fold_turns(self, messages: Sequence[Message], turn_starts: Sequence[int], end: int) -> Usage:
        state = self._state
        usage = Usage()
        if self.condenser == "summary":
            usage = self._summarise(messages[turn_starts[state.turns]:turn_starts[end]])
        state.turns = end
        state.block = self._block(self._folded_turns(messages, turn_starts),
                                  limit=MIN_BLOCK_CHARS if state.level >= 2 else None)
        state.replaced = {i: m for i, m in state.replaced.items() if i >= turn_starts[end]}
        return usage

    def _summarise(self, folded: Sequence[Message]) -> Usage:
        """Ask the model for a summary of ``folded`` (and the summary before); the call's usage."""
        transcript = "\n\n".join(f"[{m.role}] {m.content}" for m in folded)
        if len(transcript) > SUMMARY_INPUT_CHARS:
            half = SUMMARY_INPUT_CHARS // 2
            transcript = transcript[:half] + "\n[...]\n" + transcript[-half:]
        if self._state.summary:
            transcript = f"Summary so far:\n{self._state.summary}\n\nThen:\n{transcript}"
        try:
            response = self.model.complete([Message("system", SUMMARY_PROMPT), Message("user", transcript)])
        except Exception:  # the fold alone still carries the session; the summary is a bonus
            return Usage(requests=1)
        self._state.summary = shorten(response.text or "", SUMMARY_CHARS)
        usage: Usage = response.usage
        return usage if usage.requests else replace(usage, requests=1)

    def _folded_turns(self, messages: Sequence[Message], turn_starts: Sequence[int]) -> list[Sequence[Message]]:
        return [messages[turn_starts[k]:turn_starts[k + 1]] for k in range(self._state.turns)]

    def _block(self, turns: Sequence[Sequence[Message]], *, limit: int | None = None) -> str:
        # The block is bounded by a share of the budget (a small window must still fit it and the current
        # step): the newest turns, files and variables first; what does not fit is counted.
        if limit is None:
            limit = max(1500, int((self.budget or 20_000) * BLOCK_SHARE * 3))
        head = [BLOCK_HEADER, f"{len(turns)} earlier turn(s) were folded to fit the context window."]
        if self._state.summary:
            head += ["", "Summary of them:", self._state.summary]
        listing, failure = self._read_namespace()
        variables = {v.name: v for v in listing.variables} if listing is not None else {}
        turn_lines: list[str] = []
        used, shown = 0, 0
        for number in range(len(turns), 0, -1):
            turn = turns[number - 1]
            said = turn[0].content if turn else ""
            entry = [f"- turn {number}: {one_line(said, TASK_CHARS)}"]
            if len(" ".join(said.split())) > TASK_CHARS:  # the line cut it: where the rest went
                entry[0] += f" [{len(said):,} characters; {where_it_went(turn[1:], variables)}]"
            answer = answer_of(turn)
            if answer:
                entry.append(f"  answer: {one_line(answer, ANSWER_CHARS)}")
            size = sum(len(line) + 1 for line in entry)
            if shown >= BLOCK_TURNS or used + size > limit * 0.45:
                break
            turn_lines[:0] = entry
            used, shown = used + size, shown + 1
        if shown < len(turns):
            turn_lines.insert(0, f"- ({len(turns) - shown} older turns not listed)")
        lines = [*head, "", "What the user asked, and the answers:", *turn_lines]
        if self.files is not None:
            lines += ["", *cut_lines(self._files_lines(), int(limit * 0.1), "files")]
        if self.namespace is not None:
            lines += ["", *cut_lines(namespace_lines(listing, failure), int(limit * 0.45),
                                     "variables (list them with dir())")]
            lines += ["", "The kernel still holds everything these turns defined: print any variable you need "
                          "rather than recomputing it."]
        text = "\n".join(lines)
        return self.redact(text) if self.redact is not None else text

    def _files_lines(self) -> list[str]:
        try:
            files = list(self.files()) if self.files is not None else []
        except Exception as exc:  # a listing that fails is said, the fold goes on
            return [f"Files in the workspace: could not be listed ({type(exc).__name__})."]
        if not files:
            return ["Files in the workspace: none."]
        lines = ["Files in the workspace:"]
        for f in files[:BLOCK_FILES]:
            lines.append(f"- {one_line(str(getattr(f, 'path', f)), 200)} ({getattr(f, 'size', '?')} bytes)")
        if len(files) > BLOCK_FILES:
            lines.append(f"- ... and {len(files) - BLOCK_FILES} more")
        return lines

    def _read_namespace(self) -> tuple[Any, str]:
        """The kernel's listing now, or None and why not."""
        try:
            listing = self.namespace() if self.namespace is not None else None
        except Exception as exc:  # a listing that fails is said, the fold goes on
            return None, f"could not be listed ({type(exc).__name__})"
        if listing is None or getattr(listing, "error", None):
            return None, str(getattr(listing, "error", None) or "not listed")
        return listing, ""


def namespace_lines(listing: Any, failure: str) -> list[str]:
    """The block's lines for the kernel's variables (:class:`codeact._namespace.VariableListing`)."""
    if listing is None:
        return [f"Variables in the kernel: {failure}."]
    variables = list(listing.variables)
    if not variables:
        return ["Variables in the kernel: none."]
    lines = [f"Variables in the kernel now ({listing.total}):"]
    for v in variables[:BLOCK_VARIABLES]:
        lines.append(f"- {v.name} ({described(v)}): {one_line(v.repr, REPR_CHARS)}")
    if listing.total > min(len(variables), BLOCK_VARIABLES):
        lines.append(f"- ... and {listing.total - min(len(variables), BLOCK_VARIABLES)} more "
                     "(list them with dir())")
    return lines


def described(variable: Any) -> str:
    """A variable's type and size, as the listing gives them: ``list, len 300``."""
    return f"{variable.type}, {variable.size}" if getattr(variable, "size", "") else str(variable.type)


# --- what is folded, as plain data (the run log keeps it; a resumed session restores it) ---------------


def folded_state(compactor: Compactor) -> dict[str, Any]:
    """What ``compactor`` has folded so far, and what the endpoint taught (window, token scale), as JSON-able data."""
    state = compactor._state
    return {"replaced": {str(i): [m.role, m.content, m.tool_call_id] for i, m in state.replaced.items()},
            "turns": state.turns, "block": state.block, "summary": state.summary,
            "keep_steps": state.keep_steps, "level": state.level, "turns_seen": state.turns_seen,
            "scale": compactor.scale, "learned": compactor._learned}

def restore_folded(compactor: Compactor, data: Any) -> None:
    """Make ``compactor`` fold as :func:`folded_state` said (the history must be the one it was made for);
    data without that shape (a log from an older version, or edited) is ignored."""
    if not isinstance(data, dict) or not data:
        return
    try:
        replaced = {int(i): Message(role, str(content), tool_call_id=call_id)
                    for i, (role, content, call_id) in dict(data["replaced"]).items()
                    if role in ("user", "assistant", "tool")}
        state = _Folded(replaced=replaced, turns=int(data["turns"]), block=str(data["block"]),
                        summary=str(data["summary"]), keep_steps=int(data["keep_steps"]),
                        level=int(data["level"]), turns_seen=int(data["turns_seen"]))
        scale = min(MAX_SCALE, max(1.0, float(data["scale"])))
        learned = data["learned"]
        learned = int(learned) if isinstance(learned, int) and learned > 0 else None
    except (KeyError, TypeError, ValueError):
        return
    compactor._state, compactor.scale, compactor._learned, compactor._base = state, scale, learned, None


def merged(first: Compacted, then: Compacted) -> Compacted:
    """One event for two folds of the same call (counts added; sizes from before the first to after the last)."""
    return replace(then, tokens_before=first.tokens_before, seconds=first.seconds + then.seconds,
                   observations_masked=first.observations_masked + then.observations_masked,
                   actions_shortened=first.actions_shortened + then.actions_shortened,
                   messages_shortened=first.messages_shortened + then.messages_shortened,
                   turns_folded=first.turns_folded + then.turns_folded, usage=first.usage + then.usage,
                   summary=first.summary or then.summary)


def compacted_call(compactor: Compactor, messages: Sequence[Message], turn_starts: Sequence[int],
                   call: Callable[[list[Message]], Generator[Event, None, Any]], *, run_id: str,
                   step: int) -> Generator[Event, None, Any]:
    """One model call with compaction: fold when over the budget, retry after a context-length error.

    ``call(messages)`` is the model turn (a generator of events returning the response); its
    events and the :class:`~codeact.events.Compacted` events are yielded; returns what it returns.
    """
    view, event = compactor.prepare(messages, turn_starts, run_id=run_id, step=step)
    if event is not None:
        yield replace(event, folded=folded_state(compactor))
    for attempt in range(MAX_RETRIES + 1):
        try:
            response = yield from call(view)
        except ContextTooLarge:
            raise
        except ContextOverflowError as exc:
            if attempt == MAX_RETRIES:
                raise ContextTooLarge(compactor.too_large(messages, turn_starts, exc),
                                      limit=exc.limit, requested=exc.requested) from exc
            view, event = compactor.overflow(exc, messages, turn_starts, run_id=run_id, step=step)
            yield replace(event, folded=folded_state(compactor))
            continue
        compactor.calibrate(view, getattr(response, "prompt_tokens", None))
        return response
    raise AssertionError("unreachable")  # pragma: no cover


def compaction_events(events: Generator[Event, None, Any], step: Any, trace: Any = None,
                      price: Callable[[Usage], Usage] | None = None) -> Generator[Event, None, Any]:
    """Relay :func:`compacted_call`'s events; a summary's usage joins ``step.usage``, each compaction a span.
    ``price`` fills in a summary call's cost when the model's prices are known."""
    extra = Usage()
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            if extra.requests or extra.total_tokens:
                step.usage = step.usage + extra
            return stop.value
        if isinstance(event, Compacted):
            if price is not None and event.usage.requests:
                event = replace(event, usage=price(event.usage))
            extra = extra + event.usage
            if trace is not None:
                trace.compacted(event)
        yield event


def compacted_text(event: Compacted) -> str:
    """The line a :class:`~codeact.events.Compacted` event shows as (terminal, ``logs show``, web UI)."""
    parts = []
    if event.turns_folded:
        parts.append(f"{event.turns_folded} turn{'s' if event.turns_folded != 1 else ''} folded")
    if event.messages_shortened:
        parts.append(f"{event.messages_shortened} earlier message{'s' if event.messages_shortened != 1 else ''} "
                     "shortened")
    if event.actions_shortened:
        parts.append(f"{event.actions_shortened} code action{'s' if event.actions_shortened != 1 else ''} shortened")
    if event.observations_masked:
        parts.append(f"{event.observations_masked} observation{'s' if event.observations_masked != 1 else ''} "
                     "masked")
    why = " after the model refused a long prompt" if event.reason == "overflow" else ""
    return (f"earlier turns condensed{why}: {', '.join(parts) or 'nothing more to fold'} "
            f"({event.tokens_before:,} → {event.tokens_after:,} tokens)")


def compacted_from(payload: Any, *, run_id: str = "", step: int = 0) -> Compacted | None:
    """A :class:`~codeact.events.Compacted` event back from its run-log payload (None when it is not one)."""
    if not isinstance(payload, dict):
        return None
    fields = {"reason": str, "observations_masked": int, "actions_shortened": int, "messages_shortened": int,
              "turns_folded": int,
              "turns_folded_total": int, "tokens_before": int, "tokens_after": int, "budget": int}
    values: dict[str, Any] = {}
    for name, kind in fields.items():
        value = payload.get(name)
        if isinstance(value, kind) and not isinstance(value, bool):
            values[name] = value
    seconds = payload.get("seconds")
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        values["seconds"] = float(seconds)
    return Compacted(run_id=run_id, step=step, **values)


def check_options(condenser: str, share: float = DEFAULT_SHARE, history_budget: int | None = None) -> None:
    """ConfigError for a condenser, share or budget compaction cannot use."""
    if condenser not in CONDENSERS:
        raise ConfigError(f"condenser={condenser!r} is not one of {', '.join(map(repr, CONDENSERS))}")
    if not (isinstance(share, (int, float)) and 0 < share <= 1):
        raise ConfigError(f"the context share must be in (0, 1], got {share!r}")
    if history_budget is not None and (not isinstance(history_budget, int) or history_budget < 1):
        raise ConfigError(f"history_budget must be a positive number of tokens or None, got {history_budget!r}")


def where_it_went(replies: Sequence[Message], variables: dict[str, Any]) -> str:
    """Where a folded user message's content lives on: the names the turn's code assigned that the kernel
    still holds as collections, strings or frames (``variables``, by name, from the kernel's listing: those
    with a size), else the run log."""
    from .parsing import parse_reply

    names: list[str] = []
    for m in replies:
        if m.role == "assistant":
            parsed = parse_reply(m.content)
            if parsed.has_code and parsed.code is not None:
                names += [n for n in assigned_names(parsed.code)
                          if n in variables and bool(getattr(variables[n], "size", "")) and n not in names]
    if not names:
        return "the whole message is in the run log (codeact logs show)"
    shown = ", ".join(f"`{name}` ({described(variables[name])})" for name in names[:6])
    more = f" and {len(names) - 6} more" if len(names) > 6 else ""
    return f"that turn's code stored it in {shown}{more}, which the kernel still holds: print what you need"


def stand_in(message: Message) -> Message:
    """The one-line stand-in of an old action: the code's size and the names it assigned; prose cut."""
    if message.role != "assistant":
        return message
    from .parsing import parse_reply

    parsed = parse_reply(message.content)
    if parsed.has_code and parsed.code is not None:
        lines = parsed.code.count("\n") + 1
        names = assigned_names(parsed.code)
        said = f"; it assigned {', '.join(names[:12])}" + (", ..." if len(names) > 12 else "") if names else ""
        text = f"[an earlier step ran {lines} line(s) of code{said}; shortened to fit the context]"
        if len(text) >= len(message.content):
            return message
    elif len(message.content) > PROSE_CHARS:
        text = shorten(message.content, PROSE_CHARS)
    else:
        return message
    return replace(message, content=text)


def assigned_names(code: str) -> list[str]:
    """Top-level names ``code`` assigns, defines or imports, in order (none when it does not parse)."""
    from sandbox.pyparse import parse

    try:
        tree = parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    names: list[str] = []

    def add(target: ast.AST) -> None:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                add(element)
        elif isinstance(target, ast.Starred):
            add(target.value)

    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                add(target)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            add(node.target)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.extend((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return list(dict.fromkeys(names))


def answer_of(turn: Sequence[Message]) -> str:
    """The answer a folded turn gave: its last reply without code, else its ``final_answer(...)`` line."""
    from .parsing import parse_reply

    for m in reversed(turn):
        if m.role != "assistant":
            continue
        parsed = parse_reply(m.content)
        if not parsed.has_code or parsed.code is None:
            return m.content.strip()
        calls = [ln.strip() for ln in parsed.code.splitlines() if "final_answer(" in ln]
        return calls[-1] if calls else ""
    return ""


def cut_lines(lines: list[str], limit: int, what: str) -> list[str]:
    """``lines`` up to ``limit`` characters (the first line always), the rest counted."""
    out, used = [], 0
    for i, line in enumerate(lines):
        if i and used + len(line) + 1 > limit:
            out.append(f"- ... {len(lines) - i} more {what}")
            break
        out.append(line)
        used += len(line) + 1
    return out


def one_line(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters."""
    return shorten(" ".join(text.split()), limit)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis when cut."""
    return text if len(text) <= limit else text[:max(0, limit - 1)] + "…"


__all__ = ["Compactor", "ContextTooLarge", "folded_state", "restore_folded",
           "compacted_call", "compaction_events", "compacted_text", "compacted_from",
           "check_options", "DEFAULT_SHARE", "CONDENSERS", "Condenser"]
