"""A sandbox session backed by a Jupyter kernel process: the part Docker and local share.

Subclasses start and stop the kernel *process* (a container, a subprocess);
this class speaks the Jupyter protocol to it over ZMQ ``ipc`` sockets in a
private directory, runs code with a time limit, answers host-function calls
arriving on the stdin channel, and recovers from a kernel that dies.

Recovery ladder on timeout: interrupt (SIGINT) -> restart the kernel
process -> recreate it from scratch (subclass hook). State is kept when the
interrupt works; otherwise the result says the state was lost.
"""

from __future__ import annotations

import ast
import base64
import json
import secrets
import shutil
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import zmq
from jupyter_client.blocking.client import BlockingKernelClient

from .base import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, StreamCallback
from .errors import FileTransferError, KernelStartError, SandboxClosed
from .functions import CALL_PREFIX, FunctionDispatcher, HostFunction
from .result import CappedText, ExecutionError, ExecutionResult, FileInfo, FunctionCall, Output, strip_ansi

#: Channel "ports" of the ipc transport: they only name the socket files.
_PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
#: Rich outputs kept per run, and their total size.
MAX_OUTPUTS = 50
MAX_OUTPUT_BYTES = 20_000_000


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
        if self.code is not None and self.code > 128:
            how = f"killed by signal {self.code - 128}"
        elif self.code is not None and self.code < 0:
            how = f"killed by signal {-self.code}"
        detail = f": {self.detail}" if self.detail else ""
        return ExecutionError("KernelDied", f"the kernel process ended ({how}){detail}")


_CLEAN_TB_SKIP = ("-" * 20,)
#: What the runtime writes to the kernel's own stderr once it is up (see sandbox_runtime.READY_MARKER).
READY_MARKER = "sandbox-runtime: kernel ready"
#: MIME type of the runtime's "this much output was cut in the kernel" message.
OUTPUT_CUT_MIME = "application/vnd.codeact.output-cut+json"


def clean_traceback(lines: list[str]) -> str:
    """Plain-text traceback: colour codes, IPython's separator and hidden-frame notes removed."""
    text = strip_ansi("\n".join(lines))
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
    return next((ln.strip() for ln in reversed(lines) if ln.strip()), "")


class KernelSandbox:
    """Base class of the kernel-backed backends; see :class:`DockerSandbox`, :class:`LocalSandbox`."""

    backend = "kernel"
    workdir = "."
    #: Subclasses set how long a fresh kernel may take to answer.
    start_timeout = 60.0
    #: True when the working directory is on this machine (listing it needs no kernel).
    files_on_host = False
    #: Seconds to wait for the kernel to go idle after an interrupt.
    interrupt_grace = 3.0

    def __init__(
        self,
        functions: list[Callable[..., Any] | HostFunction] | tuple = (),
        *,
        timeout: float | None = DEFAULT_TIMEOUT,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        function_timeout: float | None = 60.0,
    ) -> None:
        self.timeout = timeout
        self.output_limit = output_limit
        self._dispatcher = FunctionDispatcher(functions, default_timeout=function_timeout)
        self._closed = False
        # What the finalizer must release even when the session is never closed.
        self._res = _Resources()
        self._exit: KernelExit | None = None  # set when the kernel process has ended
        self._dead = threading.Event()
        self._lock = threading.RLock()  # one run at a time per session
        self._restarted_notice: str | None = None
        self.key = secrets.token_hex(16)
        self.socket_dir = Path(tempfile.mkdtemp(prefix="sbx-"))
        self._res.socket_dir = str(self.socket_dir)
        self._finalizer = weakref.finalize(self, _release, self._res)

    @property
    def _client(self) -> BlockingKernelClient | None:
        return self._res.client

    @_client.setter
    def _client(self, client: BlockingKernelClient | None) -> None:
        self._res.client = client

    # --- subclass hooks -------------------------------------------------------------

    def _start_process(self) -> None:
        """Start the kernel process (first start or after it ended)."""
        raise NotImplementedError

    def _recreate_process(self) -> None:
        """Last resort: throw the process environment away and start anew."""
        self._stop_process()
        self._start_process()

    def _stop_process(self) -> None:
        raise NotImplementedError

    def _interrupt_process(self) -> None:
        raise NotImplementedError

    def _kernel_ip(self) -> str:
        """The ipc path prefix as the kernel sees it."""
        return str(self.socket_dir / "k")

    def _kill_strays_in_namespace(self) -> bool:
        return False

    def _memory_limit_text(self) -> str | None:
        return None

    # --- connection ---------------------------------------------------------------------

    def _connection_info(self, ip: str) -> dict[str, Any]:
        return {
            "transport": "ipc",
            "ip": ip,
            **_PORTS,
            "key": self.key,
            "signature_scheme": "hmac-sha256",
            "kernel_name": "python3",
        }

    def _write_connection_file(self) -> Path:
        path = self.socket_dir / "kernel.json"
        path.write_text(json.dumps(self._connection_info(self._kernel_ip())))
        return path

    def _on_process_exit(self, exit: KernelExit) -> None:
        """Subclasses call this (from any thread) when the kernel process ends."""
        self._exit = exit
        self._dead.set()

    def _boot(self, start: Callable[[], None] | None = None) -> None:
        """Start the process (``start``, default :meth:`_start_process`), connect, install the runtime.

        Socket files of an earlier kernel are removed first: their presence is
        how we know the new kernel has bound its sockets.
        """
        for port in _PORTS.values():
            (self.socket_dir / f"k-{port}").unlink(missing_ok=True)
        self._exit = None
        self._dead.clear()
        (start or self._start_process)()
        deadline = time.monotonic() + self.start_timeout
        sockets = [self.socket_dir / f"k-{p}" for p in _PORTS.values()]
        while not all(s.exists() for s in sockets):
            if self._dead.is_set():
                raise KernelStartError(f"the kernel exited while starting: {self._start_failure_detail()}")
            if time.monotonic() > deadline:
                raise KernelStartError(
                    f"the kernel did not start within {self.start_timeout:g} s: {self._start_failure_detail()}"
                )
            time.sleep(0.002)
        self._connect()
        self._setup_kernel(deadline)

    def _start_failure_detail(self) -> str:
        return self._exit.detail if self._exit and self._exit.detail else "no output"

    def _connect(self) -> None:
        if self._client is not None:
            self._client.stop_channels()
        client = BlockingKernelClient()
        client.load_connection_info(self._connection_info(str(self.socket_dir / "k")))
        client.start_channels(shell=True, iopub=True, stdin=True, hb=False, control=False)
        self._client = client

    def _setup_kernel(self, deadline: float) -> None:
        code = (
            "import sandbox_runtime as __sr\n"
            f"__sr.install({self._dispatcher.specs_json()!r})\n"
            f"__sr.configure(output_limit={int(self.output_limit)!r})\n"
            "del __sr\n"
        )
        reply = self._execute_silent(code, deadline - time.monotonic(), wait_iopub=True)
        if reply.get("status") != "ok":
            raise KernelStartError(f"the sandbox runtime failed to load in the kernel: {reply.get('evalue', reply)}")

    def _execute_silent(self, code: str, timeout: float, *, wait_iopub: bool = False,
                        user_expressions: dict[str, str] | None = None) -> dict[str, Any]:
        """Run bookkeeping code: no history, no output, result via the shell reply.

        ``wait_iopub`` also waits until the iopub stream has delivered this
        request's idle status, which proves the subscription is live (ZMQ SUB
        sockets drop what is published before they finish connecting).
        """
        assert self._client is not None
        client = self._client
        deadline = time.monotonic() + max(timeout, 0.1)
        msg_id = client.execute(code, silent=True, store_history=False, allow_stdin=False,
                                user_expressions=user_expressions or {})
        reply: dict[str, Any] | None = None
        idle = not wait_iopub
        nudged_at = time.monotonic()
        while reply is None or not idle:
            if self._dead.is_set():
                raise KernelStartError(f"the kernel died: {self._start_failure_detail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KernelStartError("the kernel did not answer in time")
            if reply is None and client.shell_channel.msg_ready():
                msg = client.shell_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id:
                    reply = msg["content"]
                continue
            if not idle and client.iopub_channel.msg_ready():
                client.iopub_channel.get_msg(timeout=0)
                # Any message on iopub proves the subscription is live.
                idle = True
                continue
            if reply is not None and not idle and time.monotonic() - nudged_at > 0.2:
                # What was published before SUB connected is lost: make the kernel publish again.
                nudged_at = time.monotonic()
                client.kernel_info()
            zmq.select([client.shell_channel.socket, client.iopub_channel.socket], [], [], min(remaining, 0.05))
        self._drain_shell()
        return reply

    # --- public API -------------------------------------------------------------------------

    def start(self) -> "KernelSandbox":
        """Start the kernel now (otherwise the first :meth:`run` starts it)."""
        with self._lock:
            self._check_open()
            if self._client is None:
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
        if self._client is None:
            self._boot()
        elif self._dead.is_set():
            reason = self._exit.describe(self._memory_limit_text()) if self._exit else None
            self._revive()
            self._restarted_notice = (
                f"The kernel was restarted because it had stopped ({reason}); "
                "variables, imports and definitions from earlier runs are gone. Files in the working directory were kept."
            )

    def _revive(self) -> None:
        """Bring a dead or stuck kernel back: restart, and if that fails, recreate."""
        try:
            self._stop_process()
            self._boot()
        except Exception:
            self._boot(self._recreate_process)

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
        session default); time spent inside host functions (a tool, a human
        approving a call) does not count against it: each call has its own
        ``function_timeout``. ``on_output`` receives stdout/stderr text as it
        arrives; ``on_call`` each host-function call when it completes.
        ``list_files`` fills ``result.files`` (the listing rides on the same
        request: no extra round trip when the code succeeds).
        """
        with self._lock:
            self._check_open()
            started = time.perf_counter()
            result = ExecutionResult()
            limit = self.timeout if timeout is None else timeout
            for attempt in (1, 2):
                self._ensure_kernel()
                if self._restarted_notice:
                    result.restarted = True
                    result.notices.append(self._restarted_notice)
                    self._restarted_notice = None
                try:
                    self._execute(code, limit, result, on_output, on_call, retry_unstarted=attempt == 1,
                                  list_files=list_files and not self.files_on_host)
                    break
                except _KernelGoneBeforeStart:
                    # The kernel had died (killed from outside, say) before it began this code:
                    # the next loop starts a fresh one and runs the code there, once.
                    continue
                except KeyboardInterrupt:
                    # Ctrl-C on the host: stop the code in the kernel too, so the session
                    # is idle and consistent when the caller catches the interrupt.
                    self._settle_after_host_interrupt()
                    raise
            if list_files and result.files is None:
                try:  # the code failed (no user_expressions then) or the kernel restarted
                    result.files = self._list_files_now()
                except Exception:
                    result.files = None
            result.duration = time.perf_counter() - started
            return result

    def _execute(self, code: str, limit: float | None, result: ExecutionResult,
                 on_output: StreamCallback | None, on_call: Callable[[FunctionCall], None] | None,
                 retry_unstarted: bool = False, list_files: bool = False) -> None:
        client = self._client
        assert client is not None
        session = client.session
        stdout, stderr = CappedText(self.output_limit), CappedText(self.output_limit)
        outputs_bytes = 0
        dropped_outputs = 0
        cut_outputs = 0  # rich outputs the runtime shortened to fit the limit
        msg_id = client.execute(code, silent=False, store_history=True, allow_stdin=False,
                                user_expressions={"files": _LIST_FILES} if list_files else {})
        iopub, stdin = client.iopub_channel.socket, client.stdin_channel.socket
        poller = zmq.Poller()
        poller.register(iopub, zmq.POLLIN)
        poller.register(stdin, zmq.POLLIN)
        deadline = None if limit is None else time.monotonic() + limit
        interrupted_at: float | None = None
        began = False  # any sign that the kernel started on this request
        while True:
            now = time.monotonic()
            if deadline is not None and now >= deadline and interrupted_at is None:
                result.timed_out = True
                interrupted_at = now
                self._interrupt_process()
                deadline = now + self.interrupt_grace
            elif deadline is not None and now >= deadline:
                # The interrupt did not stop it (e.g. `except BaseException` in a loop).
                self._force_restart(result, limit)
                break
            wait = 0.25 if deadline is None else min(max(deadline - now, 0.0), 0.25)
            events = dict(poller.poll(wait * 1000))
            if not events:
                if self._dead.is_set():
                    began = self._drain_iopub(msg_id, stdout, stderr, result) or began
                    if not began and retry_unstarted:
                        raise _KernelGoneBeforeStart()
                    exit = self._exit or KernelExit(None)
                    result.error = exit.describe(self._memory_limit_text())
                    result.notices.append(
                        "The kernel stopped during this run; the next run starts a fresh kernel "
                        "(variables are lost, files are kept)."
                    )
                    break
                continue
            if stdin in events:
                _, msg = session.recv(stdin, mode=zmq.NOBLOCK)
                began = True
                if msg is not None and msg["msg_type"] == "input_request":
                    call_started = time.monotonic()
                    self._answer_input(msg["content"]["prompt"], result, on_call)
                    if deadline is not None and interrupted_at is None:
                        # Host time (a tool, a human approving it) is not the code's time.
                        deadline += time.monotonic() - call_started
            if iopub in events:
                done = False
                while True:
                    _, msg = session.recv(iopub, mode=zmq.NOBLOCK)
                    if msg is None:
                        break
                    if msg["parent_header"].get("msg_id") != msg_id:
                        continue
                    began = True
                    kind, content = msg["msg_type"], msg["content"]
                    if kind == "stream":
                        (stdout if content["name"] == "stdout" else stderr).write(content["text"])
                        if on_output is not None:
                            on_output(content["name"], content["text"])
                    elif kind == "display_data" and OUTPUT_CUT_MIME in content.get("data", {}):
                        # The runtime cut a stream at the source; count it as cut here.
                        cut = content["data"][OUTPUT_CUT_MIME]
                        if isinstance(cut, dict):
                            for name, capped in (("stdout", stdout), ("stderr", stderr)):
                                if isinstance(cut.get(name), int) and cut[name] > 0:
                                    capped.dropped += cut[name]
                            if isinstance(cut.get("outputs"), int) and cut["outputs"] > 0:
                                cut_outputs += cut["outputs"]
                    elif kind in ("display_data", "execute_result", "update_display_data"):
                        output = _decode_output(content.get("data", {}), kind)
                        size = sum(len(v) for v in output.data.values())
                        if len(result.outputs) >= MAX_OUTPUTS or outputs_bytes + size > MAX_OUTPUT_BYTES:
                            dropped_outputs += 1
                        else:
                            outputs_bytes += size
                            result.outputs.append(output)
                    elif kind == "error":
                        result.error = ExecutionError(content.get("ename", "Error"), content.get("evalue", ""),
                                                      clean_traceback(content.get("traceback", [])))
                    elif kind == "status" and content["execution_state"] == "idle":
                        done = True
                        break
                if done:
                    break
        result.stdout, result.stderr = stdout.getvalue(), stderr.getvalue()
        if stdout.truncated or stderr.truncated or dropped_outputs or cut_outputs:
            result.truncated = True
            cut = []
            if stdout.truncated:
                cut.append(f"stdout: {stdout.dropped} characters cut from the middle")
            if stderr.truncated:
                cut.append(f"stderr: {stderr.dropped} characters cut from the middle")
            if dropped_outputs:
                cut.append(f"{dropped_outputs} rich outputs dropped (limit {MAX_OUTPUTS})")
            if cut_outputs:
                cut.append(f"{cut_outputs} rich outputs shortened or reduced to text (too large)")
            result.notices.append("Output was truncated (" + "; ".join(cut) + ").")
        if result.timed_out and not result.restarted:
            self._cleanup_after_interrupt()
            result.error = ExecutionError(
                "TimeoutError",
                f"the code ran longer than {limit:g} s and was interrupted; the session's variables were kept",
                result.error.traceback if result.error else "",
            )
        if list_files and not result.timed_out and not result.restarted:
            result.files = self._reply_files(msg_id)
        self._drain_shell()

    def _reply_files(self, msg_id: str) -> list[FileInfo] | None:
        """The listing from this request's execute_reply (None when the code failed)."""
        assert self._client is not None
        deadline = time.monotonic() + 2.0
        session, sock = self._client.session, self._client.shell_channel.socket
        while time.monotonic() < deadline:
            if not sock.poll(50):
                if self._dead.is_set():
                    return None
                continue
            _, msg = session.recv(sock, mode=zmq.NOBLOCK)
            if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                continue
            value = msg["content"].get("user_expressions", {}).get("files", {})
            return _parse_listing(value)
        return None

    def interrupt(self) -> None:
        """Interrupt the code running now; callable from any thread.

        The code gets a ``KeyboardInterrupt`` (its run returns with that error)
        and the session keeps its state. Does nothing when no code runs.
        """
        if not self._closed and self._client is not None and not self._dead.is_set():
            self._interrupt_process()

    def _settle_after_host_interrupt(self) -> None:
        try:
            self._interrupt_process()
            reply = self._execute_silent("", self.interrupt_grace + 2.0)  # queued behind the interrupted cell
            if reply.get("status") not in ("ok", "error"):
                raise KernelStartError("no answer")
        except BaseException:
            try:
                self._revive()
                self._restarted_notice = (
                    "The kernel was restarted after an interrupt it did not obey; variables are gone."
                )
            except Exception:
                pass

    def _cleanup_after_interrupt(self) -> None:
        """Kill processes a timed-out run left behind (a fork bomb's children, servers)."""
        try:
            self._execute_silent(
                f"__import__('sandbox_runtime').kill_strays({self._kill_strays_in_namespace()!r})", 5.0
            )
        except Exception:
            pass

    def _force_restart(self, result: ExecutionResult, limit: float | None) -> None:
        result.restarted = True
        self._revive()
        result.error = ExecutionError(
            "TimeoutError",
            f"the code ran longer than {limit:g} s and did not stop when interrupted; "
            "the kernel was restarted and the session's variables were lost (files were kept)",
        )
        result.notices.append("The kernel was restarted: variables, imports and definitions are gone.")

    def _answer_input(self, prompt: str, result: ExecutionResult,
                      on_call: Callable[[FunctionCall], None] | None) -> None:
        assert self._client is not None
        if not prompt.startswith(CALL_PREFIX):
            # Only our runtime asks for input; anything else gets end-of-file at once.
            self._client.input("\x04")
            return
        reply, record = self._dispatcher.handle_request(prompt[len(CALL_PREFIX):])
        self._client.input(reply)
        result.calls.append(record)
        if on_call is not None:
            on_call(record)

    def _drain_iopub(self, msg_id: str, stdout: CappedText, stderr: CappedText, result: ExecutionResult) -> bool:
        """Collect what a dead kernel sent for this request; True if it sent anything."""
        assert self._client is not None
        session, sock = self._client.session, self._client.iopub_channel.socket
        seen = False
        while True:
            try:
                _, msg = session.recv(sock, mode=zmq.NOBLOCK)
            except Exception:
                return seen
            if msg is None:
                return seen
            if msg["parent_header"].get("msg_id") == msg_id:
                seen = True
                if msg["msg_type"] == "stream":
                    (stdout if msg["content"]["name"] == "stdout" else stderr).write(msg["content"]["text"])

    def _drain_shell(self) -> None:
        """Discard execute replies: results come from iopub; replies must not pile up."""
        if self._client is None:
            return
        session, sock = self._client.session, self._client.shell_channel.socket
        while True:
            try:
                _, msg = session.recv(sock, mode=zmq.NOBLOCK)
            except Exception:
                return
            if msg is None:
                return

    # --- files ------------------------------------------------------------------------------

    def list_files(self) -> list[FileInfo]:
        """Every file under the working directory (asks the kernel)."""
        with self._lock:
            self._check_open()
            self._ensure_kernel()
            return self._list_files_now()

    def _list_files_now(self) -> list[FileInfo]:
        reply = self._execute_silent("", 30.0, user_expressions={"files": _LIST_FILES})
        files = _parse_listing(reply.get("user_expressions", {}).get("files", {}))
        if files is None:
            raise FileTransferError(f"could not list files: {reply}")
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
        if self._client is not None and not self._dead.is_set():
            self._setup_kernel(time.monotonic() + 30.0)

    # --- lifecycle -------------------------------------------------------------------------

    def restart(self) -> None:
        """Fresh interpreter; files and host functions stay. The next result says so."""
        with self._lock:
            self._check_open()
            self._revive()
            self._restarted_notice = (
                "The kernel was restarted on request; variables, imports and definitions are gone."
            )

    def close(self) -> None:
        """Stop the kernel and remove everything the session created. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._client is not None:
                self._client.stop_channels()
                self._client = None
        finally:
            try:
                self._stop_process()
            finally:
                self._dispatcher.close()
                self._finalizer()

    @property
    def closed(self) -> bool:
        return self._closed


class _KernelGoneBeforeStart(Exception):
    """The kernel was found dead before it began the requested code (internal)."""


class _Resources:
    """The kernel client and socket directory of a session, for its finalizer."""

    def __init__(self) -> None:
        self.client: BlockingKernelClient | None = None
        self.socket_dir: str | None = None


def _release(res: _Resources) -> None:
    """Finalizer (close() or garbage collection): must not raise.

    The client's sockets are closed here: left to garbage collection, a ZMQ
    context can block forever in ``term()`` waiting for them.
    """
    client, res.client = res.client, None
    if client is not None:
        try:
            client.stop_channels()
        except Exception:
            pass
    if res.socket_dir:
        shutil.rmtree(res.socket_dir, ignore_errors=True)


def _decode_output(data: dict[str, Any], kind: str) -> Output:
    kept: dict[str, str | bytes] = {}
    for mime, value in data.items():
        if mime == "image/png" and isinstance(value, str):
            try:
                kept[mime] = base64.b64decode(value)
            except ValueError:
                continue
        elif isinstance(value, str):
            kept[mime] = value
        else:
            kept[mime] = json.dumps(value)
    return Output(kept, "result" if kind == "execute_result" else "display")


#: Evaluated in the kernel as a user expression: the working directory's files as JSON.
_LIST_FILES = "__import__('sandbox_runtime').list_files('.')"


def _parse_listing(value: dict[str, Any]) -> list[FileInfo] | None:
    """Files from a ``list_files`` user-expression result (None when it did not run)."""
    if value.get("status") != "ok":
        return None
    rows = json.loads(ast.literal_eval(value["data"]["text/plain"]))
    return [FileInfo(p, s, m) for p, s, m in rows]
