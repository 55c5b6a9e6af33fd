"""The web UI server: uvicorn serving the app on a socket it binds itself, in this thread or another."""

from __future__ import annotations

import contextlib
import errno
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._app import create_app
from ._history import History
from ._security import Guard, allowed_hosts_for, new_token
from ._options import AgentFactory, UIOptions
from ._workspace import Workspace


class UIServer:
    """A local web workspace over CodeAct chat sessions (``codeact ui``).

    Args:
        agent_factory: builds one session's agent; called with the approver the
            page answers, which it must pass as ``CodeActAgent(approve=...)``.
        host: interface to listen on (loopback by default).
        port: port to listen on; 0 picks a free one.
        token: the secret every request needs; a fresh random one by default.
            Binding to anything but loopback requires an explicit token.
        log: the :class:`~codeact.runlog.RunLog` the agents record into (History reads it), or None.
        options: session limits (:class:`UIOptions`).
        settings: what the settings panel shows (model, endpoint, backend, tools, MCP servers);
            never put the API key here.
        allowed_hosts: extra host names the ``Host`` header may carry (a DNS name for the machine).

    Example::

        from codeact import CodeActAgent, OpenAIModel
        from codeact.ui import UIServer

        model = OpenAIModel("gpt-4o-mini")
        with UIServer(lambda approve: CodeActAgent(model, approve=approve, stream_model=True)) as server:
            print("open", server.url)
            server.wait()
    """

    def __init__(self, agent_factory: AgentFactory, *, host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None, log: Any = None, options: UIOptions | None = None,
                 settings: dict[str, Any] | None = None, allowed_hosts: tuple[str, ...] = ()) -> None:
        loopback = host in ("127.0.0.1", "localhost", "::1")
        if not loopback and not token:
            raise ConfigError(f"listening on {host} makes the UI reachable from other machines: set a token "
                              "explicitly (--token or CODEACT_UI_TOKEN), or keep the default --host 127.0.0.1")
        self.host = host
        self.options = options or UIOptions()
        self.workspace = Workspace(agent_factory, self.options)
        self.history = History(log)
        self.settings = dict(settings or {})
        self._sock = _bind(host, port)
        self.port = self._sock.getsockname()[1]
        self.guard = Guard(token or new_token(), self.port, allowed_hosts_for(host, allowed_hosts))
        self._upload_dir = Path(tempfile.mkdtemp(prefix="codeact-ui-"))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def token(self) -> str:
        return self.guard.token

    @property
    def base_url(self) -> str:
        """``http://host:port`` as a browser on this machine reaches it."""
        shown = "127.0.0.1" if self.host in ("0.0.0.0", "", "localhost") else self.host
        shown = "[::1]" if shown in ("::", "::1") else shown
        return f"http://{shown}:{self.port}"

    @property
    def url(self) -> str:
        """The address to open: it carries the token (the page trades it for a cookie)."""
        return f"{self.base_url}/?token={self.token}"

    def _make_server(self) -> Any:
        import uvicorn

        app = create_app(self.workspace, self.history, self.guard, self.settings, self._upload_dir)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=3, ws="none")
        return uvicorn.Server(config)

    def start(self) -> UIServer:
        """Serve on a background thread; returns when the server accepts connections."""
        self._server = self._make_server()
        self.workspace.start()
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True,
                                        name="codeact-ui-server")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the UI server did not start")
            time.sleep(0.02)
        return self

    def serve(self) -> None:
        """Serve on this thread until Ctrl-C (SIGINT/SIGTERM); then close every session."""
        self._server = self._make_server()
        self.workspace.start()
        try:
            self._server.run(sockets=[self._sock])
        finally:
            self.close()

    def wait(self) -> None:
        """Block until the background server stops (Ctrl-C ends the wait)."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(0.5)

    def close(self) -> None:
        """Stop serving, close every session (and its sandbox). Idempotent."""
        self.workspace.closing.set()
        for session in self.workspace.sessions():
            session.wake_all()  # event streams end, so the server can stop
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(15)
        self.workspace.close_all()
        with contextlib.suppress(OSError):
            self._sock.close()
        shutil.rmtree(self._upload_dir, ignore_errors=True)

    def __enter__(self) -> UIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is in use; choose another with --port "
                              "(--port 0 picks a free one)") from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock
