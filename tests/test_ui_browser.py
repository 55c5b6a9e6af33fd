"""The web UI in a real browser: Playwright driving Debian's Chromium against a real server.

The model's replies come from the local OpenAI-compatible test server through
the real ``openai`` client (streamed); the code runs in real sandboxes (Docker
for the main data-analysis test, Stop and session isolation; the local backend
where isolation is not what a test is about). One browser is shared by every
test; each test gets its own context (fresh cookies) and its own UI server.

Needs ``/usr/bin/chromium`` (``apt-get install chromium``; override the path
with ``CODEACT_CHROMIUM``) and the ``playwright`` package: skipped with a reason
on a developer machine without them, failing in CI (``CI=true``).

``CODEACT_UI_SCREENSHOT=docs/web-ui.png`` makes the data-analysis test save the
screenshot the documentation shows.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from codeact.agent import CodeActAgent
from codeact.models import OpenAIModel
from codeact.runlog import RunLog
from codeact.tools import tool
from codeact.ui import UIOptions, UIServer
from tests.openai_server import OpenAITestServer
from tests.ci import unavailable

CHROMIUM = os.environ.get("CODEACT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
TIMEOUT_MS = 60_000

SALES_CSV = "month,region,revenue\n" + "".join(
    f"2024-{m:02d},{region},{base + m * step}\n"
    for m in range(1, 7) for region, base, step in (("North", 120, 9), ("South", 100, 4), ("West", 80, 6)))


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for this module only: Playwright's sync API keeps an event loop running in this
    thread while it is open, and a later module's asyncio.run() or sync_playwright() would fail."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("browser tests", "the playwright package is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        unavailable("browser tests", f"no Chromium at {CHROMIUM} (apt-get install chromium, or set CODEACT_CHROMIUM)")
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextmanager
def ui_server(tmp_path: Path, llm: OpenAITestServer, *, sandbox: str = "local", tools: tuple[Any, ...] = (),
              options: UIOptions | None = None, api_key: str = "test-key", skills: Any = None,
              agent_options: dict[str, Any] | None = None) -> Iterator[UIServer]:
    """A UI server whose sessions talk to ``llm`` through the real OpenAI client (``agent_options``: more
    CodeActAgent arguments)."""
    log = RunLog(tmp_path / "runs.db")
    out = tmp_path / "artifacts"
    model = OpenAIModel("test-model", base_url=llm.base_url, api_key=api_key)

    def factory(approve: Any) -> CodeActAgent:
        return CodeActAgent(model, list(tools), sandbox=sandbox, approve=approve, log=log, output_dir=out,
                            stream_model=True, execution_timeout=60, skills=skills, **(agent_options or {}))

    settings = {"model": model.name, "base_url": model.base_url, "backend": sandbox,
                "tools": [{"name": t.name, "requires_approval": t.requires_approval} for t in tools],
                "mcp_servers": [], "max_steps": 10, "timeout": 60, "db": str(log.path), "output_dir": str(out)}
    server = UIServer(factory, log=log, options=replace(options or UIOptions(), output_root=out), settings=settings)
    try:
        with server:
            yield server
    finally:
        log.close()


@contextmanager
def open_page(browser: Any, url: str, **context_options: Any) -> Iterator[Any]:
    """A page in a fresh browser context, loaded and ready; fails the test on any script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True, **context_options)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(url)
        page.wait_for_selector("body[data-ready=true]")
        yield page
        assert not errors, errors
    finally:
        context.close()


def send(page: Any, text: str) -> None:
    page.fill("#message", text)
    page.click("#send")


def turn(page: Any, n: int) -> Any:
    """The n-th turn (1-based) of the visible conversation."""
    return page.locator(".conversation:not([hidden]) article.turn").nth(n - 1)


def wait_turn_done(page: Any, n: int) -> Any:
    t = turn(page, n)
    t.locator(".run-status").wait_for()
    page.wait_for_function("() => !document.getElementById('send').disabled")
    return t


def drop_file(page: Any, name: str, data: bytes) -> None:
    """Drag and drop a file onto the page, as a user does."""
    page.evaluate("""([name, b64]) => {
        const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
        const dt = new DataTransfer();
        dt.items.add(new File([bytes], name, { type: 'application/octet-stream' }));
        for (const type of ['dragenter', 'dragover', 'drop']) {
            document.body.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
        }
    }""", [name, base64.b64encode(data).decode()])


def images_loaded(scope: Any) -> list[int]:
    """naturalWidth of every plot image under ``scope`` once each has loaded."""
    scope.locator("img.plot").first.wait_for()
    return scope.evaluate("""async (root) => {
        const imgs = [...root.querySelectorAll('img.plot')];
        await Promise.all(imgs.map((img) => img.complete ? null : new Promise((ok) => {
            img.addEventListener('load', ok); img.addEventListener('error', ok); })));
        return imgs.map((img) => img.naturalWidth);
    }""")


def download(page: Any, link: Any) -> bytes:
    with page.expect_download() as info:
        link.click()
    return Path(info.value.path()).read_bytes()


def code_reply(code: str, prose: str = "") -> str:
    return f"{prose}\n```python\n{code}\n```" if prose else f"```python\n{code}\n```"


# --------------------------------------------------------------------------- the main flow


@pytest.mark.docker
def test_data_analysis_end_to_end_on_docker(browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    """Upload a CSV, ask, see the table and the plot, download the artifact (Docker sandbox)."""
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply(
        "import pandas as pd\nimport matplotlib.pyplot as plt\n"
        "df = pd.read_csv('sales.csv')\n"
        "by_region = df.groupby('region', as_index=False)['revenue'].sum()\n"
        "display(by_region)\n"
        "ax = by_region.plot.bar(x='region', y='revenue', legend=False, title='Revenue by region', figsize=(6, 3))\n"
        "ax.set_ylabel('revenue')\nplt.tight_layout()\nplt.savefig('revenue_by_region.png')\nplt.show()\n"
        "print(f'{len(df)} rows, {df.month.nunique()} months')",
        prose="I'll load sales.csv, total the revenue by region and plot it."))
    openai_server.plan_text("North had the highest revenue over the six months (909), then South (684) "
                            "and West (606). The chart is saved as revenue_by_region.png.")
    with ui_server(tmp_path, openai_server, sandbox="docker") as server, open_page(browser, server.url) as page:
        expect(page.locator("#upload-hint")).to_contain_text("100.0 MB")
        drop_file(page, "sales.csv", SALES_CSV.encode())
        expect(page.locator("#workspace-files")).to_contain_text("sales.csv")
        send(page, "Which region sold most? Plot revenue by region.")
        t = wait_turn_done(page, 1)

        # The model's request carried the uploaded file, read by the real OpenAI client.
        system = openai_server.chat_requests[0].messages[0]["content"]
        assert "sales.csv" in system and "header: month,region,revenue" in system
        assert openai_server.chat_requests[0].stream

        step = t.locator("section.step").first
        expect(step.locator("pre.code")).to_contain_text("groupby('region'")
        assert step.locator("pre.code .token.keyword").count() > 0  # highlighted
        expect(step.locator(".live-output")).to_contain_text("18 rows, 6 months")
        table = step.locator(".html-output table")
        expect(table).to_contain_text("North")
        expect(table).to_contain_text("909")
        assert images_loaded(step) and all(w > 0 for w in images_loaded(step))
        expect(t.locator(".answer")).to_contain_text("North had the highest revenue")
        expect(t.locator(".run-status")).to_contain_text("success")

        # The artifact: listed, downloaded, byte for byte the file the code wrote.
        run_id = server.workspace.sessions()[0].run_ids[0]
        on_host = (tmp_path / "artifacts" / run_id / "revenue_by_region.png").read_bytes()
        assert on_host.startswith(b"\x89PNG")
        link = page.locator("#artifact-files a", has_text="revenue_by_region.png")
        assert download(page, link) == on_host
        in_sandbox = page.locator("#workspace-files a", has_text="revenue_by_region.png")
        assert download(page, in_sandbox) == on_host
        # The plot it both saved and showed is kept once, under the file's name.
        assert download(page, step.locator(".artifacts a", has_text="revenue_by_region.png")) == on_host
        assert step.locator(".artifacts a", has_text="step1_figure1.png").count() == 0

        shot = os.environ.get("CODEACT_UI_SCREENSHOT")
        if shot:
            page.set_viewport_size({"width": 1280, "height": 1180})
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=shot)


def test_approve_and_deny_a_tool_call(browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    sent: list[str] = []

    @tool(requires_approval=True)
    def send_report(to: str, subject: str) -> str:
        """Email the report."""
        sent.append(to)
        return f"sent to {to}"

    code = code_reply("try:\n    print(send_report('boss@example.com', 'Q3 numbers'))\n"
                      "except Exception as exc:\n    print('not sent:', exc)")
    for _ in range(2):
        openai_server.plan_text(code)
        openai_server.plan_text("Done.")
    with ui_server(tmp_path, openai_server, tools=(send_report,)) as server, open_page(browser, server.url) as page:
        send(page, "Email the Q3 report to my boss")
        card = page.locator(".approval.pending")
        expect(card).to_contain_text("send_report")
        expect(card).to_contain_text("to=boss@example.com")
        time.sleep(0.5)
        assert sent == [] and server.workspace.sessions()[0].busy  # the agent waits for the page
        card.locator("button.approve").click()
        t = wait_turn_done(page, 1)
        expect(t.locator(".approval.approved")).to_contain_text("approved")
        expect(t.locator(".tool-call:not(.approval)")).to_contain_text("sent to boss@example.com")
        expect(t.locator(".live-output")).to_contain_text("sent to boss@example.com")

        send(page, "Send it again")
        page.locator(".approval.pending button.deny").click()
        t = wait_turn_done(page, 2)
        expect(t.locator(".approval.denied")).to_contain_text("denied")
        expect(t.locator(".tool-call.failed")).to_contain_text("ApprovalDenied")
        expect(t.locator(".live-output")).to_contain_text("the user did not allow this call to send_report")
        assert sent == ["boss@example.com"]
        # The model read the denial as an error in its observation.
        observation = openai_server.chat_requests[3].messages[-1]["content"]
        assert "not sent:" in observation and "the user did not allow this call to send_report" in observation


@pytest.mark.docker
def test_stop_interrupts_the_code_and_the_session_keeps_its_variables(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("x = 41\nprint('spinning', flush=True)\nwhile True:\n    pass"))
    openai_server.plan_text(code_reply("print(x + 1)"))
    openai_server.plan_text("x + 1 is 42.")
    with ui_server(tmp_path, openai_server, sandbox="docker") as server, open_page(browser, server.url) as page:
        send(page, "Spin forever")
        t = turn(page, 1)
        expect(t.locator(".live-output")).to_contain_text("spinning")
        expect(page.locator("#stop")).to_be_enabled()
        page.click("#stop")
        t = wait_turn_done(page, 1)
        expect(t.locator(".run-status")).to_contain_text("cancelled")
        expect(t.locator("details.error summary")).to_contain_text("KeyboardInterrupt")

        send(page, "What is x + 1?")
        t = wait_turn_done(page, 2)
        expect(t.locator(".live-output")).to_have_text("42\n")
        expect(t.locator(".run-status")).to_contain_text("success")
        assert len(openai_server.chat_requests) == 3  # the stopped turn asked the model nothing more


def test_reload_and_a_dropped_connection_replay_every_event(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    ticks = code_reply("import time\nfor i in range(8):\n    print(f'tick {i}', flush=True)\n    time.sleep(0.4)")
    for _ in range(2):
        openai_server.plan_text(ticks)
        openai_server.plan_text("Ticked.")
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        send(page, "Tick")
        expect(turn(page, 1).locator(".live-output")).to_contain_text("tick 1")
        page.reload()  # mid-run
        page.wait_for_selector("body[data-ready=true]")
        t = wait_turn_done(page, 1)
        session = server.workspace.sessions()[0]
        assert page.evaluate("window.codeactStats.events") == session.last_seq  # every event, once
        assert t.locator(".live-output").inner_text().split() == " ".join(f"tick {i}" for i in range(8)).split()
        expect(t.locator(".user-msg")).to_contain_text("Tick")
        expect(t.locator(".answer")).to_contain_text("Ticked.")

        send(page, "Tick again")
        t = turn(page, 2)
        expect(t.locator(".live-output")).to_contain_text("tick 1")
        before = page.evaluate("window.codeactStats.events")
        for protocol in list(server._server.server_state.connections):  # the network drops every connection
            protocol.loop.call_soon_threadsafe(protocol.transport.abort)
        t = wait_turn_done(page, 2)
        assert t.locator(".live-output").inner_text().split() == " ".join(f"tick {i}" for i in range(8)).split()
        assert page.evaluate("window.codeactStats.events") == session.last_seq > before


@pytest.mark.docker
def test_sessions_are_isolated_and_capped(browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("secret = 'only in A'\nprint(secret)"))
    openai_server.plan_text("Stored.")
    openai_server.plan_text(code_reply("import os\nprint('secret' in globals(), sorted(os.listdir('.')))"))
    openai_server.plan_text("Nothing here.")
    with ui_server(tmp_path, openai_server, sandbox="docker", options=UIOptions(max_sessions=2)) as server, \
            open_page(browser, server.url) as page:
        drop_file(page, "a_only.csv", b"a\n1\n")
        expect(page.locator("#workspace-files")).to_contain_text("a_only.csv")
        send(page, "Remember a secret")
        wait_turn_done(page, 1)

        page.click("#new-session")
        expect(page.locator(".tab")).to_have_count(2)
        send(page, "What do you see?")
        t = wait_turn_done(page, 1)
        expect(t.locator(".live-output")).to_have_text("False []\n")
        expect(page.locator("#workspace-files")).not_to_contain_text("a_only.csv")

        page.click("#new-session")  # a third one: over the cap
        expect(page.locator("#banner")).to_contain_text("close one")
        expect(page.locator(".tab")).to_have_count(2)

        page.locator(".tab.active .tab-close").click()  # close B: its sandbox is freed
        expect(page.locator(".tab")).to_have_count(1)
        expect(turn(page, 1).locator(".live-output")).to_have_text("only in A\n")  # back in A, state intact
        assert len(server.workspace.sessions()) == 1


def test_the_page_is_refused_without_the_token(browser: Any, openai_server: OpenAITestServer,
                                               tmp_path: Path) -> None:
    """Every page, asset and API request without the token (or with a wrong one, or with only the cookie where
    a change is asked) is refused and gives away nothing; a page opened without it renders and runs nothing."""
    from codeact.ui._security import TOKEN_HEADER

    tiny_png = base64.b64encode(bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010100000000376ef9240000000a49444154789c6360000000"
        "0200015d0cf6bb0000000049454e44ae426082")).decode()
    openai_server.plan_text(code_reply(
        "open('out.txt', 'w').write('private numbers')\n"
        f"display({{'image/png': {tiny_png!r}, 'text/plain': 'plot'}}, raw=True)\nprint('private output')"))
    openai_server.plan_text("Done: private answer.")
    with ui_server(tmp_path, openai_server) as server:
        with open_page(browser, server.url) as page:
            send(page, "a private task")
            t = wait_turn_done(page, 1)
            assert images_loaded(t) == [1]
        session = server.workspace.sessions()[0]
        sid, rid = session.id, session.run_ids[0]
        gets = ["/", "/static/app.js", "/static/vendor/purify.min.js", "/static/favicon.svg", "/api/settings",
                "/api/sessions", f"/api/sessions/{sid}/variables", f"/api/sessions/{sid}/events?after=0",
                f"/api/sessions/{sid}/files", f"/api/sessions/{sid}/files/out.txt", f"/api/sessions/{sid}/blobs/1",
                "/api/runs", f"/api/runs/{rid}", f"/api/runs/{rid}/notebook", f"/api/runs/{rid}/script",
                f"/api/runs/{rid}/files", f"/api/runs/{rid}/artifacts/out.txt", "/api/history/blobs/1"]
        changes = [("POST", "/api/sessions"), ("POST", f"/api/sessions/{sid}/messages"),
                   ("POST", f"/api/sessions/{sid}/stop"), ("POST", f"/api/sessions/{sid}/run"),
                   ("POST", f"/api/sessions/{sid}/restart"), ("POST", f"/api/sessions/{sid}/approvals/a1"),
                   ("POST", f"/api/runs/{rid}/resume"), ("PUT", f"/api/sessions/{sid}/files/x.csv"),
                   ("DELETE", f"/api/sessions/{sid}")]
        body = json.dumps({"text": "run this", "code": "print(1)", "allow": True})
        context = browser.new_context()
        try:
            request = context.request
            every = [("GET", path) for path in gets] + changes
            some = [("GET", "/"), ("GET", f"/api/runs/{rid}"), ("POST", f"/api/sessions/{sid}/messages")]
            for wrong, asked in (({}, every), ({TOKEN_HEADER: "not-it"}, some), ({TOKEN_HEADER: ""}, some),
                                 ({"Authorization": "Bearer not-it"}, some)):
                for method, path in asked:
                    response = request.fetch(server.base_url + path, method=method, headers=wrong,
                                             data=body if method != "GET" else None)
                    text = response.text()
                    assert response.status == 403, (method, path, wrong, response.status)
                    assert text.startswith("Forbidden: this request needs the token"), (method, path, text[:200])
                    assert "private" not in text and rid not in text and sid not in text
                    assert response.headers["content-type"].startswith("text/plain")
            # The cookie alone (a page of another site could make the browser send it) changes nothing.
            page = context.new_page()
            page.goto(server.url)
            page.wait_for_selector("body[data-ready=true]")
            for method, path in changes:
                response = request.fetch(server.base_url + path, method=method, data=body)
                assert response.status == 403, (method, path)
            page.close()

            # Opened without the token, nothing renders and nothing runs.
            bare = browser.new_context()
            try:
                page = bare.new_page()
                for path in ("/", f"/api/sessions/{sid}/blobs/1", f"/api/runs/{rid}", "/?token=not-it"):
                    response = page.goto(server.base_url + path)
                    assert response.status == 403
                    assert "needs the token" in page.inner_text("body")
                    assert page.evaluate("document.scripts.length + document.images.length") == 0
                    assert page.evaluate("document.body.dataset.ready") is None
            finally:
                bare.close()
        finally:
            context.close()
        # Nothing was asked of the model, nothing ran, the session is still there with its one turn.
        assert len(openai_server.chat_requests) == 2
        assert [s.id for s in server.workspace.sessions()] == [sid] and session.run_ids == [rid]
        assert not session.busy


def test_hostile_output_does_not_execute(browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    @tool
    def echo(text: str) -> str:
        """Return the text."""
        return text

    hostile_name = '<img src=x onerror="window.__pwned=\'name\'">.csv'
    openai_server.plan_text(code_reply(
        "from IPython.display import HTML, SVG, display\nimport pandas as pd\n"
        "display(HTML('<img src=x onerror=\"window.__pwned=\\'html\\'\"><script>window.__pwned=\"script\"</script>'"
        "'<a href=\"javascript:window.__pwned=1\">link</a><b>bold survives</b>'))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"40\" height=\"40\" "
        "onload=\"window.__pwned=\\'svg-onload\\'\"><script>window.__pwned=\"svg\"</script>"
        "<rect width=\"40\" height=\"40\" fill=\"red\"/></svg>'))\n"
        "display(pd.DataFrame({'cell': ['<img src=x onerror=\"window.__pwned=\\'cell\\'\">', "
        "'<script>window.__pwned=\"cell-script\"</script>']}))\n"
        f"open({hostile_name!r}, 'w').write('a\\n1\\n')\n"
        "globals()['<img src=x onerror=\"window.__pwned=\\'var-name\\'\">'] = "
        "'<img src=x onerror=\"window.__pwned=\\'var-value\\'\">'\n"
        "print('<img src=x onerror=\"window.__pwned=\\'stdout\\'\">')\n"
        "echo('<img src=x onerror=\"window.__pwned=\\'tool\\'\">')\n"
        "final_answer('<img src=x onerror=\"window.__pwned=\\'answer\\'\">')"))
    with ui_server(tmp_path, openai_server, tools=(echo,)) as server, open_page(browser, server.url) as page:
        # CSP violations, as a second line: the sanitiser's own inert parse trips it (harmless), nothing else may.
        violations: list[str] = []
        page.on("console", lambda m: violations.append(m.text) if m.text.startswith("CSP ") else None)
        page.evaluate("""document.addEventListener('securitypolicyviolation', (e) => console.log('CSP ' +
            e.violatedDirective + ' ' + (e.sourceFile || e.documentURI) + ' ' + e.sample))""")
        send(page, "Show me something")
        t = wait_turn_done(page, 1)
        images_loaded(t)
        page.wait_for_timeout(500)  # give any handler a chance to fire
        assert page.evaluate("window.__pwned") is None
        # Shown as text where it is text, and kept as harmless markup where it is HTML.
        expect(t.locator(".html-output b")).to_have_text("bold survives")
        expect(t.locator(".html-output table")).to_contain_text('<img src=x onerror="window.__pwned=')
        expect(t.locator(".live-output")).to_contain_text("<img src=x onerror=")
        expect(t.locator(".tool-call")).to_contain_text("<img src=x onerror=")
        expect(t.locator(".answer")).to_contain_text("<img src=x onerror=")
        expect(page.locator("#workspace-files")).to_contain_text(hostile_name)
        expect(page.locator("#artifact-files")).to_contain_text(hostile_name)
        # The variables panel: names and values the kernel listed, shown as text.
        expect(page.locator("#variables-table .var-name", has_text="<img src=x onerror=")).to_have_count(1)
        expect(page.locator("#variables-table .var-repr", has_text="<img src=x onerror=")).to_have_count(1)
        # No handler attribute, javascript: URL or script element came from the sandbox.
        assert page.evaluate("""() => [...document.querySelectorAll('*')].filter((el) =>
            [...el.attributes].some((a) => a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value))
        ).length""") == 0
        assert page.evaluate("document.scripts.length") == 4  # the page's own
        assert page.locator("img.plot.svg").count() == 1  # the SVG is an image: its script cannot run
        # Opened on its own, the SVG still runs nothing (served with a sandbox CSP).
        svg_url = page.locator("img.plot.svg").get_attribute("src")
        svg_page = page.context.new_page()
        svg_page.goto(server.base_url + svg_url)
        svg_page.wait_for_timeout(300)
        assert svg_page.evaluate("window.__pwned") is None
        svg_page.close()
        assert not [v for v in violations if v.startswith("CSP script") and "/vendor/purify.min.js" not in v], (
            violations)


def test_a_big_step_renders_without_freezing(browser: Any, openai_server: OpenAITestServer,
                                             tmp_path: Path) -> None:
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply(
        "import matplotlib.pyplot as plt\n"
        "for i in range(1000):\n    print(f'line {i:04d} ' + 'x' * 60)\n"
        "for k in range(5):\n    plt.figure(figsize=(4, 3))\n"
        "    plt.plot(range(20), [j * (k + 1) for j in range(20)])\n"
        "    plt.title(f'plot {k}')\n    plt.show()"))
    openai_server.plan_text("Printed and plotted.")
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        send(page, "Print a lot and plot five charts")
        t = wait_turn_done(page, 1)
        lines = t.locator(".live-output").inner_text().splitlines()
        assert len(lines) == 1000 and lines[0].startswith("line 0000") and lines[-1].startswith("line 0999")
        widths = images_loaded(t)
        assert len(widths) == 5 and all(w > 0 for w in widths)
        # Still responsive: typing works, folded details open.
        page.fill("#message", "still here")
        expect(page.locator("#message")).to_have_value("still here")
        t.locator("details.observation summary").click()
        expect(t.locator("details.observation pre")).to_be_visible()


def test_quick_turns_leave_the_page_ready(browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    """A turn can end before the Send request returns: the page must still be ready for the next."""
    from playwright.sync_api import expect

    for answer in ("One.", "Two.", "Three."):
        openai_server.plan_text(answer)
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        for n, answer in enumerate(("One.", "Two.", "Three."), 1):
            send(page, f"question {n}")
            t = wait_turn_done(page, n)
            expect(t.locator(".answer")).to_contain_text(answer)
            expect(page.locator("#stop")).to_be_disabled()
        page.fill("#message", "   ")
        page.click("#send")  # nothing to send: nothing happens
        expect(page.locator("article.turn")).to_have_count(3)


#: Installed in the page: on every animation frame, fetch the session list, the file list and the settings,
#: and open the event stream (read its first chunk, then hang up), as a page polling hard does. At most 24
#: requests are in flight (Chromium itself fails fetches that queue up beyond its limits).
HAMMER = """([sid, header, token]) => {
    const h = window.__hammer = { done: 0, errors: [], streams: 0, stop: false, inFlight: 0 };
    const track = (promise) => { h.inFlight += 1; promise.finally(() => { h.inFlight -= 1; }); };
    const get = (url) => track(fetch(url, { headers: { [header]: token } }).then((r) => r.text().then((body) => {
        if (r.ok) h.done += 1; else h.errors.push(`${url}: ${r.status} ${body.slice(0, 200)}`);
    }), (err) => { h.errors.push(`${url}: ${err}`); }));
    const frame = () => {
        if (h.stop) return;
        if (h.inFlight < 24) {
            for (const url of ['/api/sessions', `/api/sessions/${sid}/files`, '/api/settings']) get(url);
            const ctl = new AbortController();
            track(fetch(`/api/sessions/${sid}/events?after=0`, { headers: { [header]: token }, signal: ctl.signal })
                .then((r) => r.body.getReader().read()).then(() => { h.streams += 1; ctl.abort(); }, () => {}));
        }
        requestAnimationFrame(frame);
    };
    requestAnimationFrame(frame);
}"""


def test_a_turn_runs_whatever_the_page_is_doing(browser: Any, openai_server: OpenAITestServer,
                                                tmp_path: Path) -> None:
    """A page that polls on every frame (and clients holding event streams open) never holds up a turn."""
    from codeact.ui._security import TOKEN_HEADER

    openai_server.plan_text(code_reply("import time\nfor i in range(5):\n    print(f'tick {i}', flush=True)\n"
                                       "    time.sleep(0.2)"))
    openai_server.plan_text("Ticked.")
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        session = server.workspace.sessions()[0]
        # Other clients hold event streams open for the whole turn: each is woken by every event.
        held = [_open_stream(server, session.id) for _ in range(20)]
        try:
            page.evaluate(HAMMER, [session.id, TOKEN_HEADER, server.token])
            send(page, "Tick")
            # Polls on every animation frame, from right after the click until the turn has ended.
            page.wait_for_function("() => document.querySelector('article.turn .run-status') !== null "
                                   "&& !document.getElementById('send').disabled", polling="raf", timeout=TIMEOUT_MS)
            hammer = page.evaluate("window.__hammer.stop = true, window.__hammer")
        finally:
            for conn in held:
                conn.close()
        assert len(openai_server.chat_requests) == 2  # the model got both requests of the turn
        t = turn(page, 1)
        assert "success" in t.locator(".run-status").inner_text()
        assert t.locator(".live-output").inner_text().split() == [
            "tick", "0", "tick", "1", "tick", "2", "tick", "3", "tick", "4"]
        assert not session.busy
        assert hammer["errors"] == [] and hammer["done"] > 0 and hammer["streams"] > 0, hammer["errors"][:5]
        assert page.evaluate("window.codeactStats.events") == session.last_seq  # every event, once


def _open_stream(server: UIServer, sid: str) -> Any:
    """An event stream held open by another client (its first bytes read)."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    conn.request("GET", f"/api/sessions/{sid}/events", headers={"X-CodeAct-Token": server.token})
    response = conn.getresponse()
    assert response.status == 200
    assert response.readline().startswith(b"retry:")
    return conn


def test_a_message_sent_as_the_page_loads_is_sent_with_all_its_events(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    """Typed and sent before the page has its session or event stream: the turn runs and shows every event."""
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("print(6 * 7)"))
    openai_server.plan_text("It is 42.")
    with ui_server(tmp_path, openai_server) as server:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.set_default_timeout(TIMEOUT_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            # app.js has run (deferred scripts run before DOMContentLoaded) but has no session or stream yet.
            page.add_init_script("""document.addEventListener('DOMContentLoaded', () => {
                window.__early = { ready: document.body.dataset.ready || null };
                document.getElementById('message').value = 'six times seven?';
                document.getElementById('send').click();
            })""")
            page.goto(server.url)
            assert page.evaluate("window.__early") == {"ready": None}  # sent before the page was ready
            t = wait_turn_done(page, 1)
            expect(t.locator(".run-status")).to_contain_text("success")
            expect(t.locator(".user-msg")).to_contain_text("six times seven?")
            expect(t.locator(".live-output")).to_have_text("42\n")
            expect(t.locator(".answer")).to_contain_text("It is 42.")
            assert page.input_value("#message") == ""
            session = server.workspace.sessions()[0]
            assert len(server.workspace.sessions()) == 1 and len(openai_server.chat_requests) == 2
            assert page.evaluate("window.codeactStats.events") == session.last_seq  # every event, once
            assert not errors, errors
        finally:
            context.close()


# --------------------------------------------------------------------------- history and settings


def test_history_opens_a_run_read_only_and_exports_it(browser: Any, openai_server: OpenAITestServer,
                                                      tmp_path: Path) -> None:
    import nbformat
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("import pandas as pd\nimport matplotlib.pyplot as plt\n"
                                       "df = pd.DataFrame({'k': ['a', 'b'], 'v': [1, 2]})\ndisplay(df)\n"
                                       "df.plot(x='k', y='v')\nplt.show()"))
    openai_server.plan_text(code_reply("print(df.v.sum())"))
    openai_server.plan_text("The sum is 3.")
    with ui_server(tmp_path, openai_server) as server, \
            open_page(browser, server.url, permissions=["clipboard-read", "clipboard-write"]) as page:
        send(page, "Make a frame and sum it")
        wait_turn_done(page, 1)
        page.click("#show-history")
        row = page.locator("#history-list tr.run").first
        expect(row).to_contain_text("Make a frame and sum it")
        row.click()
        view = page.locator("#history-events")
        expect(page.locator("#history-view")).to_be_visible()
        expect(page.locator("#composer")).to_be_hidden()  # read-only
        expect(view.locator("pre.code").first).to_contain_text("pd.DataFrame")
        expect(view.locator(".html-output table")).to_contain_text("b")
        assert all(w > 0 for w in images_loaded(view))
        expect(view.locator(".answer")).to_contain_text("The sum is 3.")

        notebook = nbformat.reads(download(page, page.locator("#history-notebook")).decode(), as_version=4)
        nbformat.validate(notebook)
        code_cells = [c.source for c in notebook.cells if c.cell_type == "code"]
        first = ("import pandas as pd\nimport matplotlib.pyplot as plt\n"
                 "df = pd.DataFrame({'k': ['a', 'b'], 'v': [1, 2]})\ndisplay(df)\ndf.plot(x='k', y='v')\nplt.show()")
        assert code_cells[0].startswith("# Set up by the export")  # so the notebook runs top to bottom
        assert code_cells[1:] == [first, "print(df.v.sum())"]
        script = download(page, page.locator("#history-script")).decode()
        assert "# --- step 2 ---\nprint(df.v.sum())" in script
        page.click("#history-copy")
        expect(page.locator("#banner")).to_contain_text("clipboard")
        assert page.evaluate("navigator.clipboard.readText()") == script
        compile(script, "run.py", "exec")  # one runnable Python script

        page.click("#history-back")
        expect(page.locator("#composer")).to_be_visible()


def test_codeact_ui_command_serves_the_page_and_hides_the_key(browser: Any, openai_server: OpenAITestServer,
                                                              tmp_path: Path) -> None:
    """`codeact ui` as a user runs it: settings show the model and endpoint, never the key."""
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("print(6 * 7)"))
    openai_server.plan_text("It is 42.")
    secret = "sk-never-show-this-key-123"
    env = {**os.environ, "CODEACT_DB": str(tmp_path / "runs.db"), "CODEACT_OUTPUT_DIR": str(tmp_path / "out")}
    env.pop("CODEACT_SCRIPTED_REPLIES", None)
    proc = subprocess.Popen([sys.executable, "-m", "codeact.cli", "ui", "--no-browser", "--port", "0",
                             "--backend", "local", "-m", "test-model", "--base-url", openai_server.base_url,
                             "--api-key", secret], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            url = next((m.group(0) for line in lines if (m := re.search(r"http://\S+\?token=\S+", line))), None)
            time.sleep(0.1)
        assert url, "".join(lines)
        with open_page(browser, url) as page:
            send(page, "six times seven?")
            t = wait_turn_done(page, 1)
            expect(t.locator(".live-output")).to_have_text("42\n")
            page.click("#show-settings")
            table = page.locator("#settings-table")
            expect(table).to_contain_text("test-model")
            expect(table).to_contain_text(openai_server.base_url)
            expect(table).to_contain_text("local")
            assert secret not in page.content()
            settings = page.evaluate("""async () => (await fetch('/api/settings')).text()""")
            assert secret not in settings and json.loads(settings)["model"] == "test-model"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode in (0, 130), "".join(lines)
    assert secret not in "".join(lines)


# --------------------------------------------------------------------------- the analyst's own hand


def variable(page: Any, name: str) -> Any:
    """The variables panel's row of ``name``."""
    return page.locator("#variables-table tr.variable").filter(
        has=page.locator(".var-name", has_text=re.compile(f"^{re.escape(name)}$")))


def test_the_analyst_runs_code_sees_variables_and_the_model_is_told(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    """A cell of the analyst's own runs in the session's kernel (the run log keeps it as the user's code),
    the variables panel follows every step, the model's next message says what the analyst ran and saw,
    and the Files panel follows the run opened in History."""
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("y = x + 1\nopen('theirs.txt', 'w').write('theirs')\nprint('y is', y)"))
    openai_server.plan_text(code_reply("import time\nprint('waiting', flush=True)\nwhile True:\n    time.sleep(0.1)"))
    cell = "x = 41\nopen('mine.txt', 'w').write('mine')\nprint('from me', x)"
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        expect(page.locator("#variables-note")).to_contain_text("No kernel yet")
        page.click("#mode-code")
        expect(page.locator("#message")).to_be_hidden()
        page.fill("#cell", cell)
        page.press("#cell", "Shift+Enter")
        t = wait_turn_done(page, 1)
        expect(t.locator(".user-msg")).to_contain_text("You ran code")
        expect(t.locator(".step-label")).to_have_text("Your code")
        expect(t.locator("pre.code")).to_contain_text("x = 41")
        expect(t.locator(".live-output")).to_have_text("from me 41\n")
        expect(t.locator(".run-status")).to_contain_text("success · your code")
        expect(page.locator("#cell")).to_have_value(cell)  # kept, as in a notebook
        expect(variable(page, "x").locator(".var-type")).to_have_text("int")
        expect(variable(page, "x").locator(".var-repr")).to_have_text("41")
        expect(page.locator("#workspace-files")).to_contain_text("mine.txt")
        assert openai_server.chat_requests == []  # the model was not asked anything

        page.click("#mode-message")
        send(page, "What is y?")
        t = turn(page, 2)
        expect(t.locator(".live-output").nth(1)).to_contain_text("waiting")
        # Refreshed after step 1, while the turn still runs (step 2 never ends by itself).
        expect(variable(page, "y").locator(".var-repr")).to_have_text("42")
        assert t.locator(".run-status").count() == 0
        page.click("#stop")
        expect(wait_turn_done(page, 2).locator(".run-status")).to_contain_text("cancelled")
        told = openai_server.chat_requests[0].messages[-1]["content"]
        assert told.endswith("What is y?") and "The user ran this code" in told
        assert cell in told and "from me 41" in told
        assert "The user ran" not in openai_server.chat_requests[1].messages[-1]["content"]  # told once

        records = server.history.log.list_runs()
        assert [r.agent for r in records] == ["codeact", "user"]
        assert server.history.log.get_run(records[1].id).steps[0].code == cell

        # History: the Files panel shows the files of the run on screen, not the session's.
        page.click("#show-history")
        row = page.locator("#history-list tr.run", has_text="Your code:")
        expect(row).to_contain_text("x = 41")
        row.click()
        expect(page.locator("#files-title")).to_have_text(f"Files of run {records[1].id}")
        expect(page.locator("#variables-panel")).to_be_hidden()
        expect(page.locator("#session-files")).to_be_hidden()
        expect(page.locator("#artifact-files")).to_have_text(re.compile(r"^\s*mine\.txt"))
        assert download(page, page.locator("#artifact-files a", has_text="mine.txt")) == b"mine"
        expect(page.locator("#history-events .user-msg")).to_contain_text("You ran code")
        page.click("#show-history")
        page.locator("#history-list tr.run", has_text="What is y?").click()
        expect(page.locator("#files-title")).to_have_text(f"Files of run {records[0].id}")
        expect(page.locator("#artifact-files")).to_contain_text("theirs.txt")
        expect(page.locator("#artifact-files")).not_to_contain_text("mine.txt")
        page.click("#history-back")
        expect(page.locator("#files-title")).to_have_text("Files")
        expect(page.locator("#workspace-files")).to_contain_text("mine.txt")
        expect(page.locator("#workspace-files")).to_contain_text("theirs.txt")
        expect(page.locator("#variables-panel")).to_be_visible()


def test_a_cell_is_stopped_like_the_agents_code_and_restart_asks_first(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    openai_server.plan_text(code_reply("print(sorted(k for k in globals() if not k.startswith('_')))"))
    openai_server.plan_text("Nothing of yours is left.")
    with ui_server(tmp_path, openai_server) as server, open_page(browser, server.url) as page:
        page.click("#mode-code")
        page.fill("#cell", "import time\nkeep = 'still here'\nopen('kept.txt', 'w').write('x')\n"
                           "print('looping', flush=True)\nwhile True:\n    time.sleep(0.1)")
        page.click("#run-cell")
        t = turn(page, 1)
        expect(t.locator(".live-output")).to_contain_text("looping")
        expect(page.locator("#restart-kernel")).to_be_disabled()  # not while code runs
        page.click("#stop")
        t = wait_turn_done(page, 1)
        expect(t.locator(".run-status")).to_contain_text("cancelled")
        expect(t.locator("details.error summary")).to_contain_text("KeyboardInterrupt")
        expect(variable(page, "keep").locator(".var-repr")).to_have_text("'still here'")  # the kernel kept it

        page.click("#restart-kernel")
        dialog = page.locator("#restart-dialog")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("Files in the working directory stay")
        dialog.locator("[data-close]").click()  # changed their mind
        expect(dialog).to_be_hidden()
        page.wait_for_timeout(500)
        expect(variable(page, "keep")).to_have_count(1)
        assert page.locator(".note.restart").count() == 0

        page.click("#restart-kernel")
        page.click("#restart-confirm")
        expect(page.locator(".note.restart")).to_contain_text("Kernel restarted")
        expect(page.locator("#variables-note")).to_have_text("No variables.")
        expect(variable(page, "keep")).to_have_count(0)
        expect(page.locator("#workspace-files")).to_contain_text("kept.txt")  # files stay

        page.click("#mode-message")
        send(page, "What is defined now?")
        t = wait_turn_done(page, 2)
        expect(t.locator(".live-output")).not_to_contain_text("keep")
        told = openai_server.chat_requests[0].messages[-1]["content"]
        assert "looping" in told and "interrupted" in told  # the stopped cell ...
        assert "The user restarted the kernel" in told  # ... then the restart
        assert len(server.history.log.list_runs()) == 2


def test_a_skill_save_shows_its_whole_code_and_diff(browser: Any, openai_server: OpenAITestServer,
                                                    tmp_path: Path) -> None:
    """Approving a skill means reading it: the page shows all of its code (past the 2,000 characters an
    argument gets) and, when it replaces one, the diff, as text."""
    from playwright.sync_api import expect

    from codeact.skills import SkillStore

    store = SkillStore(tmp_path / "skills")
    body = "".join(f"    total += {i}  # step {i:02d} <img src=x onerror=\"window.__pwned='skill'\">\n"
                   for i in range(60))

    def skill(last: str) -> str:
        return (f"def summarize(values):\n    '''Add the values up, with a fixed offset.'''\n    total = 0\n{body}"
                f"    {last}\n\nsave_skill(summarize)\nprint('saved')")

    first, second = skill("return total + sum(values)"), skill("return total * 2 + sum(values)")
    assert len(first) > 4000
    openai_server.plan_text(code_reply(first))
    openai_server.plan_text("Saved.")
    openai_server.plan_text(code_reply(second))
    openai_server.plan_text("Replaced.")
    with ui_server(tmp_path, openai_server, skills=store) as server, open_page(browser, server.url) as page:
        send(page, "Save a summarize skill")
        card = page.locator(".approval.pending")
        expect(card.locator(".skill-title")).to_contain_text("Save skill summarize(values)")
        code = card.locator("pre.skill-code")
        expect(code).to_contain_text("return total + sum(values)")  # the end of it, far past 2,000 characters
        assert code.inner_text().count("total += ") == 60
        assert code.evaluate("(e) => getComputedStyle(e).overflowY") == "auto"  # scrollable
        assert card.locator("pre.skill-diff").count() == 0  # a new skill has no diff
        card.locator("button.approve").click()
        wait_turn_done(page, 1)
        assert "return total + sum(values)" in store.get("summarize").source

        send(page, "Make it count twice")
        card = page.locator(".approval.pending")
        expect(card.locator(".skill-title")).to_contain_text("Replace skill summarize(values)")
        expect(card.locator("pre.skill-diff .add")).to_contain_text("+    return total * 2 + sum(values)")
        expect(card.locator("pre.skill-diff .del")).to_contain_text("-    return total + sum(values)")
        card.locator("button.deny").click()
        wait_turn_done(page, 2)
        assert "return total + sum(values)" in store.get("summarize").source  # denied: unchanged
        page.wait_for_timeout(300)
        assert page.evaluate("window.__pwned") is None
        assert page.evaluate("""() => [...document.querySelectorAll('*')].filter((el) =>
            [...el.attributes].some((a) => a.name.startsWith('on'))).length""") == 0
        assert len(server.workspace.sessions()) == 1


def test_the_schema_box_types_the_answer_and_shows_it_as_json(browser: Any, openai_server: OpenAITestServer,
                                                              tmp_path: Path) -> None:
    from playwright.sync_api import expect

    hostile = '<img src=x onerror="window.__pwned=1">'
    schema = {"title": f"Growth {hostile}", "type": "object", "required": ["region", "growth"],
              "properties": {"region": {"type": "string"}, "growth": {"type": "number"}}}
    openai_server.plan_text(code_reply(f"final_answer({{'region': {hostile!r}, 'growth': '12'}})"))
    openai_server.plan_text(code_reply(f"final_answer({{'region': {hostile!r}, 'growth': 12}})"))
    with ui_server(tmp_path, openai_server, sandbox="restricted") as server, open_page(browser, server.url) as page:
        page.click("#schema-box summary")
        page.fill("#output-schema", '{"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "https://example.org/x"}}}')
        send(page, "Fastest region?")
        expect(page.locator("#banner")).to_contain_text("refers outside itself")  # refused: no turn started
        assert not openai_server.chat_requests
        page.fill("#output-schema", json.dumps(schema))
        send(page, "Fastest region?")
        t = wait_turn_done(page, 1)
        answer = t.locator(".answer")
        expect(answer.locator(".who")).to_have_text(f"Answer (JSON, valid against JSON Schema `Growth {hostile}`)")
        expect(answer.locator("pre.json-answer")).to_have_text(json.dumps({"region": hostile, "growth": 12},
                                                                          indent=2))
        assert page.evaluate("window.__pwned") is None
        assert answer.locator("img").count() == 0  # the markup is text
        assert '"growth": {"type": "number"}' in openai_server.chat_requests[0].messages[1]["content"]


# --------------------------------------------------------------------------- hostile output in the newer parts

#: A payload that sets ``window.__pwned`` to ``tag`` if it ever runs.
def xss(tag: str) -> str:
    return f'<img src=x onerror="window.__pwned=\'{tag}\'">'


#: The parent's code: images the page cannot show (garbage after a PNG signature, a 20000x20000 header, an SVG
#: with script), one it can, markup and control characters in output, file and variable names, and a child
#: agent called with markup in its task.
HOSTILE_STEP = f"""
import base64, struct, zlib
from IPython.display import HTML, display

def chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))

def png(width, height, rows):
    head = struct.pack('>IIBBBBB', width, height, 1, 0, 0, 0, 0)
    return b'\\x89PNG\\r\\n\\x1a\\n' + chunk(b'IHDR', head) + chunk(b'IDAT', zlib.compress(rows)) + chunk(b'IEND', b'')

def show(mime, data, alt):
    display({{mime: data if isinstance(data, str) else base64.b64encode(data).decode(), 'text/plain': alt}}, raw=True)

show('image/png', png(8, 8, b'\\x00\\xaa' * 8), {xss('alt')!r})
show('image/png', b'\\x89PNG\\r\\n\\x1a\\n' + b'<script>window.__pwned="png"</script>' * 40, 'garbage')
show('image/png', png(20000, 20000, b'\\x00' * 2501), 'huge')
show('image/png', png(8, 8, b'')[:33] + chunk(b'IEND', b''), 'no pixel data')
show('image/svg+xml', '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
     'width="20000" height="20000" onload="window.__pwned=1"><script>window.__pwned=2</script>'
     '<foreignObject width="99" height="99"><body xmlns="http://www.w3.org/1999/xhtml">'
     '<img src="x" onerror="window.__pwned=4"/></body>'
     '</foreignObject><a xlink:href="javascript:window.__pwned=3"><rect width="99" height="99"/></a></svg>', 'svg')
display(HTML('<script>window.__pwned="html"</script><b>bold</b>'))
for name in ({xss('file')!r} + '.csv', 'report\\u202egnp.exe', 'bell\\x07\\x1b[31mred\\r.txt'):
    open(name, 'w').write('x')
globals()['\\u202eevil'] = '\\x1b[2J\\u202e' + {xss('repr')!r}
print('<script>window.__pwned="stdout"</script>\\x1b[31mred\\x1b[0m|\\u202eesrever|\\x00|' + 'o' * 3000)
print('child said:', researcher({xss('task')!r} + '\\u202e'))
"""


@pytest.mark.docker
def test_hostile_output_in_images_child_runs_and_compaction_on_docker(
        browser: Any, openai_server: OpenAITestServer, tmp_path: Path) -> None:
    """The newer parts of the page (images also shown to the model, an agent called as a tool, the condensed
    line) with hostile sandbox output: nothing runs, text shows as text, names show their control characters,
    images that cannot be shown say so, and the page stays responsive."""
    from playwright.sync_api import expect

    @tool(requires_approval=True)
    def lookup(query: str) -> str:
        """Look it up."""
        return f"found {query}"

    model = OpenAIModel("test-model", base_url=openai_server.base_url, api_key="test-key")
    child = CodeActAgent(model, [lookup], sandbox="docker", log=tmp_path / "runs.db",
                         output_dir=tmp_path / "artifacts", execution_timeout=60)
    researcher = child.as_tool(name="researcher", description="Looks things up.")
    openai_server.plan_text(code_reply(HOSTILE_STEP))
    child_answer = xss("child") + " \u202edlihc"
    openai_server.plan_text(code_reply(  # the child's reply: a call that needs the user's approval, then its answer
        f"print(lookup({xss('query') + chr(0x202e) + 'moc.knab'!r}))\nfinal_answer({child_answer!r})"))
    openai_server.plan_text("Shown.")
    openai_server.plan_text("Second.")
    dialogs: list[str] = []
    with ui_server(tmp_path, openai_server, sandbox="docker", tools=(researcher,),
                   agent_options={"history_budget": 1500}) as server, open_page(browser, server.url) as page:
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        send(page, "Show me everything")
        # The child's call waits for the user in the parent's step (not in a turn of its own), its argument as
        # it is passed: markup as text, the override written out.
        card = page.locator(".approval.pending")
        expect(card).to_contain_text("asked by the agent codeact > researcher")
        expect(card.locator(".tool-args")).to_have_text(f"(query={xss('query')}\\u202emoc.knab)")
        assert card.evaluate("(c) => c.closest('article.turn') === document.querySelector('article.turn')")
        expect(page.locator(".conversation:not([hidden]) article.turn")).to_have_count(1)
        card.locator("button.approve").click()
        t = wait_turn_done(page, 1)
        expect(t.locator(".approval.approved")).to_contain_text("approved")
        send(page, "And again")
        t2 = wait_turn_done(page, 2)
        page.wait_for_timeout(500)  # give any handler a chance to fire
        assert page.evaluate("window.__pwned") is None and dialogs == []
        assert page.evaluate("document.scripts.length") == 4  # the page's own
        assert page.evaluate("""() => [...document.querySelectorAll('*')].filter((el) =>
            [...el.attributes].some((a) => a.name.startsWith('on') || /^\\s*javascript:/i.test(a.value))
        ).length""") == 0

        # Images: the plot is shown (and went to the model); the others say why they are not shown.
        step = t.locator("section.step").first
        notes = step.locator(".image-unshown")
        expect(notes).to_have_count(3)
        expect(notes.nth(0)).to_contain_text("image/png not shown: not a PNG, JPEG, GIF or WebP image")
        expect(notes.nth(1)).to_contain_text("image/png not shown: too many pixels (Image size (400000000 pixels)")
        expect(notes.nth(2)).to_contain_text("image/png not shown: the browser could not load or decode it")
        assert images_loaded(step) == [8, 20000]  # the plot, and the SVG (drawn at the page's size)
        expect(step.locator("img.plot").first).to_have_attribute("alt", xss("alt"))
        sent = openai_server.chat_requests[2].messages[-1]["content"]
        assert [p["type"] for p in sent].count("image_url") == 1
        assert "too many pixels" in sent[0]["text"]
        # Output, HTML and the child's answer: markup as text, ANSI gone.
        live = step.locator(".live-output")
        expect(live).to_contain_text('<script>window.__pwned="stdout"</script>red|')
        assert "\x1b" not in live.inner_text()
        expect(step.locator(".html-output b")).to_have_text("bold")
        # The agent called as a tool: its run folded under the parent's step, not a turn of its own.
        child_run = step.locator("details.child-run")
        expect(child_run.locator("summary")).to_contain_text("(researcher): success")
        child_run.locator("summary").click()
        # Its task and answer as text, the bidi override written out (what the page shows is what was passed).
        expect(child_run.locator(".tool-args")).to_have_text(f"(task={xss('task')}\\u202e)")
        expect(child_run.locator(".tool-result")).to_have_text(f"→ {xss('child')} \\u202edlihc")
        assert "\u202e" not in child_run.inner_text()
        expect(page.locator(".conversation:not([hidden]) article.turn")).to_have_count(2)
        runs = server.history.log.list_runs()
        parent_id = server.workspace.sessions()[0].run_ids[0]
        (child_record,) = [r for r in runs if r.parent_run_id == parent_id]
        expect(child_run.locator("summary")).to_contain_text(child_record.id)
        # Names: markup shown as text; names with control or bidi characters never listed (refused at the
        # boundary), a variable's shown escaped.
        files = page.locator("#session-files")
        expect(files).to_contain_text(xss("file") + ".csv")
        assert "\u202e" not in files.inner_text() and "gnp.exe" not in files.inner_text()
        expect(variable(page, "\\u202eevil")).to_have_count(1)
        assert "\u202e" not in page.locator("#variables-table").inner_text()
        # The condensed line.
        expect(t2.locator(".compacted")).to_contain_text("earlier turns condensed")
        # Still responsive.
        page.fill("#message", "still here")
        expect(page.locator("#message")).to_have_value("still here")

        # History lists the child run under its parent and shows both the same way.
        page.click("#show-history")
        rows = page.locator("#history-list tr.run")
        expect(rows).to_have_count(3)
        assert [rows.nth(i).get_attribute("data-run") for i in range(3)] == [
            server.workspace.sessions()[0].run_ids[1], parent_id, child_record.id]
        expect(rows.nth(2)).to_have_class(re.compile(r"\bchild\b"))
        expect(rows.nth(2).locator(".task")).to_have_text(
            f"↳ {child_record.agent} for run {parent_id}: {xss('task')}\u202e")
        page.locator("#history-list tr.run", has_text="Show me everything").click()
        view = page.locator("#history-events")
        expect(view.locator("details.child-run summary")).to_contain_text(child_record.id)
        expect(view.locator(".image-unshown")).to_have_count(3)
        page.click("#show-history")
        page.locator("#history-list tr.run", has_text="And again").click()
        expect(view.locator(".compacted")).to_contain_text("earlier turns condensed")
        assert page.evaluate("window.__pwned") is None and dialogs == []
