"""The sandbox of one CodeAct chat session: opening it (in the background while the model thinks), restoring
it from a save, bringing it back when it was lost, the packages it installs and the requests its network
makes, closing it."""

from __future__ import annotations

import collections
import contextlib
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, get_args

from sandbox.errors import SandboxError
from sandbox.functions import HostFunction

from . import telemetry
from .action_state import ActionState
from .errors import SavedSessionError
from .events import Event, NetworkRequest, PackageInstall
from .run import ApprovalRequest, Approvals

if TYPE_CHECKING:  # pragma: no cover
    from sandbox import BackendName


class SandboxSettings(Protocol):
    """What a chat's sandbox is opened from (a :class:`~codeact.agent.CodeActAgent` has it all)."""

    sandbox: Any  # "docker", "local", "restricted", a started sandbox the user owns, or a session source
    sandbox_options: dict[str, Any]
    execution_timeout: float
    packages: list[str]
    package_policy: Any
    approve_installs: bool


class ChatSandbox:
    """Opens, waits for, restores and closes the sandbox of one chat session.

    ``current`` returns the run in progress (None between turns): installs and
    network requests that happen while code runs become events of its action.
    """

    def __init__(self, agent: SandboxSettings, approvals: Approvals,
                 current: Callable[[], ActionState | None]) -> None:
        self.agent = agent
        self._approvals = approvals
        self._current = current
        #: The open sandbox (None before the first turn, after close, after a failed start).
        self.sandbox: Any = None
        #: Whether this session opened it (and closes it), or the user passed in one they own.
        self.owned = False
        #: A start running on a thread while the turn's first model call runs (see :meth:`ensure`).
        self._opening: _Opening | None = None
        self._opening_lock = threading.Lock()
        self._installs_seen: set[int] = set()  # package install records already reported as events
        #: Network records that ended while no code ran (a tunnel a session kept open): reported with the next
        #: action. Bounded: a flood of them keeps the newest.
        self._network_pending: collections.deque[Any] = collections.deque(maxlen=1000)
        #: What the last restore brought back (a :class:`sandbox.snapshot.RestoreReport`), else None.
        self.restored: Any = None

    # --- opening ------------------------------------------------------------------------------

    @property
    def starting(self) -> bool:
        """A start is running on a thread (the sandbox is not usable yet)."""
        return self._opening is not None

    def backend_name(self) -> str:
        """The backend's name: once open, what it really is ("auto" resolved)."""
        sb = self.sandbox if self.sandbox is not None else self.agent.sandbox
        return sb if isinstance(sb, str) else getattr(sb, "backend", type(sb).__name__)

    def ensure(self, functions: Callable[[], list[HostFunction]], *, background: bool = False, trace: Any = None,
               restore: Any = None) -> bool:
        """Open the sandbox if it is not open, with the host functions ``functions()`` makes; True if it opened one.

        ``background``: only make it here and start it on a thread (a new docker or local kernel with nothing to
        install or restore: its start is most of a cold first step); :meth:`wait` waits for it. ``restore``: a
        snapshot to open it from.
        """
        opened = False
        if self.sandbox is None:
            opened = True
            background = background and self._starts_in_background(restore)
            span = trace.sandbox("start", {"codeact.sandbox.backend": self.backend_name()}) if trace is not None \
                else contextlib.nullcontext()
            if background:
                self.sandbox, self.owned = self._open(functions(), start=False)
                self._opening = _Opening(self.sandbox, span)
            else:
                with span:
                    self.sandbox, self.owned = self._open(functions(), restore=restore)
            packages = getattr(self.sandbox, "packages", None)
            if packages is not None and hasattr(packages, "listeners"):
                packages.listeners.append(self._on_install)
            network = getattr(self.sandbox, "network_listeners", None)
            if isinstance(network, list):
                network.append(self._on_network)
        if not background:
            self.wait()
            if self.sandbox is None:  # it failed to start on its thread, and another caller was told: try here
                return self.ensure(functions, restore=restore)
        return opened

    def wait(self) -> None:
        """Wait until a sandbox started on a thread is up; raise what its start raised (the session then has no
        sandbox, and the next turn opens one again). Safe from any thread."""
        opening = self._opening
        if opening is None:
            return
        opening.done.wait()
        with self._opening_lock:
            if self._opening is not opening:
                return  # another thread took the outcome
            self._opening = None
            if opening.error is None:
                return
            if self.sandbox is opening.sandbox:
                self.sandbox = None
        with contextlib.suppress(Exception):
            opening.sandbox.close()
        raise opening.error

    def ready(self, functions: Callable[[], list[HostFunction]], state: ActionState,
              uploads: list[Path]) -> Iterator[Event]:
        """Wait for the sandbox (or open it here); the installs it made as it opened, as events; ``uploads`` put
        in (and emptied)."""
        self.ensure(functions)
        yield from self.package_events(state)  # packages= installed as the sandbox opened
        while uploads:
            self.sandbox.upload(uploads.pop(0))

    def _starts_in_background(self, restore: Any) -> bool:
        spec = self.agent.sandbox
        return (isinstance(spec, str) and backend_name(spec) in ("docker", "local") and not self.agent.packages
                and restore is None)

    def _open(self, functions: list[HostFunction], restore: Any = None, start: bool = True) -> tuple[Any, bool]:
        """(sandbox, owned): a new session we must close, or the user's own; ``restore``: from this snapshot.
        ``start=False``: a new kernel sandbox is made but not started (the caller starts it)."""
        from sandbox import SessionSource, open_sandbox

        agent = self.agent
        spec = agent.sandbox
        if not isinstance(spec, (str, SessionSource)):  # a started sandbox the user owns
            if restore is not None:
                raise SavedSessionError("a session can be resumed only into a sandbox the agent opens itself "
                                        "(sandbox='docker', 'local' or an engine pool), not into one you pass in")
            spec.register(*functions)
            return spec, False
        options = {"timeout": agent.execution_timeout, **agent.sandbox_options}
        policy = self._package_policy()
        if spec != "restricted" and (agent.packages or policy is not None):
            options.setdefault("packages", agent.packages)
            options.setdefault("package_policy", policy)
        if restore is not None:
            return restore_sandbox(spec, restore, functions, options), True
        if isinstance(spec, SessionSource):  # an engine pool: the session lands on the engine with the most room
            sb = spec.sandbox(functions, **options)
        else:
            # A tuple: open_sandbox's list[Callable | HostFunction] does not take our list[HostFunction].
            sb = open_sandbox(backend_name(spec), functions=tuple(functions), **options)
        if not start:
            return sb, True
        if hasattr(sb, "start"):
            sb.start()
        elif hasattr(sb, "__enter__"):
            sb.__enter__()
        return sb, True

    # --- lost and restored --------------------------------------------------------------------

    def lost_reason(self) -> str | None:
        """Why the sandbox this session opened, or its kernel, was lost since the last action (its engine
        restarted, its container was removed, its kernel was killed while idle), or None while it is there
        (or being started)."""
        sb = self.sandbox
        if sb is None or self._opening is not None or not self.owned:
            return None
        why = getattr(sb, "environment_lost", None) or getattr(sb, "kernel_lost", None)
        return str(why) if why else None

    def drop(self) -> None:
        """Forget a sandbox that went away (closing it only forgets it)."""
        sb, self.sandbox = self.sandbox, None
        self._forget_listeners(sb)
        with contextlib.suppress(Exception):  # gone already
            sb.close()

    def reopen_from(self, functions: Callable[[], list[HostFunction]], snapshot: Any) -> Any:
        """Open a new sandbox holding ``snapshot``; returns what the restore brought back (a
        :class:`sandbox.snapshot.RestoreReport`, or None). Raises what the restore raises."""
        self.ensure(functions, restore=snapshot)
        self.restored = getattr(self.sandbox, "restored", None)
        return self.restored

    # --- packages and the network -------------------------------------------------------------

    def _package_policy(self) -> Any:
        """The agent's package policy, with installs the code asks for routed through ``approve``."""
        policy = self.agent.package_policy
        if self.agent.approve_installs and getattr(policy, "approve", None) is None:
            from sandbox.packages import PackagePolicy

            policy = replace(policy or PackagePolicy(), approve=self._approve_install)
        return policy

    def _approve_install(self, request: Any) -> bool:
        """Ask about an install the code asked for: the top run's approver when this run is an agent called
        as a tool (the request names the agent)."""
        state = self._current()
        return self._approvals.ask(ApprovalRequest(
            "install", {"packages": request.summary(), "requirements": list(request.requirements)},
            state.run_id if state else "", state.step if state else 0), state.link if state else None)

    def _on_install(self, record: Any) -> None:
        """A package install the code asked for (a worker thread): an event among the step's tool calls."""
        state = self._current()
        if state is not None and record.source == "runtime":
            self._installs_seen.add(id(record))
            state.report(install_event(record, state.run_id, state.step))
            trace_install(state.trace, record, state.action_ctx)

    def _on_network(self, record: Any) -> None:
        """A request through the sandbox's network proxy ended (the proxy's thread): an event of the running
        action, or of the next one."""
        state = self._current()
        if state is not None and state.tool_events is not None:
            state.report(network_event(record, state.run_id, state.step))
        else:
            self._network_pending.append(record)

    def pending_network_events(self, state: ActionState) -> list[NetworkRequest]:
        """Requests that ended while no code ran, as events of ``state``'s action (and forgotten)."""
        records = []
        while self._network_pending:
            records.append(self._network_pending.popleft())
        return [network_event(r, state.run_id, state.step) for r in records]

    def package_events(self, state: ActionState) -> list[PackageInstall]:
        """Installs not yet reported (those of ``packages=``, made while the sandbox opened)."""
        records = getattr(getattr(self.sandbox, "packages", None), "records", None) or []
        fresh = [r for r in list(records) if id(r) not in self._installs_seen]
        self._installs_seen.update(id(r) for r in fresh)
        for r in fresh:
            trace_install(state.trace, r, None)
        return [install_event(r, state.run_id, 0) for r in fresh]

    def packages_text(self) -> str:
        """What the installed packages are, for the system prompt ("" when none or unknown)."""
        packages = getattr(self.sandbox, "packages", None)
        try:
            return packages.describe() if packages is not None and hasattr(packages, "describe") else ""
        except Exception:  # the prompt goes without the list; installs still report errors
            return ""

    # --- the end ------------------------------------------------------------------------------

    def interrupt(self) -> None:
        interrupt = getattr(self.sandbox, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def close(self) -> None:
        """Close the sandbox if this session opened it (a sandbox the caller owns outlives the session)."""
        sb, self.sandbox = self.sandbox, None
        self._forget_listeners(sb)
        if sb is not None and self.owned:
            sb.close()

    def _forget_listeners(self, sb: Any) -> None:
        listeners = getattr(getattr(sb, "packages", None), "listeners", None)
        if listeners is not None and self._on_install in listeners:
            listeners.remove(self._on_install)
        network = getattr(sb, "network_listeners", None)
        if isinstance(network, list) and self._on_network in network:
            network.remove(self._on_network)


class _Opening:
    """A new sandbox starting on a thread of its own (its ``start()``), and how that went."""

    def __init__(self, sandbox: Any, span: Any) -> None:
        self.sandbox = sandbox
        self.error: BaseException | None = None
        self.done = threading.Event()
        threading.Thread(target=self._start, args=(span,), name="sandbox-start", daemon=True).start()

    def _start(self, span: Any) -> None:
        try:
            with span:
                self.sandbox.start()
        except BaseException as exc:  # handed to whoever waits (ChatSandbox.wait)
            self.error = exc
        finally:
            self.done.set()


def restore_sandbox(spec: Any, snap: Any, functions: list[HostFunction], options: dict[str, Any]) -> Any:
    """A started sandbox holding snapshot ``snap``: on the engine pool ``spec``, or a new docker/local session."""
    from sandbox import SessionSource
    from sandbox.snapshot import SnapshotError, restore

    if isinstance(spec, SessionSource):
        factory: Any = spec.sandbox  # the pool places it on the engine with the most room
    elif spec in ("docker", "auto"):
        from sandbox import DockerSandbox

        factory = DockerSandbox
    elif spec == "local":
        from sandbox import LocalSandbox, warn_unsafe

        factory = LocalSandbox

        warn_unsafe("local")
    else:
        raise SavedSessionError(f"the {spec!r} backend has no kernel to restore a session into; resume it with "
                                "the docker (or local) backend")
    with telemetry.span("sandbox.restore", {"codeact.snapshot.id": str(getattr(snap, "id", snap))[:64]}) as span:
        try:
            sandbox = restore(factory, snap, functions, **options)
        except SnapshotError as exc:
            telemetry.span_failed(span, exc)
            raise SavedSessionError(f"the session could not be restored: {exc}") from None
        report = getattr(sandbox, "restored", None)
        if span is not None and report is not None:
            span.set_attribute("codeact.snapshot.restored_variables", len(report.restored))
            span.set_attribute("codeact.snapshot.failed_variables", len(report.failed))
        return sandbox


def network_event(record: Any, run_id: str, step: int) -> NetworkRequest:
    data = record.to_json()
    return NetworkRequest(run_id=run_id, step=step, host=data["host"], method=data["method"],
                          allowed=data["allowed"], status=data["status"], record=data)


def install_event(record: Any, run_id: str, step: int) -> PackageInstall:
    data = record.to_json()
    return PackageInstall(run_id=run_id, step=step, requirements=data["requirements"], source=data["source"],
                          packages=data["packages"], present=data["present"], seconds=data["seconds"],
                          resolved_from_cache=data["resolved_from_cache"], downloaded=data["downloaded"],
                          error_kind=data["error_kind"], error=data["error"])


def trace_install(trace: Any, record: Any, parent: Any) -> None:
    """A ``sandbox.install`` span for a package install (the record says how long it took)."""
    if trace is None:
        return
    data = record.to_json()
    trace.sandbox_done("install", float(data["seconds"] or 0.0), {
        "codeact.packages.requirements": [str(r)[:200] for r in data["requirements"]][:50],
        "codeact.packages.source": str(data["source"]),
        "codeact.packages.downloaded": int(data["downloaded"] or 0),
    }, parent=parent, error=data["error_kind"] or None)


def backend_name(name: str) -> BackendName:
    """``name`` as one of the sandbox's backend names.

    Raises:
        SandboxError: not a backend name (the message open_sandbox gives).
    """
    from sandbox import BackendName

    for known in get_args(BackendName):
        if name == known:
            return known
    raise SandboxError(f"unknown sandbox backend {name!r}; choose docker, local or restricted")
