"""The conversation's message shapes: the only module that writes them and the only one that reads them.

A conversation is a list of :class:`~codeact.messages.Message`. What the agent
says to the model on the user's side has a few shapes: a turn's **task** (with
the notes the agent adds: new files, the answer's type, what a restore
brought back, what the analyst did by hand), an **observation** of a code
action, **feedback** on a reply the agent could not use, and the
**stand-ins** compaction puts in place of old content. CodeAct and ReAct
write them here, a resumed session rebuilds them here from the run log
(:mod:`codeact.sessions`), and compaction recognises and shortens them here
(:mod:`codeact.compaction`), so the three always agree.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from .messages import ImagePart, Message
from .observation import truncate_middle

#: What starts every observation message.
OBSERVATION_PREFIX = "Observation:"
#: Characters of an earlier turn's message kept when compaction folds it (and of a user message, an answer,
#: a repr as the "session so far" block shows them).
TASK_CHARS = 300
#: The header of the files a later turn brings (CodeAct: put in the sandbox; ReAct: left on the host).
SANDBOX_FILES_HEADER = "New files in the working directory:"
HOST_FILES_HEADER = "New files given with this task:"


# --- a turn's task --------------------------------------------------------------------------------------------


def task_text(task: str, *, first: bool, files: Sequence[str] = (), files_header: str = SANDBOX_FILES_HEADER,
              answer_note: str = "", note: str = "") -> str:
    """The user message that starts a turn.

    ``files`` are rendered lines (one per file; the first turn's files are in the
    system prompt instead), ``answer_note`` says the type the answer must have,
    ``note`` goes first (what a restore brought back, what the analyst did).
    """
    extra = ""
    if files and not first:
        extra = f"\n\n{files_header}\n" + "\n".join(files)
    return note + task + extra + answer_note


def task_message(text: str) -> Message:
    return Message("user", text)


# --- observations and feedback --------------------------------------------------------------------------------


def observation_message(text: str, images: Sequence[ImagePart] = ()) -> Message:
    """What a code action showed, as the model reads it (``images``: the step's images sent with it)."""
    return Message("user", f"{OBSERVATION_PREFIX}\n{text}", images=tuple(images))


def is_observation(message: Message) -> bool:
    """Whether ``message`` is an observation: a user-side ``Observation:`` message, or a tool result."""
    return message.role == "tool" or (message.role == "user" and isinstance(message.content, str)
                                      and message.content.startswith(OBSERVATION_PREFIX))


def elided_observation(message: Message) -> Message | None:
    """The one-line stand-in of an observation (None for a message that is not one)."""
    if not is_observation(message):
        return None
    stand_in = f"[elided to fit the context: {len(message.content)} characters]"
    if message.role == "tool":
        return Message("tool", stand_in, tool_call_id=message.tool_call_id)
    return Message("user", f"{OBSERVATION_PREFIX} {stand_in}")


def feedback_message(text: str) -> Message:
    """The agent's word on a reply it could not use (no code, an answer of the wrong type)."""
    return Message("user", text)


def reply_message(text: str) -> Message:
    """The model's reply as the conversation keeps it."""
    return Message("assistant", text)


# --- what the analyst did by hand (the web workspace) -------------------------------------------------------


def cell_note(code: str, observation: str, half: int) -> str:
    """One cell the analyst ran, for the model: its code and what it showed, each within ``half`` characters."""
    return (f"The user ran this code in the session's kernel themselves:\n```python\n"
            f"{truncate_middle(code, half)}\n```\nWhat it showed (as an observation would):\n"
            f"{truncate_middle(observation, half)}")


def cell_note_half(observation_limit: int) -> int:
    """How much of a cell's code and of its observation a note keeps, for an agent's ``observation_limit``."""
    return max(200, observation_limit // 2)


def user_work_note(notes: Sequence[str], observation_limit: int) -> str:
    """The block that tells the model, at the top of its next message, what the analyst did since its last turn."""
    if not notes:
        return ""
    text = "\n\n".join(f"{n}. {note}" if len(notes) > 1 else note for n, note in enumerate(notes, 1))
    text = truncate_middle(text, 4 * observation_limit)
    return ("[Note: between your last turn and this message, the user worked in the session directly.]\n"
            f"{text}\n[End of note.]\n\n")


# --- stand-ins of folded content ------------------------------------------------------------------------------


def task_stand_in(message: Message, turn: int, where: str) -> Message:
    """An earlier turn's user message cut to its head, and a line saying ``where`` the rest went."""
    head = message.content[:TASK_CHARS].rstrip()
    rest = len(message.content) - len(head)
    text = (f"{head}\n[... {rest:,} more characters of turn {turn}'s message folded to fit the context window; "
            f"{where}]")
    return replace(message, content=text)


__all__ = [
    "OBSERVATION_PREFIX", "TASK_CHARS", "SANDBOX_FILES_HEADER", "HOST_FILES_HEADER", "task_text", "task_message",
    "observation_message", "is_observation", "elided_observation", "feedback_message", "reply_message",
    "cell_note", "cell_note_half", "user_work_note", "task_stand_in",
]
