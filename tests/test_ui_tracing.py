"""`codeact ui` traces: a turn started by an HTTP request that carries a W3C ``traceparent`` continues the caller's
trace (the request's SERVER span, then the agent's run under it), through the real UI server over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

from typing import Any

import pytest

from tests.test_ui import request, serve, token_header, wait_idle


@pytest.mark.filterwarnings("ignore::UserWarning")  # the local backend's warning
def test_a_turn_continues_the_traceparent_of_the_request_that_started_it(tmp_path: Path, spans: Any) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    replies = ["```python\nprint(6 * 7)\n```", "```python\nfinal_answer(42)\n```"]
    with serve(tmp_path, replies) as server:
        sid = server.workspace.create().id
        headers = {**token_header(server), "Content-Type": "application/json",
                   "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
        status, _, body = request(server, "POST", f"/api/sessions/{sid}/messages", headers=headers,
                                  body=json.dumps({"text": "what is six times seven?"}).encode())
        assert status == 202, body
        wait_idle(server.workspace.get(sid))
        # a request without one starts a trace of its own
        request(server, "GET", "/api/sessions", headers=token_header(server))
    finished = list(spans.get_finished_spans())
    by_id = {s.context.span_id: s for s in finished}
    [run] = [s for s in finished if s.name == "invoke_agent codeact"]
    assert format(run.context.trace_id, "032x") == trace_id
    # the run's parent is the request's SERVER span, whose parent is the caller's span
    server_span = by_id[run.parent.span_id]
    assert "messages" in server_span.name and format(server_span.parent.span_id, "016x") == "00f067aa0ba902b7"
    actions = [s for s in finished if s.name == "execute_code"]
    assert actions and all(a.parent.span_id == run.context.span_id for a in actions)
    listing = [s for s in finished if s is not server_span and s.parent is None]
    assert listing and all(format(s.context.trace_id, "032x") != trace_id for s in listing)
