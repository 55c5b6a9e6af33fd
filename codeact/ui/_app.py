"""The HTTP interface of the web UI: a Starlette app (JSON API, an SSE event stream, static page).

Every route sits behind :class:`._security.GuardMiddleware` (token, Host
header, strict headers). Blocking work (the sandbox, the run log) runs in
Starlette's thread pool, so one slow sandbox never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import tempfile
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from sandbox.hostfiles import UnsafePath, check_relative_path

from ..errors import CodeActError, RequestTooLarge, UIError, UploadTooLarge
from ..telemetry import TraceparentMiddleware
from ._history import History
from ._security import INERT_CSP, TOKEN_HEADER, Guard, GuardMiddleware
from ._workspace import Workspace

#: The assets the page loads: name -> content type. Nothing else is served from the package.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "vendor/purify.min.js": "text/javascript; charset=utf-8",
    "vendor/prism-core.min.js": "text/javascript; charset=utf-8",
    "vendor/prism-python.min.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
#: Bytes of a JSON request body (a message, code, an answer to an approval); a longer one is refused.
MAX_JSON_BODY = 4 * 1024 * 1024
#: Seconds between keep-alive comments on an idle event stream (finds dropped connections).
KEEPALIVE = 15.0


def _static(name: str) -> bytes:
    return resources.files("codeact.ui").joinpath("static", *name.split("/")).read_bytes()


def _error(exc: Exception) -> JSONResponse:
    if isinstance(exc, UIError):
        return JSONResponse({"error": str(exc)}, status_code=exc.status)
    if isinstance(exc, KeyError) and isinstance(exc, CodeActError):  # RunNotFound
        return JSONResponse({"error": str(exc)}, status_code=404)
    if isinstance(exc, CodeActError) or type(exc).__module__.split(".")[0] == "sandbox":
        return JSONResponse({"error": str(exc)}, status_code=400)
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)


def _attachment(data: bytes, filename: str, content_type: str = "application/octet-stream") -> Response:
    """Bytes to save, never to render: a download that cannot run anything in this origin."""
    ascii_name = "".join(c if c.isalnum() or c in "._-" else "_" for c in filename)[:150] or "download"
    return Response(data, media_type=content_type, headers={
        "Content-Disposition": f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename[:200])}",
        "Content-Security-Policy": INERT_CSP,
    })


def _inline_image(mime: str, data: bytes) -> Response:
    # SVG from the sandbox may hold script: as an <img> it never runs, and opened directly the
    # sandbox CSP gives it an opaque origin with scripts off.
    return Response(data, media_type=mime, headers={"Content-Security-Policy": INERT_CSP,
                                                    "Cache-Control": "private, max-age=3600"})


def upload_name(raw: str) -> str:
    """A file name from the browser, as the upload's name in the working directory (one plain component)."""
    name = raw.strip()
    if not name or len(name) > 200 or "/" in name or "\\" in name or name.startswith("."):
        raise UIError(f"cannot upload a file named {name[:80]!r}: use a plain file name "
                      "(no folders, not starting with a dot, at most 200 characters)")
    try:
        check_relative_path(name)
    except UnsafePath as exc:
        raise UIError(f"cannot upload a file named {name[:80]!r}: {exc}") from None
    return name


def create_app(workspace: Workspace, history: History, guard: Guard, settings: dict[str, Any],
               upload_dir: Path) -> Any:
    """The ASGI application of one UI server (uploads are spooled in ``upload_dir``)."""
    options = workspace.options
    index = _static("index.html").decode("utf-8").replace("{{TOKEN}}", html.escape(guard.token, quote=True))
    index = index.replace("{{TOKEN_HEADER}}", TOKEN_HEADER)
    assets = {name: _static(name) for name in ASSETS}

    async def page(request: Request) -> Response:
        return Response(index, media_type="text/html; charset=utf-8")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in assets:
            return Response("not found", status_code=404, media_type="text/plain")
        return Response(assets[name], media_type=ASSETS[name], headers={"Cache-Control": "no-cache"})

    async def get_settings(request: Request) -> Response:
        return JSONResponse({**settings, "upload_limit": options.upload_limit, "max_sessions": options.max_sessions,
                             "idle_timeout": options.idle_timeout, "auto_approve": options.auto_approve,
                             "history": history.enabled})

    async def list_sessions(request: Request) -> Response:
        return JSONResponse({"sessions": workspace.summaries(), "max_sessions": options.max_sessions})

    async def create_session(request: Request) -> Response:
        try:
            session = workspace.create()
        except Exception as exc:  # every error becomes a JSON message
            return _error(exc)
        return JSONResponse(session.summary(), status_code=201)

    async def resume_run(request: Request) -> Response:
        """History's "Resume": a new session restored from the saved session this run belongs to."""
        try:
            rid = await run_in_threadpool(history.resolve, request.path_params["rid"])
            session = await run_in_threadpool(workspace.resume, rid, history)
        except Exception as exc:  # every error becomes a JSON message
            return _error(exc)
        return JSONResponse(session.summary(), status_code=201)

    async def close_session(request: Request) -> Response:
        try:
            await run_in_threadpool(workspace.close, request.path_params["sid"])
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"closed": True})

    async def _body(request: Request) -> dict[str, Any]:
        raw = bytearray()
        async for chunk in request.stream():  # bounded as it arrives: the page's text is the page's
            raw += chunk
            if len(raw) > MAX_JSON_BODY:
                raise RequestTooLarge(f"the request body is larger than {MAX_JSON_BODY:,} bytes")
        try:
            data = json.loads(bytes(raw) or b"{}")
        except (ValueError, RecursionError):
            raise UIError("the request body is not JSON") from None
        if not isinstance(data, dict):
            raise UIError("the request body must be a JSON object")
        return data

    async def send_message(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            body = await _body(request)
            text, schema = body.get("text"), body.get("output_schema")
            if not isinstance(text, str) or not isinstance(schema, (str, type(None))):
                raise UIError("send {\"text\": \"...\"} and optionally \"output_schema\": \"<a JSON Schema as text>\"")
            output = None
            if schema is not None and schema.strip():  # a bad or hostile schema is refused before the turn starts
                from ..output import schema_output

                output = schema_output(schema)
            await run_in_threadpool(session.send, text, output)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"started": True}, status_code=202)

    async def run_code(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            code = (await _body(request)).get("code")
            if not isinstance(code, str):
                raise UIError("send {\"code\": \"...\"}")
            await run_in_threadpool(session.run_code, code)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"started": True}, status_code=202)

    async def restart(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            restarted = await run_in_threadpool(session.restart)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"restarted": restarted})

    async def variables(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            listing = session.variables()
        except Exception as exc:
            return _error(exc)
        return JSONResponse(listing)

    async def stop(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            stopped = await run_in_threadpool(session.stop)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"stopped": stopped})

    async def decide(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            allow = (await _body(request)).get("allow")
            if not isinstance(allow, bool):
                raise UIError("send {\"allow\": true} or {\"allow\": false}")
            session.decide(request.path_params["aid"], allow)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"allowed": allow})

    async def events(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
            after = max(0, int(raw))
        except ValueError:
            return _error(UIError("after / Last-Event-ID must be an event number"))
        except Exception as exc:
            return _error(exc)
        session.touch()

        async def stream() -> AsyncIterator[str]:
            nonlocal after
            loop = asyncio.get_running_loop()
            yield "retry: 1000\n\n"
            while True:
                lost, batch = session.events_after(after)
                if lost:
                    note = json.dumps({"type": "Gap", "lost": lost, "message": f"{lost} earlier events are no "
                                       "longer kept in memory; History has the complete runs."})
                    yield f"data: {note}\n\n"
                for seq, data in batch:
                    yield f"id: {seq}\ndata: {data}\n\n"
                    after = seq
                if session.closed or workspace.closing.is_set():
                    return
                wake = asyncio.Event()
                session.add_waiter(loop, wake)
                try:
                    if session.last_seq > after:
                        continue
                    try:
                        await asyncio.wait_for(wake.wait(), KEEPALIVE)
                    except asyncio.TimeoutError:
                        yield ": keep-alive\n\n"
                finally:
                    session.remove_waiter(loop, wake)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def files(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            listing = await run_in_threadpool(session.files)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({**listing, "upload_limit": options.upload_limit})

    async def upload(request: Request) -> Response:
        target: Path | None = None
        try:
            session = workspace.get(request.path_params["sid"])
            name = upload_name(request.path_params["name"])
            limit = options.upload_limit
            declared = request.headers.get("content-length")
            if declared and declared.isdigit() and int(declared) > limit:
                raise UploadTooLarge(f"{name} is {int(declared):,} bytes; the upload limit is {limit:,} bytes "
                                     "(--upload-limit)")
            fd, tmp = tempfile.mkstemp(dir=upload_dir, suffix=PurePosixPath(name).suffix[:20])
            target = Path(tmp)
            size = 0
            with os.fdopen(fd, "wb") as out:
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        raise UploadTooLarge(f"{name} is larger than the upload limit of {limit:,} bytes "
                                             "(--upload-limit)")
                    out.write(chunk)
            info = await run_in_threadpool(session.upload, name, target)
        except Exception as exc:
            return _error(exc)
        finally:
            if target is not None:
                target.unlink(missing_ok=True)
        return JSONResponse(info, status_code=201)

    async def download(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            path = request.path_params["path"]
            data = await run_in_threadpool(session.download, path)
        except Exception as exc:
            return _error(exc)
        return _attachment(data, PurePosixPath(path).name)

    async def blob(request: Request) -> Response:
        try:
            session = workspace.get(request.path_params["sid"])
            mime, data = session.blob(int(request.path_params["n"]))
        except Exception as exc:
            return _error(exc)
        return _inline_image(mime, data)

    async def artifact(request: Request) -> Response:
        from ._artifacts import read_artifact

        path = request.path_params["path"]
        try:
            data = await run_in_threadpool(read_artifact, options.output_root, request.path_params["rid"], path,
                                           options.download_limit)
        except Exception as exc:
            return _error(exc)
        return _attachment(data, PurePosixPath(path).name)

    async def run_files(request: Request) -> Response:
        from ._artifacts import list_artifacts

        try:
            rid = await run_in_threadpool(history.resolve, request.path_params["rid"])
            found = await run_in_threadpool(list_artifacts, options.output_root, [rid])
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"run_id": rid, "artifacts": found})

    async def runs(request: Request) -> Response:
        try:
            listing = await run_in_threadpool(history.runs)
        except Exception as exc:
            return _error(exc)
        return JSONResponse({"enabled": history.enabled, "runs": listing})

    async def run_events(request: Request) -> Response:
        try:
            data = await run_in_threadpool(history.events, request.path_params["rid"])
        except Exception as exc:
            return _error(exc)
        return JSONResponse(data)

    async def notebook(request: Request) -> Response:
        try:
            name, data = await run_in_threadpool(history.notebook, request.path_params["rid"])
        except Exception as exc:
            return _error(exc)
        return _attachment(data, name, "application/x-ipynb+json")

    async def script(request: Request) -> Response:
        try:
            name, text = await run_in_threadpool(history.script, request.path_params["rid"])
        except Exception as exc:
            return _error(exc)
        if request.query_params.get("download"):
            return _attachment(text.encode("utf-8"), name, "text/x-python; charset=utf-8")
        return Response(text, media_type="text/plain; charset=utf-8", headers={"Content-Security-Policy": INERT_CSP})

    async def history_blob(request: Request) -> Response:
        try:
            mime, data = history.blob(int(request.path_params["n"]))
        except Exception as exc:
            return _error(exc)
        return _inline_image(mime, data)

    routes = [
        Route("/", page),
        Route("/static/{name:path}", asset),
        Route("/api/settings", get_settings),
        Route("/api/sessions", list_sessions, methods=["GET"]),
        Route("/api/sessions", create_session, methods=["POST"]),
        Route("/api/sessions/{sid}", close_session, methods=["DELETE"]),
        Route("/api/sessions/{sid}/messages", send_message, methods=["POST"]),
        Route("/api/sessions/{sid}/stop", stop, methods=["POST"]),
        Route("/api/sessions/{sid}/run", run_code, methods=["POST"]),
        Route("/api/sessions/{sid}/restart", restart, methods=["POST"]),
        Route("/api/sessions/{sid}/variables", variables, methods=["GET"]),
        Route("/api/sessions/{sid}/approvals/{aid}", decide, methods=["POST"]),
        Route("/api/sessions/{sid}/events", events),
        Route("/api/sessions/{sid}/files", files, methods=["GET"]),
        Route("/api/sessions/{sid}/files/{name}", upload, methods=["PUT"]),
        Route("/api/sessions/{sid}/files/{path:path}", download, methods=["GET"]),
        Route("/api/sessions/{sid}/blobs/{n:int}", blob),
        Route("/api/runs", runs),
        Route("/api/runs/{rid}", run_events),
        Route("/api/runs/{rid}/notebook", notebook),
        Route("/api/runs/{rid}/script", script),
        Route("/api/runs/{rid}/files", run_files, methods=["GET"]),
        Route("/api/runs/{rid}/resume", resume_run, methods=["POST"]),
        Route("/api/runs/{rid}/artifacts/{path:path}", artifact),
        Route("/api/history/blobs/{n:int}", history_blob),
    ]
    # Each request a span that continues the caller's traceparent (a pass-through when tracing is off).
    return GuardMiddleware(TraceparentMiddleware(Starlette(routes=routes)), guard)
