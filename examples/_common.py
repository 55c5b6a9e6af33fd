"""Plumbing the examples share: command-line options, choosing a model, printing a run.

Each example is a script with a ``main(argv)`` that returns the
:class:`codeact.events.RunResult`. With a model configured
(``CODEACT_MODEL``, plus ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` for the
endpoint) it asks that model; with ``--scripted``, or when no model is
configured, it replays hand-written replies through a
:class:`codeact.ScriptedModel`. The replies are ordinary model output: their
code runs for real in the sandbox and calls the real tools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

from codeact import CodeActAgent, OpenAIModel, ScriptedModel
from codeact.events import CodeAction, ErrorEvent, Event, ModelOutput, Observation, RunFinished, RunResult, ToolCall
from codeact.parsing import parse_reply

DATA = Path(__file__).resolve().parent / "data"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--scripted", action="store_true",
                   help="replay the built-in replies instead of asking a model"
                        " (the default when CODEACT_MODEL is unset)")
    p.add_argument("--model", help="model name (default: $CODEACT_MODEL)")
    p.add_argument("--sandbox", default="auto", choices=["auto", "docker", "local"],
                   help="where the code runs (default: docker when it is available, else local)")
    p.add_argument("--output-dir", help="where artifacts go (default: the codeact data directory)")
    p.add_argument("--log", help="run log database (default: the codeact run log)")
    p.add_argument("--max-steps", type=int, default=10)
    p.add_argument("--quiet", action="store_true", help="print only the answer")
    return p


def choose_model(args: argparse.Namespace, replies: Sequence[Any]) -> Any:
    """A real model when one is configured and --scripted is not given, else the scripted replies."""
    name = args.model or os.environ.get("CODEACT_MODEL", "").strip()
    if args.scripted or not name:
        if not args.scripted and not args.quiet:
            print("(no CODEACT_MODEL set: replaying the scripted replies; see examples/README.md)\n")
        return ScriptedModel(replies, name="scripted-example")
    return OpenAIModel(name)


def make_agent(
    args: argparse.Namespace, replies: Sequence[Any], tools: Sequence[Any] = (), **options: Any
) -> CodeActAgent:
    return CodeActAgent(
        choose_model(args, replies),
        tools,
        sandbox=args.sandbox,
        max_steps=args.max_steps,
        output_dir=args.output_dir,
        log=args.log or True,
        **options,
    )


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(text: str, lines: int = 25) -> str:
    rows = text.splitlines()
    if len(rows) <= lines:
        return text
    return "\n".join(rows[: lines - 5] + [f"... ({len(rows) - lines + 5} more lines) ..."] + rows[-5:])


def print_event(event: Event) -> None:
    if isinstance(event, ModelOutput):
        print(f"── step {event.step} " + "─" * 50)
        prose = parse_reply(event.text).prose
        if prose:
            print(_indent(_short(prose, 8)))
    elif isinstance(event, CodeAction):
        print("  code:")
        print(_indent(event.code))
    elif isinstance(event, ToolCall):
        args = ", ".join(f"{k}={_clip(repr(v), 40)}" for k, v in event.arguments.items())
        size = len(json.dumps(event.result, ensure_ascii=False))
        outcome = f"error: {event.error}" if event.error else f"{size} chars"
        print(f"  tool call: {event.name}({args}) -> {outcome}")
    elif isinstance(event, Observation):
        print("  observation:")
        print(_indent(_short(event.text)))
        for name in event.artifacts:
            print(f"  artifact: {name}")
    elif isinstance(event, ErrorEvent):
        print(f"  [{event.kind}] {event.message}")


def answer_text(answer: Any) -> str:
    if isinstance(answer, str):
        return answer
    if hasattr(answer, "model_dump"):  # a typed answer (output_type=, a pydantic model)
        answer = answer.model_dump(mode="json")
    return json.dumps(answer, ensure_ascii=False, indent=2)


def run(agent: CodeActAgent, task: str, *, files: Sequence[str | os.PathLike[str]] = (),
        quiet: bool = False, output_type: Any = None) -> RunResult:
    """Run ``task``, printing each step unless ``quiet``; print and return the result.

    ``output_type``: the type the answer must have (``result.answer`` is one when the run succeeds)."""
    result: RunResult | None = None
    if not quiet:
        print(f"Task: {task}\n")
    for event in agent.stream(task, files=files, output_type=output_type):
        if isinstance(event, RunFinished):
            result = event.result
        elif not quiet:
            print_event(event)
    assert result is not None
    if not quiet:
        usage = result.usage
        print("─" * 60)
        print(f"status: {result.status}, steps: {len(result.steps)}, {result.duration:.1f}s, "
              f"tokens: {usage.input_tokens} in / {usage.output_tokens} out, run id: {result.run_id}")
        for path in result.artifacts:
            print(f"artifact: {path}")
        if result.error:
            print(f"error: {result.error}", file=sys.stderr)
        print("\nAnswer:")
    print(answer_text(result.answer))
    return result
