"""A results directory: the run's settings, one JSON line per finished episode, the run log.

::

    results/
      run.json          settings of the run (model, temperature, seed, backend, suites, agents,
                        repeats, prompt versions); a resumed run must match its model settings
      episodes.jsonl    one line per finished episode, appended as each finishes (one write
                        per line, flushed and fsynced), so a crash loses only running episodes
      runs.db           the run log: every episode's run, step by step (codeact logs show --db ...)
      artifacts/        files CodeAct runs produced, per run id
      work/             each episode's working directory on the host (where host tools write)
      report.json  report.md  summary.csv  episodes.csv  plots/*.png   (codeact bench report)

A line that cannot be read (the process died in the middle of writing it)
is skipped; when an episode key appears twice (a re-run of errors), the last
line wins.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..errors import BenchError

RUN_FILE = "run.json"
EPISODES_FILE = "episodes.jsonl"
RUNLOG_FILE = "runs.db"
FORMAT = "codeact.bench/1"

#: Settings that must match for a results directory to be resumed or extended.
IDENTITY = ("models", "base_url", "temperature", "seed", "backend", "runtime")


@dataclass
class Episode:
    """One agent on one task, once: what happened and what it cost.

    ``outcome`` says how it ended, one of :data:`~codeact.bench._outcomes.OUTCOMES`
    (``solved``, ``wrong_answer``, ``turn_limit``, ``context_overflow`` count
    as ran; ``model_error``, ``sandbox_error``, ``timeout``, ``harness_error``
    do not), with ``error_kind`` naming the kind of an error (``unreachable``,
    ``auth``, ``rate_limit``, ...). ``status`` is the agent run's own status.
    ``turns`` is the number of model turns the run took; metrics count a
    failed episode that ran at its ``turn_limit``. Times are seconds: ``wall_time``
    the whole episode in the harness, ``run_time`` the agent's run,
    ``model_time`` waiting for the model, ``sandbox_time`` running code
    (CodeAct; it includes the tool calls the code made), ``tool_time`` tool
    calls, ``setup_time`` waiting for a sandbox, ``harness_time`` the rest
    of the harness's own work (tools, checks, records). A multi-turn task
    (several user messages to one session) adds ``user_turns``,
    ``user_turns_passed`` and ``turn_model_calls``; its costs cover every turn.
    """

    key: str
    suite: str
    task: str
    agent: str
    repeat: int
    success: bool = False
    outcome: str = ""  # see codeact.bench._outcomes; when not given, derived from success and status
    error_kind: str = ""
    status: str = "error"  # the run's status, or "error"/"timeout" when it did not finish
    check: str = ""
    answer: Any = None  # codec preview
    expected: Any = None  # codec preview
    error: str | None = None
    run_id: str | None = None
    turns: int = 0
    turn_limit: int = 0
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    invalid_actions: int = 0
    wall_time: float = 0.0
    run_time: float = 0.0
    model_time: float = 0.0
    sandbox_time: float = 0.0
    tool_time: float = 0.0
    setup_time: float = 0.0
    harness_time: float = 0.0
    cost: float | None = None
    model: str = ""
    temperature: float | None = None
    seed: int | None = None
    prompt: str = ""
    prompt_version: str = ""
    tags: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    #: Multi-turn tasks: user turns sent, user turns whose check passed, and each sent turn's model calls.
    user_turns: int = 0
    user_turns_passed: int = 0
    turn_model_calls: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.outcome:
            from ._outcomes import from_legacy

            self.outcome = from_legacy({"success": self.success, "status": self.status})

    @property
    def turns_counted(self) -> int:
        """Turns for the metrics: the turns taken when it succeeded, else the task's turn limit."""
        return self.turns if self.success else max(self.turn_limit, self.turns)

    @property
    def task_key(self) -> str:
        return f"{self.suite}/{self.task}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def ran(self) -> bool:
        """True when the model had its chance (the episode counts in success rates)."""
        from ._outcomes import ran

        return ran(self.outcome)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Episode:
        known = {f.name for f in fields(cls)}
        # A line written before outcomes were recorded gets one from its success and status (__post_init__).
        return cls(**{k: v for k, v in data.items() if k in known})


def episode_key(suite: str, task: str, agent: str, repeat: int, model: str | None = None) -> str:
    """``suite/task/agent/repeat``; a run of several models adds ``@model``."""
    key = f"{suite}/{task}/{agent}/{repeat}"
    return f"{key}@{model}" if model else key


class ResultsDir:
    """A results directory, created if needed. Appends are thread-safe.

    Raises:
        BenchError: the path exists and is not a directory, or holds files of another tool.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path).expanduser()
        if self.path.exists() and not self.path.is_dir():
            raise BenchError(f"{self.path} is a file; give a directory for the results")
        self._lock = threading.Lock()

    @property
    def episodes_file(self) -> Path:
        return self.path / EPISODES_FILE

    @property
    def runlog_path(self) -> Path:
        return self.path / RUNLOG_FILE

    def exists(self) -> bool:
        return (self.path / RUN_FILE).is_file()

    # -- settings -----------------------------------------------------------------------

    def read_settings(self) -> dict[str, Any]:
        """The run's settings (``run.json``).

        Raises:
            BenchError: no run.json (not a results directory) or it is unreadable.
        """
        try:
            data = json.loads((self.path / RUN_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BenchError(f"{self.path} is not a results directory (no {RUN_FILE}); "
                             "run `codeact bench run --out DIR` first") from None
        except (OSError, ValueError) as exc:
            raise BenchError(f"cannot read {self.path / RUN_FILE}: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise BenchError(f"{self.path / RUN_FILE} was not written by codeact bench ({FORMAT})")
        return data

    def open_run(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Start or resume a run with ``settings``; returns the settings recorded (merged when resuming).

        Raises:
            BenchError: the directory holds a run with different model settings.
        """
        settings = {"format": FORMAT, **settings}
        self.check_run(settings)
        self.path.mkdir(parents=True, exist_ok=True)
        if self.exists():
            old = self.read_settings()
            merged = dict(old)
            merged.setdefault("models", settings.get("models"))
            for key in ("suites", "agents"):
                merged[key] = list(dict.fromkeys([*old.get(key, []), *settings.get(key, [])]))
            merged["repeats"] = max(int(old.get("repeats", 1)), int(settings.get("repeats", 1)))
            merged["prompts"] = {**old.get("prompts", {}), **settings.get("prompts", {})}
            merged["suite_versions"] = {**old.get("suite_versions", {}), **settings.get("suite_versions", {})}
            merged["resumed"] = [*old.get("resumed", []), settings.get("started")]
            settings = merged
        self._write_settings(settings)
        return settings

    def check_run(self, settings: dict[str, Any]) -> None:
        """Raise :class:`BenchError` when this directory holds a run that ``settings`` cannot resume (writes nothing).

        The model settings must match, and a suite both name must be the same version.
        """
        if not self.exists():
            return
        old = self.read_settings()
        old.setdefault("models", [old["model"]] if old.get("model") else [])  # written before several models
        different = [k for k in IDENTITY if old.get(k) != settings.get(k)]
        if different:
            what = ", ".join(f"{k}={old.get(k)!r} (now {settings.get(k)!r})" for k in different)
            raise BenchError(f"{self.path} holds a run with other settings: {what}; resume with the same "
                             "settings or choose another --out")
        before, now = old.get("suite_versions") or {}, settings.get("suite_versions") or {}
        changed = [name for name in now if name in before and before[name] != now[name]]
        if changed:
            raise BenchError(f"{self.path} holds episodes of another version of suite(s) {', '.join(changed)} "
                             f"({', '.join(f'{before[n]} then, {now[n]} now' for n in changed)}); their results "
                             "would not be comparable: choose another --out")

    def _write_settings(self, settings: dict[str, Any]) -> None:
        tmp = self.path / (RUN_FILE + ".tmp")
        tmp.write_text(json.dumps(settings, indent=2, ensure_ascii=False), encoding="utf-8")
        os.replace(tmp, self.path / RUN_FILE)

    # -- episodes -------------------------------------------------------------------------

    def append(self, episode: Episode) -> None:
        """Append one finished episode: one write of one line, flushed and fsynced."""
        line = json.dumps(episode.to_json(), ensure_ascii=False, allow_nan=False) + "\n"
        data = line.encode("utf-8", "backslashreplace")
        with self._lock:
            fd = os.open(self.episodes_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                if os.fstat(fd).st_size and not self._ends_with_newline():
                    data = b"\n" + data  # a line cut short by a crash stays on its own line
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _ends_with_newline(self) -> bool:
        with open(self.episodes_file, "rb") as f:
            f.seek(-1, os.SEEK_END)
            return f.read(1) == b"\n"

    def episodes(self) -> list[Episode]:
        """Every finished episode (the last line per key), in the order they finished."""
        by_key: dict[str, Episode] = {}
        try:
            with open(self.episodes_file, encoding="utf-8", errors="replace") as f:
                for line in f:
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        episode = Episode.from_json(json.loads(line))
                    except (ValueError, TypeError):
                        continue  # a line cut short when the process died
                    by_key.pop(episode.key, None)
                    by_key[episode.key] = episode
        except FileNotFoundError:
            return []
        return list(by_key.values())
