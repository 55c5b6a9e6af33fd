"""The chat session behind a web-UI tab, through its life: opened, saved, freed when idle, restored, resumed.

A tab's chat session (and so its sandbox) is opened with the first thing that
runs. When the idle timeout frees the sandbox, the session is saved first
(sandbox snapshot + its place in the run log) and the next message restores
it; History's Resume opens a new tab from a saved session. A session that
cannot be saved (no run log, the restricted backend) starts afresh instead,
and the page is told so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import CodeActError
from ._chat import workspace_chat
from ._options import AgentFactory, UIOptions


class ChatKeeper:
    """Opens, saves, frees and restores one tab's chat session (see the module docstring).

    Not thread-safe on its own: the UI session calls it holding its lock (except :meth:`close_freed`).

    Args:
        factory: builds the tab's agent, given ``approve``.
        approve: the tab's approver, passed on to the agent.
        options: the UI's options (saving, snapshots, the idle timeout).
        publish: sends an event to the tab's page.
    """

    def __init__(self, factory: AgentFactory, approve: Callable[[Any], bool], options: UIOptions,
                 publish: Callable[[dict[str, Any]], Any]) -> None:
        self._factory = factory
        self._approve = approve
        self._options = options
        self._publish = publish
        #: The open chat session, or None (not opened yet, freed, or closed).
        self.chat: Any = None
        #: The idle timeout closed the sandbox without a save: the next one starts afresh (the page is told).
        self._sandbox_freed = False
        #: The snapshot the idle timeout saved the sandbox to; the next message restores it.
        self._saved: str | None = None

    @property
    def sandbox_open(self) -> bool:
        """The tab has a live sandbox now."""
        return self.chat is not None and not self._sandbox_freed

    def open(self) -> Any:
        """The chat session, opened on first use (and again after the idle timeout freed it: restored)."""
        if self.chat is None:
            saved, self._saved = self._saved, None
            if saved is not None:
                try:
                    self.chat = workspace_chat(self._factory(self._approve), save=self._save_options(), resume=saved)
                except CodeActError as exc:
                    self._publish({"type": "Notice", "message": f"The saved session could not be restored "
                                                                f"({exc}); a new sandbox was started."})
                else:
                    self._sandbox_freed = False
                    self._publish({"type": "Notice", "message": "The sandbox was restored from the snapshot "
                                                                "taken at the idle timeout: "
                                                                + self.chat.restored.describe()})
            if self.chat is None:
                self.chat = workspace_chat(self._factory(self._approve), save=self._save_options())
            if self._sandbox_freed:
                self._sandbox_freed = False
                self._publish({"type": "Notice", "message": "A new sandbox was started: variables, files and "
                                                            "history from before the idle timeout are gone."})
        return self.chat

    def resume(self, key: str) -> Any:
        """Open the chat session from the saved session ``key`` names; returns it.

        Raises:
            SavedSessionError: nothing saved for ``key``, or it cannot be restored (the message says why).
        """
        self.chat = workspace_chat(self._factory(self._approve), save=self._save_options(), resume=key)
        return self.chat

    def save(self, chat: Any) -> str | None:
        """Save ``chat`` if it can be (a CodeAct session with a kernel and the run log); its snapshot id or None."""
        saver = getattr(chat, "saver", None)
        sandbox = getattr(chat, "sandbox", None)
        if saver is None or saver.options is None or saver.log is None or sandbox is None \
                or getattr(sandbox, "backend", None) not in ("docker", "local"):
            return None
        try:
            return str(chat.save().id)
        except CodeActError as exc:
            self._publish({"type": "Notice", "message": f"The session could not be saved: {exc}"})
            return None

    def free(self) -> tuple[Any, str | None]:
        """Save the open chat session and let it go (the next :meth:`open` restores it): (it, its snapshot id).

        The caller closes it with :meth:`close_freed`, outside its lock.
        """
        chat = self.chat
        saved = self.save(chat)
        self.chat, self._saved = None, saved
        self._sandbox_freed = saved is None
        return chat, saved

    def close_freed(self, chat: Any, saved: str | None) -> None:
        """Close the chat session :meth:`free` let go, and tell the page what the next message will find."""
        try:
            chat.close()
        finally:
            minutes = self._options.idle_timeout / 60
            if saved is not None:
                message = (f"Idle for {minutes:g} minutes: this session's sandbox was saved and closed to free "
                           "resources. The next message restores it (variables, files and the conversation).")
            else:
                message = (f"Idle for {minutes:g} minutes: this session's sandbox was closed to free "
                           "resources. The next message starts a new one (variables, files and the "
                           "conversation so far are gone; History keeps the runs).")
            self._publish({"type": "SandboxFreed", "message": message})

    def _save_options(self) -> Any:
        if not self._options.save_sessions:
            return None
        from ..sessions import SaveOptions

        return SaveOptions(store=self._options.snapshot_dir, keep=self._options.keep_snapshots,
                           autosave=self._options.autosave, on_close=False)
