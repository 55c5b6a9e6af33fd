"""A sandbox session backed by a Jupyter kernel process: the part every kernel backend shares.

:class:`KernelSandbox` is handed a :class:`KernelProcess` (a Docker container,
a local subprocess; later a remote engine) that starts the sandbox's
supervisor and, next to it, kernels, and gives back their byte streams (see
:mod:`sandbox._transport`). Over the supervisor's stream the session speaks
Jupyter to ipykernel (the supervisor relays it); over the kernel's own stream
it answers host-function calls. It keeps every limit on the host's clock:

* a run stops after ``timeout`` seconds of its own time (time inside host
  calls excluded) or ``max_run_time`` seconds in all (time a human spends
  approving calls excluded), whatever the kernel sends;
* each host call stops after its ``function_timeout`` (approval excluded);
* everything the kernel sends is bounded (:class:`~sandbox.limits.Limits`)
  and checked, and so is what it makes the host hold (replies it leaves
  unread, calls it makes between runs); a kernel that breaks the protocol
  is restarted, and the run returns an error saying so.
  :meth:`KernelSandbox.run` never raises for what the code does;
* a kernel that dies (an exit, a signal, the OOM killer, a crash in C code)
  ends its run at once: its stream closes, and in a container the supervisor
  also says so, with whether the OOM killer did it, its exit code (it started
  the kernel) and which run the kernel had noted it started (hints, used for
  the run's error message and to decide whether the code may run again; no
  answer is waited for past the run's deadline);
* code whose start the kernel announced is never run again, even when it
  killed its own kernel before anything else of its run reached the host.

Recovery ladder on timeout: interrupt (SIGINT) -> a fresh kernel in the same
environment (files stay) -> a new environment. State is kept when the
interrupt works; otherwise the result says the state was lost.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import signal
import threading
import time
import weakref
from dataclasses import dataclass
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable, Protocol

from . import _jupyter
from ._transport import Connection, Stream
from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, StreamCallback
from .errors import BackendUnavailable, FileTransferError, KernelStartError, SandboxClosed
from .functions import CallBudget, FunctionDispatcher, HostCall, HostFunction, RunClock
from .hostfiles import UnsafePath, check_relative_path
from .limits import Limits
from .result import (
    CappedText,
    ExecutionError,
    ExecutionResult,
    FileInfo,
    FunctionCall,
    KernelRestart,
    timed_restart,
    Output,
    strip_ansi,
)
from .runtime import sandbox_wire as wire

if TYPE_CHECKING:
    from typing import Self

    from ._snapshot_io import SnapshotFiles
    from .packages import SessionPackages
    from .snapshot import RestoreReport, Snapshot, SnapshotStore

#: What the runtime writes to the kernel's own stderr once it is up (see sandbox_runtime.READY_MARKER).
READY_MARKER = "sandbox-runtime: kernel ready"
#: MIME type of the runtime's "this much output was cut in the kernel" message.
OUTPUT_CUT_MIME = "application/vnd.codeact.output-cut+json"
#: How every backend starts a kernel (``python -s -c KERNEL_CODE``): with no '' or '.' on sys.path,
#: nothing the code wrote (in its working directory, in ~) is imported at start; the cyclic garbage
#: collector is off while the kernel boots (it finds no garbage in the imports, and costs them ~4%; launch()
#: turns it back on). (The supervisor starts a container's kernels with its own copy: sandbox_init.KERNEL_CODE.)
KERNEL_CODE = ("import gc; gc.disable(); import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
               "import sandbox_runtime; sandbox_runtime.launch()")
#: Frame kinds the host accepts from the supervisor, and from a kernel.
#: Seconds a run waits for a file listing asked for after its code failed: bookkeeping, kept short so a
#: kernel that never answers cannot stretch the run past its time limit by more than this.
LISTING_RETRY_TIMEOUT = 5.0
#: Seconds a run that ended with its kernel SIGKILLed waits at most to learn whether the OOM killer did it
#: (the supervisor says so moments after the kernel's stream closes; never past the run's own deadline).
DEATH_HINT_WAIT = 2.0
_SUPERVISOR_KINDS = {wire.KIND_HELLO, wire.KIND_PREPARED, wire.KIND_JUPYTER, wire.KIND_DIED}
_KERNEL_KINDS = {wire.KIND_CALL, wire.KIND_ABANDON, wire.KIND_STARTED, wire.KIND_ENDED}
#: Seconds a run whose reply came waits at most for its kernel's word that the code ended (sandbox_wire ``E``),
#: which comes on the call stream: what the code wrote there before it ended is then judged in this run, not the
#: next. The word usually arrives first; only a kernel whose hooks were undone, or a host under load, waits.
END_MARK_WAIT = 2.0
#: Seconds the host keeps reading a kernel's stream after the supervisor said the kernel ended: what it
#: wrote before it ended (a run's start, see ``run``) is still on its way through the engine.
DEATH_DRAIN = 1.0
#: Seconds the supervisor has to prepare the next kernel (it answers in milliseconds when it runs): past
#: them it is taken for stopped, and the environment is recreated. Under gVisor the code can stop its
#: supervisor (SIGSTOP reaches the namespace's init there); without this bound a run waited the whole
#: ``start_timeout`` on top of its own time limit.
PREPARE_TIMEOUT = 15.0


@dataclass(frozen=True)
class KernelExit:
    """Why a kernel process ended."""

    code: int | None
    oom: bool = False
    detail: str = ""

    def describe(self, memory_limit: str | None = None) -> ExecutionError:
        if self.oom:
            limit = f" (limit {memory_limit})" if memory_limit else ""
            return ExecutionError(
                "MemoryError",
                f"the sandbox ran out of memory{limit} and its kernel was killed; "
                "use less memory (e.g. read files in chunks) or raise the memory limit",
            )
        how = f"exit code {self.code}" if self.code is not None and self.code >= 0 else "killed"
        number = self.signal
        if number is not None:
            try:
                how = f"killed by {signal.Signals(number).name}, signal {number}"
            except ValueError:
                how = f"killed by signal {number}"
        detail = f": {self.detail}" if self.detail else ""
        return ExecutionError("KernelDied", f"the kernel process ended ({how}){detail}")

    @property
    def signal(self) -> int | None:
        """The signal that ended the process (a shell's 128+N exit code counts), if one did."""
        if self.code is not None and 128 < self.code < 128 + 65:
            return self.code - 128
        if self.code is not None and -65 < self.code < 0:
            return -self.code
        return None


class KernelProcess(Protocol):
    """Starts the sandbox's supervisor and kernels, and gives back their streams: the part each backend provides.

    The supervisor (:mod:`sandbox_init`) holds the environment (a container
    with its /workspace volume, a working directory); kernels start next to
    it, one after another, in that environment. :meth:`start` and
    :meth:`stop` create and destroy the whole environment.
    """

    #: The working directory as the code sees it.
    workdir: str

    @property
    def where(self) -> str:
        """Where the environment lives, for error messages ("container ... on the Docker engine ...")."""
        ...

    # Optional attributes (read with getattr; default False):
    # ``settings_on_stream``: the kernel reads the host functions and settings to install from its
    # stream before it answers anything (a ``P`` frame the host sends first): no request installs them.
    # ``exit_from_supervisor``: the supervisor started the kernel and says how it ended (``D``); the
    # backend's own exit code is that of the process behind the call stream, not the kernel's.

    def start(self) -> Stream:
        """Start the supervisor (a new environment) and return its stream."""
        ...

    def kernel_parent(self) -> str:
        """The directory (in the environment) below which the supervisor makes each kernel's directory."""
        ...

    # Optional: ``kernel_request() -> dict``, more for the supervisor's ``K`` (see DockerKernel).

    def start_kernel(self, connection: str) -> Stream:
        """Start (or link to) a kernel that binds the connection file ``connection``; return its call stream."""
        ...

    def stop_kernel(self) -> None:
        """Kill the current kernel if this backend can do so directly (else the supervisor does)."""
        ...

    def interrupt_kernel(self) -> bool:
        """Interrupt the kernel directly; False when only the supervisor can."""
        ...

    def kernel_exit_code(self) -> int | None:
        """How the last kernel ended (negative: killed by that signal); None if unknown."""
        ...

    def stop(self) -> None:
        """Kill the supervisor and its environment (files in a container go with it)."""
        ...

    def oom_since(self, started: float) -> bool:
        """True if the out-of-memory killer killed a process of the sandbox since ``started`` (time.time())."""
        ...

    def memory_limit(self) -> str | None: ...

    def close(self) -> None:
        """Remove everything (idempotent; also called from finalizers)."""
        ...


_CLEAN_TB_SKIP = ("-" * 20,)


def clean_traceback(lines: list[str]) -> str:
    """Plain-text traceback: colour codes, IPython's separator and hidden-frame notes removed."""
    text = strip_ansi("\n".join(line for line in lines if isinstance(line, str)))
    out = [ln for ln in text.splitlines()
           if not ln.startswith(_CLEAN_TB_SKIP) and not ln.strip().startswith("[... skipping hidden")]
    cleaned: list[str] = []
    for ln in out:  # hidden-frame notes leave double blank lines behind
        if not ln.strip() and cleaned and not cleaned[-1].strip():
            continue
        cleaned.append(ln)
    return "\n".join(cleaned).strip("\n")


def exit_detail(lines: list[str]) -> str:
    """The line worth showing from a kernel process's own output when it ended.

    Output before the runtime's ready marker is startup chatter (warnings,
    connection banners); after it, the last non-empty line may say why the
    process ended. A kernel that never got ready: its last line.
    """
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() == READY_MARKER:
            lines = lines[i + 1:]
            break
    return next((ln.strip()[:500] for ln in reversed(lines) if ln.strip()), "")


class _Execution:
    """One execute request in flight: what its messages have produced so far.

    Filled on the I/O thread; read by the thread waiting in :meth:`KernelSandbox.run`.
    """

    def __init__(self, msg_id: str, *, user: bool, limits: Limits, output_limit: int,
                 on_output: StreamCallback | None = None, on_call: Callable[[FunctionCall], None] | None = None,
                 ) -> None:
        self.msg_id = msg_id
        self.user = user
        self.limits = limits
        self.result = ExecutionResult()
        self.stdout = CappedText(output_limit)
        self.stderr = CappedText(output_limit)
        self.on_output = on_output
        self.on_call = on_call
        self.outputs_bytes = 0
        self.dropped_outputs = 0
        self.cut_outputs = 0
        self.idle = False
        self.reply: dict[str, Any] | None = None
        self.done = threading.Event()
        #: Set when the kernel said on its call stream that the code ended, or the kernel stopped being usable.
        self.ended = threading.Event()
        #: Whether the kernel began this request (any message about it, or its code's announced start):
        #: such code is never run again, even when the kernel died before anything else came of it.
        self.began = False
        self.clock = RunClock()
        self.budget = CallBudget(limits.max_calls_per_run, limits.max_kept_call_bytes)
        self.lock = threading.Lock()
        self.callback_errors: list[str] = []
        #: "code" (the code's own time ran out) or "run" (the run's total time did).
        self.timeout_kind = "code"
        #: The interrupt did not stop the code: the kernel must be restarted.
        self.forced_restart = False
        #: The result was handed back: late call records are not added to it.
        self.closed = False

    def handle(self, channel: str, msg: _jupyter.Message) -> None:
        self.began = True
        if channel == "shell":
            if msg.msg_type.endswith("_reply"):
                self.reply = msg.content
        elif channel == "iopub":
            with self.lock:
                self._iopub(msg)
        if self.idle and self.reply is not None:
            self.done.set()

    def _iopub(self, msg: _jupyter.Message) -> None:
        kind, content = msg.msg_type, msg.content
        if kind == "stream":
            name = _jupyter.text_field(content, "name")
            text = _jupyter.text_field(content, "text")
            (self.stderr if name == "stderr" else self.stdout).write(text)
            if self.on_output is not None and text:
                self._callback(self.on_output, "stderr" if name == "stderr" else "stdout", text)
        elif kind == "display_data" and isinstance(content.get("data"), dict) and OUTPUT_CUT_MIME in content["data"]:
            cut = content["data"][OUTPUT_CUT_MIME]
            if isinstance(cut, dict):
                for name, capped in (("stdout", self.stdout), ("stderr", self.stderr)):
                    if type(cut.get(name)) is int and 0 < cut[name] < 2**62:
                        capped.dropped += cut[name]
                if type(cut.get("outputs")) is int and 0 < cut["outputs"] < 2**31:
                    self.cut_outputs += cut["outputs"]
        elif kind in ("display_data", "execute_result", "update_display_data"):
            output = _decode_output(content.get("data"), kind)
            if output is None:
                return
            size = sum(len(v) for v in output.data.values())
            if len(self.result.outputs) >= self.limits.max_outputs or \
                    self.outputs_bytes + size > self.limits.max_output_bytes:
                self.dropped_outputs += 1
            else:
                self.outputs_bytes += size
                self.result.outputs.append(output)
        elif kind == "error":
            tb = content.get("traceback")
            self.result.error = ExecutionError(
                _jupyter.text_field(content, "ename", "Error")[:200] or "Error",
                _jupyter.text_field(content, "evalue")[:20_000],
                clean_traceback(tb[:500] if isinstance(tb, list) else [])[:50_000],
            )
        elif kind == "status" and content.get("execution_state") == "idle":
            self.idle = True

    def record_call(self, record: FunctionCall, call: HostCall) -> None:
        if self.closed:
            return
        with self.lock:
            if len(self.result.calls) < self.limits.max_call_records:
                self.result.calls.append(record)
            else:
                self.budget.records_dropped += 1
        if self.on_call is not None:
            self._callback(self.on_call, record)

    def _callback(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:  # the caller's bug must not look like the kernel's
            if len(self.callback_errors) < 5:
                self.callback_errors.append(f"{getattr(fn, '__name__', 'callback')} raised "
                                            f"{type(exc).__name__}: {exc}")


class KernelSandbox:
    """A session over a kernel process; see :class:`DockerSandbox` and :class:`LocalSandbox`."""

    backend = "kernel"
    workdir = "."
    #: Seconds to wait for the kernel to go idle after an interrupt.
    interrupt_grace = 3.0

    def __init__(
        self,
        process: KernelProcess,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
        max_run_time: float | None = None,
        limits: Limits | None = None,
        start_timeout: float = 60.0,
    ) -> None:
        self.process = process
        self.workdir = process.workdir
        self.timeout = timeout
        self.output_limit = output_limit
        self.function_timeout = function_timeout
        self.max_run_time = max_run_time
        self.limits = limits or Limits()
        self.start_timeout = start_timeout
        self._dispatcher = FunctionDispatcher(functions, default_timeout=function_timeout,
                                              max_concurrent=self.limits.max_concurrent_calls, limits=self.limits)
        self._requests = _jupyter.Requests()
        self._closed = False
        #: Called once when the session closes (an engine pool releases its slot here).
        self.close_callbacks: list[Callable[[], None]] = []
        self._lock = threading.RLock()  # one run at a time per session
        self._sup: Connection | None = None  # the supervisor's stream
        self._kern: Connection | None = None  # the current kernel's call stream
        self._sup_gen = 0  # which streams' events count (older ones are ignored)
        self._kern_gen = 0
        self._kernels = 0
        #: The kernel's state: "down", "starting" (until its hello), "ready", "ended"
        #: (it exited) or "broken" (it broke the protocol).
        self._state = "down"
        self._state_changed = threading.Condition()
        self._prepared: str | None = None  # the connection file the supervisor made for the next kernel
        self._kernel_started = 0.0
        self._exit: KernelExit | None = None
        #: The supervisor watches the current kernel (it said so in its hello) and will say when it ends;
        #: the kernel's pid as the hello gave it, and what the supervisor said about its end (None: nothing yet).
        self._watched = False
        self._kernel_pid: int | None = None
        self._oom_hint: bool | None = None
        #: How the kernel ended, as the supervisor said (where it started the kernel), and whether it said.
        self._died_code: int | None = None
        self._died_said = False
        #: Whether ``_exit`` says all there is to know (the OOM question asked once, never again).
        self._exit_settled = False
        #: Host-function calls made while no code runs: refused, and paid for here (see _on_call).
        self._idle_calls = CallBudget(self.limits.max_calls_per_run)
        self._violation: str | None = None
        self._exec: _Execution | None = None
        self._restarted_notice: str | None = None
        #: Restarts not yet reported: the next run's result carries them (``ExecutionResult.restarts``).
        self._restarts: list[KernelRestart] = []
        self._holder = _ConnHolder()
        self._finalizer = weakref.finalize(self, _release, process, self._holder)

    # --- the streams and the kernel's state -----------------------------------------------------

    def _set_state(self, state: str) -> None:
        with self._state_changed:
            self._state = state
            self._state_changed.notify_all()
        if state != "ready":
            execution = self._exec
            if execution is not None:
                execution.done.set()
                execution.ended.set()

    def _connect(self, stream: Stream, kinds: set[bytes], generation: int, which: str) -> Connection:
        ref = weakref.ref(self)  # the I/O thread must not keep a forgotten session alive

        def on_frame(kind: bytes, body: bytearray) -> None:
            session = ref()
            if session is not None:
                session._on_frame(which, generation, kind, body)

        def on_closed(reason: str | None) -> None:
            session = ref()
            if session is not None:
                session._on_closed(which, generation, reason)

        # Only the kernel can leave what the host sends unread: the supervisor always reads its input.
        max_queued = self.limits.max_queued if which == "kernel" else None
        return Connection(stream, max_frame=self.limits.max_frame, kinds=kinds, write_stall=self.limits.write_stall,
                          max_queued=max_queued, on_frame=on_frame, on_closed=on_closed, name=which)

    def _open_environment(self) -> None:
        """Start the supervisor (a new environment) and connect to its stream."""
        self._retire_streams()
        self._sup_gen += 1
        self._violation = None
        self._set_state("down")
        self._sup = self._connect(self.process.start(), _SUPERVISOR_KINDS, self._sup_gen, "supervisor")
        self._holder.conns = [self._sup]

    def _environment_alive(self) -> bool:
        return self._sup is not None and not self._sup.closed

    @property
    def environment_lost(self) -> str | None:
        """Why the session's environment (its container or process) went away since it started, else None.

        Its engine died or restarted, its machine went away, or someone removed
        it: variables and files are gone, and the next run would start a new,
        empty environment (saying so). A kernel that only died (out of memory,
        ``os._exit``) is not a lost environment: its files are still there.
        """
        if self._closed or self._sup is None or not self._sup.closed:
            return None
        detail = self._exit.detail if self._exit is not None and self._exit.detail else ""
        return detail or self._violation or f"the sandbox's {self.process.where} stopped"

    @property
    def kernel_lost(self) -> str | None:
        """Why the kernel stopped while no code ran (killed from outside, or out of memory in a thread the
        code left running), else None. Its environment is still there, files and all: the next run starts a
        fresh kernel in it, without the variables. (A whole environment that went away: :attr:`environment_lost`.)

        May wait up to half a second, once per kernel, to learn whether the OOM killer ended it.
        """
        if self._closed or self._sup is None or self._exec is not None or self._state not in ("ended", "broken"):
            return None
        if self.environment_lost:
            return None
        return str(self._death_reason())

    def _wait_state(self, predicate: Callable[[], bool], deadline: float) -> bool:
        with self._state_changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._state_changed.wait(min(left, 0.5))
            return True

    def _start_kernel(self) -> None:
        """A fresh kernel next to the supervisor: prepare it, start it, wait for its hello, install the stubs.

        In a container the supervisor starts the kernel itself (the first one as the container starts:
        it is booting by now), and the host functions and settings go on the kernel's stream
        (``settings_on_stream``): the kernel installs them before it answers anything.
        """
        deadline = time.monotonic() + self.start_timeout
        on_stream = getattr(self.process, "settings_on_stream", False)
        self._retire_kernel()
        self._kernels += 1
        self._violation = None
        self._exit = None
        self._exit_settled = False
        self._watched = False
        self._kernel_pid = None
        self._oom_hint = None
        self._died_code = None
        self._died_said = False
        self._idle_calls = CallBudget(self.limits.max_calls_per_run)
        self._prepared = None
        self._set_state("starting")
        self._kernel_started = time.time()
        request = {"parent": self.process.kernel_parent(), **getattr(self.process, "kernel_request", dict)()}
        try:
            self._send(wire.KIND_RESTART, json.dumps(request).encode())
        except ConnectionError:
            raise KernelStartError(f"the sandbox's supervisor is gone: {self._start_failure_detail()}") from None
        prepared_by = min(deadline, time.monotonic() + PREPARE_TIMEOUT)
        if not self._wait_state(lambda: self._prepared is not None or not self._environment_alive(), prepared_by) \
                or self._prepared is None:
            raise KernelStartError(f"the sandbox's supervisor did not prepare a kernel: {self._start_failure_detail()}")
        self._kern_gen += 1
        self._kern = self._connect(self.process.start_kernel(self._prepared), _KERNEL_KINDS, self._kern_gen, "kernel")
        self._holder.conns = [c for c in (self._sup, self._kern) if c is not None]
        if on_stream:
            try:
                self._kern.send(wire.KIND_PREPARED, json.dumps({
                    "specs": self._dispatcher.specs_json(), "output_limit": int(self.output_limit),
                    "max_payload": int(self.limits.max_payload),
                }).encode())
            except ConnectionError:
                raise KernelStartError(f"the kernel exited while starting: {self._start_failure_detail()}") from None
        self._wait_state(lambda: self._state != "starting", deadline)
        if self._state != "ready":
            detail = self._start_failure_detail()
            if self._state == "starting":
                raise KernelStartError(f"the kernel did not start within {self.start_timeout:g} s: {detail}")
            raise KernelStartError(f"the kernel exited while starting: {detail}")
        if not on_stream:
            self._setup_kernel(deadline)

    def _boot(self) -> None:
        self._open_environment()
        self._start_kernel()

    def _restart_kernel(self, reason: str = "") -> None:
        """A fresh kernel in the same environment (files stay); a new environment if that fails.

        Timed and recorded for the next result (``restarts``), whether it succeeds or raises.
        """
        with timed_restart(reason or "restart", self._restarts):
            self._replace_kernel()

    def _replace_kernel(self) -> None:
        self._dispatcher.abandon_all(None)
        if self._environment_alive():
            try:
                self._start_kernel()
                return
            except (ConnectionError, KernelStartError):
                pass
        self._recreate()

    def _recreate(self) -> None:
        """The last resort: a new supervisor and environment (files in a container are lost)."""
        self._retire_streams()
        self.process.stop()
        self._boot()
        if self.backend == "docker":
            self._restarted_notice = (self._restarted_notice or "") + (
                " The sandbox's container had to be recreated: files from earlier runs are gone.")

    def _start_failure_detail(self) -> str:
        if self._violation:
            return self._violation
        tails = [c.stderr_text() for c in (self._kern, self._sup) if c is not None]
        if self._exit is not None and (self._exit.detail or self._exit.code is not None):
            return self._exit.detail or str(self._exit.describe())
        for tail in tails:
            detail = exit_detail(tail.splitlines())
            if detail:
                return detail
        return "no output"

    def _setup_kernel(self, deadline: float) -> None:
        code = (
            "import sandbox_runtime as __sr\n"
            f"__sr.install({self._dispatcher.specs_json()!r})\n"
            f"__sr.configure(output_limit={int(self.output_limit)!r}, max_payload={int(self.limits.max_payload)!r})\n"
            "del __sr\n"
        )
        reply = self.execute_silent(code, max(deadline - time.monotonic(), 5.0))
        if reply.get("status") != "ok":
            raise KernelStartError("the sandbox runtime failed to load in the kernel: "
                                   f"{_jupyter.text_field(reply, 'evalue', str(reply))[:500]}")

    def _on_frame(self, which: str, generation: int, kind: bytes, body: bytearray) -> None:
        """Runs on an I/O thread for every frame. What the sandbox sends is hostile input:
        anything malformed marks the kernel broken (it is restarted); nothing raises."""
        if which == "supervisor":
            if generation != self._sup_gen:
                return
            if kind == wire.KIND_PREPARED:
                info = json.loads(bytes(body[:4096]))
                path = info.get("connection") if isinstance(info, dict) else None
                if not isinstance(path, str):
                    raise ValueError("the supervisor's answer has no connection file")
                with self._state_changed:
                    self._prepared = path
                    self._state_changed.notify_all()
                return
            if kind == wire.KIND_HELLO:
                if self._state == "starting":
                    info = _small_json(body)
                    pid = info.get("pid")
                    self._kernel_pid = pid if type(pid) is int else None
                    self._watched = info.get("watch") is True and self._kernel_pid is not None
                    self._set_state("ready")
                return
            if kind == wire.KIND_DIED:
                self._on_died(_small_json(body))
                return
        elif generation != self._kern_gen:
            return
        if self._state != "ready":
            return  # from a kernel that has ended or broken the protocol
        try:
            if kind == wire.KIND_JUPYTER:
                channel, parts = wire.unpack_parts(body)
                msg = _jupyter.parse(parts)
                execution = self._exec
                if execution is not None and msg.parent_id == execution.msg_id:
                    execution.handle(channel, msg)
            elif kind == wire.KIND_CALL:
                call_id, name, payload = wire.unpack_call(body)
                self._on_call(call_id, name, payload)
            elif kind == wire.KIND_ABANDON:
                execution = self._exec
                self._dispatcher.abandon(wire.unpack_u32(body), execution.clock if execution else None)
            elif kind == wire.KIND_STARTED:
                # The kernel's word only decides whether its own code may be run again: a kernel that
                # forges it, or leaves it out, changes nothing else.
                execution = self._exec
                if execution is not None:
                    execution.began = True
            elif kind == wire.KIND_ENDED:
                execution = self._exec
                if execution is not None and bytes(body[:64]) == execution.msg_id.encode("ascii", "replace")[:63]:
                    execution.ended.set()
        except (wire.WireError, _jupyter.MessageError, ValueError, TypeError, KeyError, RecursionError) as exc:
            self._violation = f"the kernel sent a malformed message ({type(exc).__name__}: {str(exc)[:200]})"
            self._set_state("broken")

    def _on_died(self, info: dict[str, Any]) -> None:
        """The supervisor saw the watched kernel end. A hint from inside the container: it only ever
        ends this kernel sooner, says whether the OOM killer was involved and, where it started the
        kernel, its exit code (else that comes from the engine); used for the run's error message only.
        The kernel's own stream closing says the same thing a moment later."""
        if not self._watched or self._state not in ("ready", "ended") or info.get("pid") != self._kernel_pid:
            return  # not about the current kernel (or the supervisor was not watching it)
        oom, code = info.get("oom"), info.get("code")
        execution = self._exec
        if execution is not None and info.get("started") == execution.msg_id:
            execution.began = True  # the kernel noted this run's start (see sandbox_runtime._announce_start)
        with self._state_changed:
            if self._oom_hint is None and type(oom) is bool:
                self._oom_hint = oom
            if not self._died_said:
                self._died_said = True
                self._died_code = code if type(code) is int and -64 < code < 256 else None
            self._state_changed.notify_all()
        kern = self._kern
        if self._state == "ready" and kern is not None:
            # Its stream may stay open a while (the engine waits for its output to drain): end it
            # here, and the usual path (_on_closed) takes the exit code from the engine. What the kernel
            # wrote before it ended is read first (at most DEATH_DRAIN seconds): its run's start among it.
            kern.close(wait=0, drain=DEATH_DRAIN)

    def _on_call(self, call_id: int, name: str, payload: memoryview) -> None:
        execution = self._exec
        send = self._reply_sender()
        if execution is None or not execution.user:
            # Nothing runs, so no run pays for this call: the gap between two runs has a budget of its
            # own. Refusing costs the host a reply; a kernel that keeps calling is stopped instead.
            budget = self._idle_calls
            budget.calls += 1
            if budget.calls > budget.max_calls:
                self._violation = (f"the kernel made more than {budget.max_calls} host-function calls while no "
                                   "code was running")
                self._set_state("broken")
                kern = self._kern
                if kern is not None:
                    kern.close(wait=0)
                return
            from .functions import encode_error

            send(call_id, wire.REPLY_ERROR, encode_error(RuntimeError(
                "host functions can only be called while the sandbox runs code")))
            return
        self._dispatcher.submit(call_id, name, payload, send=send, on_done=execution.record_call,
                                clock=execution.clock, budget=execution.budget, max_payload=self.limits.max_payload)

    def _on_closed(self, which: str, generation: int, reason: str | None) -> None:
        if which == "supervisor":
            if generation != self._sup_gen:
                return
            if reason is not None:
                self._violation = f"the sandbox's supervisor stream broke: {reason}"
            if self._exit is None:
                self._exit = KernelExit(None, False, f"the sandbox's {self.process.where} stopped")
            self._set_state("broken" if reason is not None else "ended")
            with self._state_changed:
                self._state_changed.notify_all()
            return
        if generation != self._kern_gen:
            return
        if reason is not None:
            self._violation = reason
            self._set_state("broken")
            return
        if self._state in ("ended", "broken"):
            return
        tail = self._kern.stderr_text() if self._kern is not None else ""
        code = None
        detail = exit_detail(tail.splitlines())
        from_supervisor = getattr(self.process, "exit_from_supervisor", False)
        if from_supervisor:
            if self._watched:  # its D is on the way, if it is not here yet (a hint: never waited for long)
                self._wait_state(lambda: self._died_said or not self._environment_alive(),
                                 time.monotonic() + DEATH_HINT_WAIT)
            code = self._died_code
        engine_gone = False
        if not from_supervisor or not self._died_said:
            try:
                engine_code = self.process.kernel_exit_code()
                if not from_supervisor:
                    code = engine_code
            except BackendUnavailable as exc:  # the whole environment went away (its engine, its machine)
                detail, engine_gone = str(exc), True
            except Exception:
                pass
        if not engine_gone and not self._environment_alive():
            # The whole sandbox went with the kernel (gVisor's OOM kill takes it all): that is the news, not
            # what the runtime last wrote on the kernel's stream ("waiting on pid 5 ...: EOF").
            detail = f"the sandbox's {self.process.where} stopped"
        self._exit = KernelExit(code, False, detail)
        self._set_state("ended")

    def _send(self, kind: bytes, *chunks: Any) -> None:
        """A frame to the supervisor."""
        conn = self._sup
        if conn is None:
            raise ConnectionError("no sandbox")
        conn.send(kind, *chunks)

    def _reply_sender(self) -> Callable[[int, int, list[Any]], None]:
        """Replies go to the kernel that is current when the call arrived."""
        conn = self._kern

        def send(call_id: int, status: int, chunks: list[Any]) -> None:
            if conn is None:
                return
            with contextlib.suppress(ConnectionError):
                conn.send(wire.KIND_REPLY, *wire.pack_reply(call_id, status, chunks))
        return send

    def _interrupt(self) -> None:
        try:
            if not self.process.interrupt_kernel():
                self._send(wire.KIND_INTERRUPT)
        except ConnectionError:
            pass

    def _start_execute(self, code: str, *, user: bool, user_expressions: dict[str, str] | None = None,
                       on_output: StreamCallback | None = None,
                       on_call: Callable[[FunctionCall], None] | None = None) -> _Execution:
        msg_id, parts = self._requests.execute(code, silent=not user, user_expressions=user_expressions)
        execution = _Execution(msg_id, user=user, limits=self.limits, output_limit=self.output_limit,
                               on_output=on_output, on_call=on_call)
        if user:  # a new gap between runs begins after this one
            self._idle_calls = CallBudget(self.limits.max_calls_per_run)
        self._exec = execution
        if self._state != "ready":
            execution.done.set()
            return execution
        try:
            self._send(wire.KIND_JUPYTER, *wire.pack_parts("shell", parts))
        except ConnectionError:
            execution.done.set()
        return execution

    # --- bookkeeping in the kernel (sandbox.snapshot's interface, see SnapshotKernel there) ----------

    @contextlib.contextmanager
    def exclusive_kernel(self) -> Iterator[None]:
        """Hold the session (no run, no other bookkeeping meanwhile) with its kernel up: started, or restarted
        when it had stopped. Raises :class:`~sandbox.errors.SandboxClosed` on a closed session."""
        with self._lock:
            self._check_open()
            self._ensure_kernel()
            yield

    def start_silent(self, code: str,
                     user_expressions: dict[str, str] | None = None) -> Callable[[float], dict[str, Any]]:
        """Start bookkeeping code in the kernel (no history, no output) and return at once, inside
        :meth:`exclusive_kernel`. The function returned waits at most its argument's seconds for the shell
        reply and returns its content; it raises :class:`~sandbox.errors.KernelStartError` when the kernel does
        not answer in time or stopped (then call :meth:`interrupt_and_settle`)."""
        execution = self._start_execute(code, user=False, user_expressions=user_expressions)

        def wait(timeout: float) -> dict[str, Any]:
            try:
                if not execution.done.wait(max(timeout, 0.1)):
                    raise KernelStartError(f"the kernel did not answer within {timeout:g} s")
                if execution.reply is None:
                    raise KernelStartError(f"the kernel stopped: {self._start_failure_detail()}")
                return execution.reply
            finally:
                self._exec = None

        return wait

    def execute_silent(self, code: str, timeout: float,
                       user_expressions: dict[str, str] | None = None) -> dict[str, Any]:
        """Run bookkeeping code in the kernel (no history, no output) inside :meth:`exclusive_kernel`; the shell
        reply's content. Raises as :meth:`start_silent`'s waiting does."""
        return self.start_silent(code, user_expressions)(timeout)

    def snapshot_files(self) -> SnapshotFiles:
        """The session's working directory and snapshot staging directory, as a snapshot moves them."""
        raise NotImplementedError(f"the {self.backend!r} backend has no files a snapshot can move")

    # --- public API -------------------------------------------------------------------------

    def start(self) -> "KernelSandbox":
        """Start the kernel now (otherwise the first :meth:`run` starts it)."""
        with self._lock:
            self._check_open()
            if self._sup is None:
                try:
                    self._boot()
                except BaseException:
                    self.close()
                    raise
        return self

    def __enter__(self) -> "KernelSandbox":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed("this sandbox session is closed; open a new one")

    def _ensure_kernel(self) -> None:
        if self._sup is None:
            self._boot()
        elif self._state != "ready":
            reason = self._death_reason()
            self._restart_kernel(f"the kernel had stopped ({reason.type})")
            self._restarted_notice = (
                f"The kernel was restarted because it had stopped ({reason}); "
                "variables, imports and definitions from earlier runs are gone. "
                "Files in the working directory were kept." + (self._restarted_notice or "")
            )

    def _death_reason(self, wait: float = 0.5) -> ExecutionError:
        """What ended the kernel, as the run's error.

        A kernel SIGKILLed may have been the OOM killer's victim: the
        supervisor says so (waited for at most ``wait`` seconds), else the
        backend is asked once, no longer than ``wait`` either. Asked once per
        kernel: the next run does not wait again.
        """
        if self._violation:
            return ExecutionError("ProtocolError", f"{self._violation}; the kernel was stopped")
        exit = self._exit or KernelExit(None)
        if not self._exit_settled and exit.signal == signal.SIGKILL and not exit.oom:
            if self._was_oom(wait):
                exit = KernelExit(exit.code, True, exit.detail)
            self._exit = exit
            self._exit_settled = True
        return exit.describe(self.process.memory_limit())

    def _was_oom(self, wait: float) -> bool:
        deadline = time.monotonic() + max(wait, 0.0)
        if self._watched:
            with self._state_changed:
                while self._oom_hint is None and self._environment_alive():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._state_changed.wait(left)
            if self._oom_hint is not None:
                return self._oom_hint
        # No word from the supervisor (an older image, or it went with its container): ask the backend,
        # on a thread, so that an engine that does not answer cannot hold the run past its deadline.
        answer: list[bool] = []
        started = self._kernel_started

        def ask() -> None:
            with contextlib.suppress(Exception):
                answer.append(bool(self.process.oom_since(started)))

        asker = threading.Thread(target=ask, daemon=True, name="sandbox-oom-query")
        asker.start()
        asker.join(max(deadline - time.monotonic(), 0.05))
        return bool(answer and answer[0])

    def _retire_kernel(self) -> None:
        self._kern_gen += 1  # events of the old kernel's stream are ignored from now on
        conn, self._kern = self._kern, None
        if conn is not None:
            conn.close(wait=2.0)
        with contextlib.suppress(Exception):
            self.process.stop_kernel()
        self._dispatcher.abandon_all(None)

    def _retire_streams(self) -> None:
        self._retire_kernel()
        self._sup_gen += 1
        conn, self._sup = self._sup, None
        if conn is not None:
            conn.close(wait=2.0)

    def _max_run_time(self, limit: float | None) -> float | None:
        if self.max_run_time is not None:
            return self.max_run_time
        if limit is None:
            return None
        return max(10 * limit, limit + 2 * (self.function_timeout or 60.0))

    def run(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_output: StreamCallback | None = None,
        on_call: Callable[[FunctionCall], None] | None = None,
        list_files: bool = False,
    ) -> ExecutionResult:
        """Run ``code`` in the kernel. Errors in the code come back in the result.

        ``timeout`` overrides the session's limit for this run (``None``: the
        session default). Time inside host functions does not count against
        it, but the run ends after ``max_run_time`` in all (default: ten times
        the timeout, at least the timeout plus two function timeouts); time a
        human spends approving a call counts against neither.
        ``on_output`` receives stdout/stderr text as it arrives and
        ``on_call`` each host-function call when it completes; both are called
        from background threads and must return quickly.
        ``list_files`` fills ``result.files`` (the listing rides on the same
        request: no extra round trip).
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            limit = self.timeout if timeout is None else timeout
            notices: list[str] = []
            restarted = False
            execution: _Execution | None = None
            for attempt in (1, 2):
                kern = self._kern
                if kern is not None and self._state == "ready" and kern.torn_frame(idle=0.5):
                    # Earlier code wrote part of a frame on the call stream and stopped: whatever the
                    # kernel writes next would be read as the rest of it. Start this run on a fresh kernel.
                    self._violation = "the kernel left a message half-written on its call stream"
                    self._set_state("broken")
                self._ensure_kernel()
                if self._restarted_notice:
                    restarted = True
                    notices.append(self._restarted_notice.strip())
                    self._restarted_notice = None
                execution = self._start_execute(
                    code, user=True, user_expressions={"files": _LIST_FILES} if list_files else None,
                    on_output=on_output, on_call=on_call)
                try:
                    self._wait(execution, limit)
                except KeyboardInterrupt:
                    # Ctrl-C on the host: stop the code in the kernel too, so the session
                    # is idle and consistent when the caller catches the interrupt.
                    self._exec = None
                    self.interrupt_and_settle()
                    raise
                finally:
                    self._exec = None
                if self._state == "ended" and not execution.began and attempt == 1 and (
                        self._died_said or not getattr(self.process, "exit_from_supervisor", False)):
                    # The kernel had died (killed from outside, say) before it began this code: start a
                    # fresh one and run the code there, once. A kernel announces the start of the code
                    # before the code runs (on its own stream, read to its end before the kernel counts
                    # as ended; or, in a container, in the supervisor's word on its end, without which
                    # nothing is run again), so code that killed its own kernel is never run twice.
                    continue
                break
            assert execution is not None
            result = self._finish(execution, limit, list_files)
            result.restarted = result.restarted or restarted
            result.restarts, self._restarts = self._restarts + result.restarts, []
            result.notices[:0] = notices
            result.duration = time.perf_counter() - started
            return result

    def _wait(self, execution: _Execution, limit: float | None) -> None:
        """Wait for the run to end, enforcing the time limits on the host's clock."""
        run_limit = self._max_run_time(limit)
        clock = execution.clock
        interrupted_at: float | None = None
        while not execution.done.is_set():
            now = time.monotonic()
            for call in self._dispatcher.overdue(now):
                self._dispatcher.expire(call, self._reply_sender(), clock)
            if interrupted_at is None:
                over_code = limit is not None and clock.code_time(now) >= limit
                over_run = run_limit is not None and clock.run_time(now) >= run_limit
                if over_code or over_run:
                    execution.result.timed_out = True
                    execution.timeout_kind = "run" if over_run and not over_code else "code"
                    interrupted_at = now
                    self._dispatcher.abandon_all(clock)
                    self._interrupt()
            elif now - interrupted_at >= self.interrupt_grace:
                execution.forced_restart = True
                return
            wait = 0.25
            if interrupted_at is not None:
                wait = interrupted_at + self.interrupt_grace - now
            else:
                if limit is not None:
                    wait = min(wait, max(limit - clock.code_time(now), 0.0))
                if run_limit is not None:
                    wait = min(wait, max(run_limit - clock.run_time(now), 0.0))
                next_call = self._dispatcher.next_deadline()
                if next_call is not None:
                    wait = min(wait, max(next_call - now, 0.0))
            execution.done.wait(max(wait, 0.001))
        if execution.user and self._state == "ready":
            execution.ended.wait(END_MARK_WAIT)

    def _finish(self, execution: _Execution, limit: float | None, list_files: bool) -> ExecutionResult:
        result = execution.result
        forced = execution.forced_restart
        died = self._state != "ready" and not forced
        if forced:
            result.restarted = True
            self._restart_kernel("the code did not stop when interrupted")
            result.error = ExecutionError(
                "TimeoutError",
                f"the code ran longer than {self._limit_text(execution, limit)} and did not stop when interrupted; "
                "the kernel was restarted and the session's variables were lost (files were kept)",
            )
            result.notices.append("The kernel was restarted: variables, imports and definitions are gone.")
            result.kernel_lost = "the code did not stop when interrupted, so the kernel was restarted"
        elif died:
            result.error = self._death_reason(self._time_left(execution, limit))
            result.kernel_lost = str(result.error)
            gone = self.environment_lost
            if self._violation:
                result.notices.append(
                    "The sandbox broke the protocol between it and the host, so its kernel was stopped; "
                    "the next run starts a fresh kernel (variables are lost, files are kept).")
                self._restart_kernel("the kernel broke the protocol")  # a broken kernel is not left running
                self._restarted_notice = None
            elif gone:
                result.kernel_lost = gone
                files = "variables and files are lost" if self.backend == "docker" else "variables are lost"
                result.notices.append(f"The sandbox's {self.process.where} went away during this run; the next "
                                      f"run starts a new one with a fresh kernel ({files}).")
            else:
                result.notices.append(
                    "The kernel stopped during this run; the next run starts a fresh kernel "
                    "(variables are lost, files are kept).")
        with execution.lock:
            result.stdout, result.stderr = execution.stdout.getvalue(), execution.stderr.getvalue()
        stdout, stderr = execution.stdout, execution.stderr
        if stdout.truncated or stderr.truncated or execution.dropped_outputs or execution.cut_outputs:
            result.truncated = True
            cut = []
            if stdout.truncated:
                cut.append(f"stdout: {stdout.dropped} characters cut from the middle")
            if stderr.truncated:
                cut.append(f"stderr: {stderr.dropped} characters cut from the middle")
            if execution.dropped_outputs:
                cut.append(f"{execution.dropped_outputs} rich outputs dropped (limit {self.limits.max_outputs})")
            if execution.cut_outputs:
                cut.append(f"{execution.cut_outputs} rich outputs shortened or reduced to text (too large)")
            result.notices.append("Output was truncated (" + "; ".join(cut) + ").")
        if execution.budget.records_dropped:
            result.notices.append(f"{execution.budget.records_dropped} host-function calls were not recorded "
                                  f"(more than {self.limits.max_call_records}).")
        for message in execution.callback_errors:
            result.notices.append(f"A callback failed: {message}")
        if result.timed_out and not forced and not died:
            if self._cleanup_after_interrupt():
                result.restarted = True
                self._restart_kernel("the interrupted code left threads running")
                result.error = ExecutionError(
                    "TimeoutError",
                    f"the code ran longer than {self._limit_text(execution, limit)} and was interrupted; it left "
                    "threads running, so the kernel was restarted to stop them (variables were lost, files kept)",
                )
                result.kernel_lost = "the interrupted code left threads running, so the kernel was restarted"
                result.notices.append("The kernel was restarted: variables, imports and definitions are gone.")
            else:
                result.error = ExecutionError(
                    "TimeoutError",
                    f"the code ran longer than {self._limit_text(execution, limit)} and was interrupted; "
                    "the session's variables were kept",
                    result.error.traceback if result.error else "",
                )
        execution.closed = True
        if list_files and not result.timed_out and not died and not forced:
            result.files = self._parse_listing(execution.reply)
            if result.files is None and self._state == "ready":
                # The code failed, so the listing that rode on its request was not made: ask again.
                with contextlib.suppress(KernelStartError):
                    result.files = self._parse_listing(
                        self.execute_silent("", LISTING_RETRY_TIMEOUT, user_expressions={"files": _LIST_FILES}))
        return result

    def _time_left(self, execution: _Execution, limit: float | None) -> float:
        """Seconds the run may still take for bookkeeping: up to its own deadline, at most DEATH_HINT_WAIT
        (and a moment even past the deadline, so that a quick answer is not thrown away)."""
        now = time.monotonic()
        left = [DEATH_HINT_WAIT]
        if limit is not None:
            left.append(limit - execution.clock.code_time(now))
        run_limit = self._max_run_time(limit)
        if run_limit is not None:
            left.append(run_limit - execution.clock.run_time(now))
        return max(min(left), 0.2)

    def _limit_text(self, execution: _Execution, limit: float | None) -> str:
        if execution.timeout_kind == "run":
            return f"{self._max_run_time(limit):g} s in all (host-function time included)"
        return f"{limit:g} s"

    def interrupt(self) -> None:
        """Interrupt the code running now; callable from any thread.

        The code gets a ``KeyboardInterrupt`` (its run returns with that error)
        and the session keeps its state. Does nothing when no code runs.
        """
        if not self._closed and self._state == "ready":
            self._interrupt()

    def interrupt_and_settle(self) -> None:
        """After code the host gave up waiting for (a run past its time, see also :meth:`start_silent`): interrupt
        it and wait for the kernel to be idle again, or restart the kernel (its variables are then lost) when it
        does not obey."""
        self._dispatcher.abandon_all(None)
        try:
            self._interrupt()
            reply = self.execute_silent("", self.interrupt_grace + 2.0)  # queued behind the interrupted cell
            if reply.get("status") not in ("ok", "error"):
                raise KernelStartError("no answer")
        except BaseException:
            try:
                self._restart_kernel("the kernel did not obey an interrupt from the host")
                self._restarted_notice = (
                    "The kernel was restarted after an interrupt it did not obey; variables are gone."
                )
            except Exception:
                pass

    def _cleanup_after_interrupt(self) -> bool:
        """Kill processes a timed-out run left behind (a fork bomb's children, servers).

        True when the code also left threads running (or the kernel does not
        answer): only a restart stops those.
        """
        try:
            reply = self.execute_silent(
                "", 5.0, user_expressions={"threads": "__import__('sandbox_runtime').after_interrupt()"})
            value = reply.get("user_expressions", {}).get("threads", {})
            text = value.get("data", {}).get("text/plain", "") if isinstance(value, dict) else ""
            return not (isinstance(text, str) and text.strip() == "0")
        except Exception:
            return True

    # --- files ------------------------------------------------------------------------------

    def list_files(self) -> list[FileInfo]:
        """Every file under the working directory (asks the kernel)."""
        with self._lock:
            self._check_open()
            self._ensure_kernel()
            reply = self.execute_silent("", 30.0, user_expressions={"files": _LIST_FILES})
            files = self._parse_listing(reply)
            if files is None:
                raise FileTransferError("the sandbox did not answer the file listing with a valid list")
            return files

    def _parse_listing(self, reply: dict[str, Any] | None) -> list[FileInfo] | None:
        """Files from a listing the kernel sent (untrusted: shape, types, names and count checked)."""
        try:
            value = (reply or {}).get("user_expressions", {}).get("files", {})
            if not isinstance(value, dict) or value.get("status") != "ok":
                return None
            text = value["data"]["text/plain"]
            if not isinstance(text, str):
                return None
            rows = _jupyter.json_in_repr(text)  # never literal_eval: ~500 bytes of syntax tree per byte
        except (KeyError, TypeError, ValueError, SyntaxError, MemoryError, RecursionError, AttributeError):
            return None
        if not isinstance(rows, list):
            return None
        files: list[FileInfo] = []
        for row in rows[: self.limits.max_listed_files]:
            if not (isinstance(row, list) and len(row) == 3):
                continue
            path, size, mtime = row
            if type(size) is not int or size < 0 or type(mtime) not in (int, float):
                continue
            try:
                check_relative_path(path)
            except UnsafePath:
                continue
            files.append(FileInfo(path, size, float(mtime)))
        return files

    # --- host functions -------------------------------------------------------------------

    @property
    def functions(self) -> dict[str, HostFunction]:
        return dict(self._dispatcher.functions)

    def register(self, *functions: Callable[..., Any] | HostFunction) -> None:
        """Offer more host functions to the live session (replacing same-named ones)."""
        with self._lock:
            self._check_open()
            self._dispatcher.register(*functions)
            self._reinstall()

    def unregister(self, *names: str) -> None:
        """Withdraw host functions; their stubs are removed from the session."""
        with self._lock:
            self._check_open()
            self._dispatcher.unregister(*names)
            self._reinstall()

    def _reinstall(self) -> None:
        if self._state == "ready":
            self._setup_kernel(time.monotonic() + 30.0)

    # --- lifecycle -------------------------------------------------------------------------

    def restart(self) -> None:
        """Fresh interpreter; files and host functions stay. The next result says so."""
        with self._lock:
            self._check_open()
            if self._sup is None:
                self._boot()
            else:
                self._restart_kernel("asked for")
            self._restarted_notice = (
                "The kernel was restarted on request; variables, imports and definitions are gone."
            )

    def close(self) -> None:
        """Stop the kernel and remove everything the session created. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._retire_streams()
        finally:
            self._dispatcher.close()
            self._finalizer()
            for callback in self.close_callbacks:
                with contextlib.suppress(Exception):
                    callback()

    @property
    def closed(self) -> bool:
        return self._closed

    # --- durable sessions (sandbox.snapshot) --------------------------------------------------

    #: What :meth:`restore` brought back (a :class:`sandbox.snapshot.RestoreReport`), on restored sessions.
    restored: RestoreReport | None = None
    #: The session's packages (:class:`sandbox.packages.SessionPackages`) on backends that install any.
    packages: SessionPackages | None = None

    def snapshot(self, *, since: Snapshot | None = None, store: SnapshotStore | str | os.PathLike[str] | None = None,
                 timeout: float = 300.0, delta: bool = False) -> Snapshot:
        """Save this session (files, variables, packages, working directory) to one file; returns a Snapshot.

        ``since=`` an earlier snapshot of this session saves incrementally:
        variables whose fingerprint did not change are not pickled or copied
        out of the sandbox again, and when nothing changed at all ``since``
        itself is returned. ``store`` is a :class:`~sandbox.snapshot.SnapshotStore`
        or a directory (default: the data dir's ``snapshots``). ``delta=True``
        (with ``since`` in the same store): the file holds only what changed
        and refers to ``since`` for the rest (an autosave's cost is the
        change's size; see sandbox.snapshot). Raises
        :class:`~sandbox.snapshot.SnapshotError` saying why it could not.

        Example::

            snap = sb.snapshot()
            print(snap.manifest.describe())     # what was saved, and why anything was not
            again = sb.snapshot(since=snap)     # cheap when little changed
        """
        from .snapshot import take

        return take(self, since=since, store=store, timeout=timeout, delta=delta)

    @classmethod
    def restore(cls, snapshot: Snapshot | str | os.PathLike[str], functions: Any = (), **options: Any) -> Self:
        """A new, started session of this backend holding ``snapshot`` (a Snapshot or a snapshot file's path).

        ``options`` are the constructor's (``engine=``, ``memory=``,
        ``timeout=``, ...): a snapshot taken on one engine restores on any
        other. ``restore_timeout=`` (default 300 s) bounds each step of
        loading it. The packages the session had installed are installed
        again from the host's cache. The session's :attr:`restored` says what
        came back and what did not. ``SandboxPool.restore`` loads a snapshot
        into a warm session instead (no start on the path).

        Example::

            with DockerSandbox.restore(snap, engine=second_engine) as sb:
                print(sb.restored.describe())
        """
        from .snapshot import restore

        return restore(cls, snapshot, functions, **options)


class _ConnHolder:
    """The session's current connections, for its finalizer (which must not hold the session)."""

    conns: list[Connection] = []


def _release(process: KernelProcess, holder: _ConnHolder) -> None:
    """Finalizer (close() or garbage collection): must not raise."""
    conns, holder.conns = holder.conns, []
    for conn in conns:
        with contextlib.suppress(Exception):
            conn.close(wait=1.0)
    with contextlib.suppress(Exception):
        process.close()


#: Rich output types kept, and the longest base64 text decoded for a PNG.
_TEXT_MIMES_PREFIX = ("text/", "image/svg+xml", "application/")


def _decode_output(data: Any, kind: str) -> Output | None:
    """A rich output from a display message (untrusted: only strings and JSON values kept)."""
    if not isinstance(data, dict):
        return None
    kept: dict[str, str | bytes] = {}
    for mime, value in list(data.items())[:20]:
        if not isinstance(mime, str) or len(mime) > 100:
            continue
        if mime.startswith("image/") and mime != "image/svg+xml":
            if isinstance(value, str):
                try:
                    kept[mime] = base64.b64decode("".join(value.split()), validate=True)
                except (binascii.Error, ValueError):
                    continue
        elif isinstance(value, str):
            kept[mime] = value
        else:
            try:
                kept[mime] = json.dumps(value)
            except (TypeError, ValueError, RecursionError):
                continue
    if not kept:
        return None
    return Output(kept, "result" if kind == "execute_result" else "display")


def _small_json(body: bytearray, limit: int = 4096) -> dict[str, Any]:
    """A short JSON object from the supervisor ({} for anything else: what it adds is only ever a hint)."""
    if len(body) > limit:
        return {}
    try:
        value = json.loads(bytes(body))
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


#: Evaluated in the kernel as a user expression: the working directory's files as JSON.
_LIST_FILES = "__import__('sandbox_runtime').list_files('.')"
