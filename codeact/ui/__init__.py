"""A local web workspace over CodeAct chat sessions: ``codeact ui``.

The page is a conversation: the task, the model's text as it streams, each
code action highlighted, tool calls, live output, plots and DataFrames in
place, errors with their traceback folded, the answer. Files go in by drag
and drop and come out as downloads; tools that require approval ask on the
page; Stop interrupts the running code and keeps the session's variables.
Beside the chat the analyst has a notebook's tools: a cell that runs their
own code in the same kernel (recorded as the user's code; the model is told
with the next message), a variables panel and a kernel restart.
Several sessions run at once, each in its own sandbox.

It is a Starlette app streaming the agent's own events over server-sent
events to a small static page (no CDN: every asset ships in this package).
Every request needs the token the server prints; everything the sandbox
sends is sanitised or shown as text, under a strict Content-Security-Policy.

Example::

    from codeact import CodeActAgent, OpenAIModel
    from codeact.ui import UIServer, UIOptions

    model = OpenAIModel("gpt-4o-mini")
    server = UIServer(lambda approve: CodeActAgent(model, approve=approve, stream_model=True),
                      options=UIOptions(max_sessions=2))
    with server:
        print("open", server.url)
        server.wait()
"""

from __future__ import annotations

from ._server import UIServer
from ._options import AgentFactory, UIOptions

__all__ = ["AgentFactory", "UIOptions", "UIServer"]
