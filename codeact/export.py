"""Export a recorded run (:class:`~codeact.runlog.RunRecord`) as JSONL or a Jupyter notebook.

JSONL (:func:`export_jsonl`) is for machines: one JSON object per line, a
``run`` line, one ``step`` line per step (tool calls, artifacts and images
inside it), then a ``result`` line. Images are embedded as base64 by default
so the file stands alone; with ``include_images=False`` each image keeps only
its MIME type, size and SHA-256, and the step's ``artifacts`` list still names
the files on disk.

The notebook (:func:`export_notebook`) is for people: the task, then for each
step the model's prose and a code cell with the outputs it produced (stdout,
stderr, the error with its traceback, the images), then the answer. Open it
in Jupyter to read the run or re-run it: it runs top to bottom in a plain
kernel (``jupyter nbconvert --execute``). A first code cell defines what the
sandbox gave the code: ``final_answer`` and a stand-in for each tool that
replays the results the tool returned in the run (the tools ran on the host
and are not in the notebook). Cells that failed in the run are tagged
``raises-exception`` so that running carries on past them as the run did;
code that was interrupted or timed out is shown, not run. Notes written for
the model (hints, file listings) are markdown, never a cell's output. A
ReAct run's steps have no code: a markdown cell lists each step's tool calls
and the observation instead.

This module only reads: it turns :class:`~codeact.runlog.RunRecord` objects
into files and never writes the run log.
"""

from __future__ import annotations

import base64
import hashlib
import json
import keyword
import os
import re
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, Sequence

from .errors import RunLogError
from .observation import NOTHING_PRINTED
from .parsing import parse_reply
from .runlog import ArtifactRecord, RunRecord, StepRecord, ToolCallRecord, jsonable
from .values import show

if TYPE_CHECKING:  # nbformat is imported lazily: `import codeact.runlog` must stay cheap
    from nbformat import NotebookNode

__all__ = ["export_jsonl", "export_notebook", "export_run", "model_prose", "to_notebook"]

#: Format tag written on the ``run`` line of a JSONL export.
JSONL_FORMAT = "codeact.run/1"

#: The model's prose in a notebook is cut to this many characters.
PROSE_LIMIT = 2000

# The last line of a Python traceback: "pkg.ErrorName: message" (or just the name).
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::\s?(.*))?$")
_EXC_NAME = re.compile(r"(Error|Exception|Warning|Interrupt|Exit|Timeout)$")


# --------------------------------------------------------------------------- JSONL


def _usage(u: Any) -> dict[str, int]:
    return {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens, "requests": u.requests}


def _artifact(a: ArtifactRecord) -> dict[str, Any]:
    return {"path": a.path, "mime": a.mime, "size": a.size}


def _tool_call(c: ToolCallRecord) -> dict[str, Any]:
    return {
        "name": c.name,
        "arguments": c.arguments,
        "result": c.result,
        "error": c.error,
        "duration": c.duration,
        "time": c.time,
    }


def _image(data: bytes, include: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "mime": "image/png",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    if include:
        out["base64"] = base64.b64encode(data).decode("ascii")
    return out


def _write_line(fp: IO[str], obj: dict[str, Any]) -> None:
    # json.dumps escapes newlines inside strings, so each object is one line.
    fp.write(json.dumps(jsonable(obj), ensure_ascii=False, allow_nan=False))
    fp.write("\n")


def export_jsonl(record: RunRecord, fp: IO[str], *, include_images: bool = True) -> None:
    """Write ``record`` to ``fp`` as JSON Lines.

    Lines, in order:

    * ``{"type": "run", "format": "codeact.run/1", "id", "task", "model", "backend",
      "tools", "files", "status", "started", "finished", "duration", "usage", "steps"}``
    * one ``{"type": "step", "step", "model_output", "code", "observation", "stdout",
      "stderr", "error", "truncated", "usage", "model_time", "sandbox_time",
      "input_messages", "input_chars", "started", "duration", "tool_calls",
      "artifacts", "images"}`` per step; each image is ``{"mime", "size",
      "sha256", "base64"}`` (``base64`` left out when ``include_images`` is false)
    * ``{"type": "result", "id", "status", "answer", "answer_type", "error",
      "usage", "duration", "artifacts", "errors"}``
    """
    _write_line(
        fp,
        {
            "type": "run",
            "format": JSONL_FORMAT,
            "id": record.id,
            "task": record.task,
            "model": record.model,
            "backend": record.backend,
            "agent": record.agent,
            "prompt": record.prompt,
            "prompt_version": record.prompt_version,
            "bench_episode": record.bench_episode,
            "tools": record.tools,
            "files": record.files,
            "status": record.status,
            "started": record.started,
            "finished": record.finished,
            "duration": record.duration,
            "usage": _usage(record.usage),
            "steps": len(record.steps),
        },
    )
    for s in record.steps:
        _write_line(
            fp,
            {
                "type": "step",
                "run_id": record.id,
                "step": s.step,
                "model_output": s.model_output,
                "code": s.code,
                "observation": s.observation,
                "stdout": s.stdout,
                "stderr": s.stderr,
                "error": s.error,
                "truncated": s.truncated,
                "usage": _usage(s.usage),
                "model_time": s.model_time,
                "sandbox_time": s.sandbox_time,
                "input_messages": s.input_messages,
                "input_chars": s.input_chars,
                "started": s.started,
                "duration": s.duration,
                "tool_calls": [_tool_call(c) for c in s.tool_calls],
                "artifacts": [_artifact(a) for a in s.artifacts],
                "images": [_image(img, include_images) for img in s.images],
            },
        )
    _write_line(
        fp,
        {
            "type": "result",
            "id": record.id,
            "status": record.status,
            "answer": record.answer,
            "answer_type": record.answer_type,
            "error": record.error,
            "usage": _usage(record.usage),
            "duration": record.duration,
            "artifacts": [_artifact(a) for a in record.artifacts],
            "errors": [
                {"step": e.step, "kind": e.kind, "message": e.message, "fatal": e.fatal, "time": e.time}
                for e in record.errors
            ],
        },
    )


# --------------------------------------------------------------------------- notebook


def model_prose(text: str, limit: int = PROSE_LIMIT) -> str:
    """The model's output without its code block(s), whitespace tidied, cut to ``limit`` characters."""
    prose = parse_reply(text or "").prose
    prose = re.sub(r"\n{3,}", "\n\n", prose).strip()
    if len(prose) > limit:
        prose = prose[:limit].rstrip() + " …"
    return prose


def _error_output(nbf: Any, error: str) -> Any:
    """A notebook ``error`` output from the recorded error text (usually a traceback)."""
    lines = error.rstrip("\n").splitlines() or [error]
    ename, evalue = "Error", lines[-1].strip()
    for line in reversed(lines):
        m = _EXC_LINE.match(line.strip())
        if m and (m.group(2) is not None or _EXC_NAME.search(m.group(1))):
            ename, evalue = m.group(1), (m.group(2) or "")
            break
    return nbf.new_output("error", ename=ename, evalue=evalue, traceback=lines)


def _step_outputs(nbf: Any, step: StepRecord) -> list[Any]:
    """The cell's outputs: what the code itself produced. What the model was told goes in markdown."""
    outputs: list[Any] = []
    if step.stdout:
        outputs.append(nbf.new_output("stream", name="stdout", text=step.stdout))
    if step.stderr:
        outputs.append(nbf.new_output("stream", name="stderr", text=step.stderr))
    for img in step.images:
        outputs.append(
            nbf.new_output(
                "display_data",
                data={"image/png": base64.b64encode(img).decode("ascii"), "text/plain": "<image>"},
            )
        )
    if step.error:
        outputs.append(_error_output(nbf, step.error))
    return outputs


def _observation_note(step: StepRecord) -> str | None:
    """Markdown with what the model saw, for a step whose code left no output of its own.

    Some backends report only the observation; there it is all there is to show. It is
    written for the model (a hint to print, the files written), so it is not a cell output.
    """
    if step.stdout or step.stderr or step.images or step.error or not step.observation:
        return None
    text = step.observation.strip()
    if not text or text == NOTHING_PRINTED.strip():
        return None
    return f"*Observation (what the model saw after step {step.step}):*\n\n{_fence(text)}"


#: Errors of code that did not finish on its own: run again it could loop for ever.
_NOT_RERUN = ("KeyboardInterrupt", "TimeoutError")


def _error_type(error: str | None) -> str:
    if not error:
        return ""
    return error.strip().split(":", 1)[0].strip()


def _setup_cell(nbf: Any, record: RunRecord) -> Any:
    """The first code cell: ``final_answer`` and a stand-in for each tool, replaying the run's results."""
    calls: dict[str, list[dict[str, Any]]] = {}
    for step in record.steps:
        for c in step.tool_calls:
            if c.error:
                calls.setdefault(c.name, []).append({"error": c.error})
            elif _has_codec_nodes(c.result):  # not plain JSON: a summary, not the value
                calls.setdefault(c.name, []).append({"unavailable": show(c.result, 200)})
            else:
                calls.setdefault(c.name, []).append({"result": c.result})
    every = list(dict.fromkeys(list(record.tools) + list(calls)))
    names = [t for t in every if t.isidentifier() and not keyword.iskeyword(t) and not t.lower().startswith("_codeact")
             and t != "final_answer"]
    others = [t for t in every if t not in names and t != "final_answer"]
    recorded = json.dumps({n: calls.get(n, []) for n in names}, ensure_ascii=False, indent=1)
    lines = [
        "# Set up by the export: what the sandbox gave the code in the run.",
        "# The tools ran on the host and are not here: each stand-in returns, call by call, what the",
        "# tool returned in the run (plain JSON values exactly; others were only summarised).",
        "# Replace a stand-in with the real function to run the code for real.",
        "import json as _json",
        "",
        f"_CODEACT_RECORDED = _json.loads({recorded!r})",
        "",
        "",
        "def _codeact_replay(name):",
        "    calls = _CODEACT_RECORDED.get(name, [])",
        "    if not calls:",
        "        raise NotImplementedError(f'{name}: a tool of the run, with no recorded call left to replay; '",
        "                                  'define it in this cell to run the code for real')",
        "    call = calls.pop(0)",
        "    if 'error' in call:",
        "        raise RuntimeError(call['error'])",
        "    if 'unavailable' in call:",
        "        raise NotImplementedError(f'{name}: its result was not plain JSON and was only recorded as '",
        "                                  f\"{call['unavailable']!r}; define {name} in this cell\")",
        "    return call['result']",
        "",
        "",
        "def final_answer(answer):",
        "    \"\"\"Ends the run in the sandbox; here it shows the answer.\"\"\"",
        "    print(f'final answer: {answer!r}')",
    ]
    for name in names:
        lines += ["", "", f"def {name}(*args, **kwargs):",
                  f"    \"\"\"Stand-in for the tool {name}: replays its results from the run.\"\"\"",
                  f"    return _codeact_replay({name!r})"]
    if others:
        # ascii(): names from MCP servers could hold a newline that would end the comment
        lines += ["", "# Not defined here (not plain Python names; reached another way in the sandbox): "
                  + ", ".join(ascii(t) for t in others)]
    if record.files:
        lines += ["", "# The run's files were in its working directory: " + ", ".join(ascii(f) for f in record.files),
                  "# Put them next to this notebook before running it."]
    return nbf.new_code_cell(source="\n".join(lines), metadata={"codeact": {"setup": True}})


def _fence(text: str, lang: str = "") -> str:
    # A fence longer than any backtick run inside the text, so it cannot close early.
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _answer_markdown(record: RunRecord) -> str:
    parts = ["## Answer", ""]
    answer = record.answer
    if answer is None:
        parts.append("*(no answer)*")
    elif isinstance(answer, str) and record.answer_type in (None, "str"):
        parts.append(answer)
    elif isinstance(answer, str) or _has_codec_nodes(answer):
        # A value that is not plain JSON (a tuple, a DataFrame; or, in older logs, its str()): its repr.
        parts.append(f"`{record.answer_type}`")
        parts.append("")
        parts.append(_fence(answer if isinstance(answer, str) else show(answer)))
    else:
        parts.append(_fence(json.dumps(answer, indent=2, ensure_ascii=False), "json"))
    parts.append("")
    facts = [f"**Status:** {record.status}", f"{len(record.steps)} steps"]
    if record.usage.total_tokens:
        facts.append(f"{record.usage.input_tokens} in / {record.usage.output_tokens} out tokens")
    if record.duration:
        facts.append(f"{record.duration:.1f} s")
    parts.append(" · ".join(facts))
    if record.error:
        parts += ["", "**Error:**", "", _fence(record.error)]
    if record.artifacts:
        parts += ["", "**Artifacts:**", ""] + [f"- `{a.path}`" for a in record.artifacts]
    return "\n".join(parts)


def _actions_markdown(step: StepRecord) -> str:
    """A ReAct step: its tool calls (arguments and result or error) and the observation."""
    lines = [f"**Step {step.step}** · tool calls:", ""]
    for c in step.tool_calls:
        args = ", ".join(f"{k}={show(v, 200)}" for k, v in (c.arguments or {}).items()) if isinstance(
            c.arguments, dict) else show(c.arguments, 200)
        outcome = f"error: {c.error}" if c.error else show(c.result, 500)
        lines.append(f"- `{c.name}({args})` → {outcome}")
    if step.observation:
        lines += ["", "Observation:", "", _fence(step.observation)]
    return "\n".join(lines)


def _has_codec_nodes(tree: Any) -> bool:
    """True when a stored value holds the codec's tagged nodes (``{"$": ...}``), i.e. is not plain JSON."""
    if isinstance(tree, dict):
        return "$" in tree or any(_has_codec_nodes(v) for v in tree.values())
    if isinstance(tree, list):
        return any(_has_codec_nodes(v) for v in tree)
    return False


def _header_markdown(record: RunRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(record.started)) if record.started else "?"
    meta = [f"model `{record.model or '?'}`", f"backend `{record.backend or '?'}`", f"status **{record.status}**"]
    if record.agent:
        meta.insert(0, f"agent `{record.agent}`")
    if record.prompt:
        meta.append(f"prompt `{record.prompt}@{record.prompt_version or '?'}`")
    lines = ["# Task", "", record.task or "*(no task recorded)*", "", " · ".join(meta), "",
             f"Run `{record.id}` · {when}"]
    if record.tools:
        lines += ["", "Tools: " + ", ".join(f"`{t}`" for t in record.tools)]
    if record.files:
        lines += ["", "Files: " + ", ".join(f"`{f}`" for f in record.files)]
    return "\n".join(lines)


def to_notebook(record: RunRecord, children: Sequence[Any] = ()) -> NotebookNode:
    """Build the nbformat v4 notebook for ``record`` (see :func:`export_notebook`).

    ``children``: the run's child runs (:meth:`codeact.runlog.RunLog.children`), each marked after its step.
    """
    import nbformat.v4 as nbf  # lazy: only exports need it

    cells: list[Any] = [nbf.new_markdown_cell(_header_markdown(record))]
    if record.parent_run_id:
        cells.append(nbf.new_markdown_cell(f"A child run of run `{record.parent_run_id}` (its step "
                                           f"{record.parent_step}): an agent called as a tool."))
    if any(step.code is not None for step in record.steps):
        cells.append(_setup_cell(nbf, record))
    for step in record.steps:
        cells.extend(_child_cells(nbf, step.step, children))
        prose = model_prose(step.model_output)
        if prose:
            cells.append(nbf.new_markdown_cell(f"**Step {step.step}**\n\n{prose}",
                                               metadata={"codeact": {"step": step.step}}))
        if step.code is None:
            if step.tool_calls:
                cells.append(nbf.new_markdown_cell(_actions_markdown(step), metadata={"codeact": {"step": step.step}}))
            elif step.error and not prose:
                cells.append(nbf.new_markdown_cell(f"**Step {step.step}** failed:\n\n{_fence(step.error)}"))
            continue
        meta: dict[str, Any] = {
            "codeact": {
                "step": step.step,
                "model_time": step.model_time,
                "sandbox_time": step.sandbox_time,
                "usage": _usage(step.usage),
                "truncated": step.truncated,
                "tool_calls": [_tool_call(c) for c in step.tool_calls],
                "artifacts": [a.path for a in step.artifacts],
            }
        }
        error_type = _error_type(step.error)
        if error_type in _NOT_RERUN:
            # Interrupted or out of time in the run: it may never end when run again.
            why = "was interrupted" if error_type == "KeyboardInterrupt" else "ran out of time"
            cells.append(nbf.new_markdown_cell(
                f"**Step {step.step}**: this code {why} in the run, so it is shown here, not run:\n\n"
                f"{_fence(step.code, 'python')}\n\n{_fence(step.error or '')}", metadata=jsonable(meta)))
            continue
        if step.error:
            meta["tags"] = ["raises-exception"]  # it failed in the run too: running the notebook carries on
        cells.append(
            nbf.new_code_cell(
                source=step.code,
                execution_count=step.step,
                outputs=_step_outputs(nbf, step),
                metadata=jsonable(meta),
            )
        )
        note = _observation_note(step)
        if note:
            cells.append(nbf.new_markdown_cell(note, metadata={"codeact": {"step": step.step}}))
    cells.append(nbf.new_markdown_cell(_answer_markdown(record)))
    return nbf.new_notebook(
        cells=cells,
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
            "codeact": jsonable(
                {
                    "run_id": record.id,
                    "model": record.model,
                    "backend": record.backend,
                    "agent": record.agent,
                    "prompt": record.prompt,
                    "prompt_version": record.prompt_version,
                    "status": record.status,
                    "started": record.started,
                    "usage": _usage(record.usage),
                }
            ),
        },
    )


def _child_cells(nbf: Any, step: int, children: Sequence[Any]) -> list[Any]:
    """A markdown cell per child run that ``step``'s tool calls started (shown before the step's own cells)."""
    return [nbf.new_markdown_cell(
        f"**child run `{c.id}` of {_plain(c.agent or 'an agent')}** (step {step}, {_plain(c.status)}): "
        f"`codeact logs show {c.id}` shows it.",
        metadata={"codeact": {"step": step, "child_run_id": c.id, "child_status": c.status}})
        for c in children if c.parent_step == step]


def _plain(text: str) -> str:
    """``text`` with markdown's special characters escaped (it comes from the run log)."""
    return "".join("\\" + ch if ch in "\\`*_{}[]()#+-.!<>|" else ch for ch in str(text)[:100])


def export_notebook(record: RunRecord, path: str | os.PathLike[str], children: Sequence[Any] = ()) -> None:
    """Write ``record`` as a Jupyter notebook (nbformat v4) to ``path``.

    Cells: a markdown cell with the task, model, backend and status; per
    step, a markdown cell with the model's prose (its output minus the code,
    cut short) and a code cell with the code, ``execution_count`` = step
    number, and outputs: stdout/stderr streams, ``display_data`` PNGs and an
    ``error`` output (ename, evalue, traceback) when the step failed; last, a
    markdown cell with the answer and status. The notebook is validated
    before it is written.
    """
    import nbformat  # lazy: keeps `import codeact.runlog` / `codeact.export` light

    nb = to_notebook(record, children)
    nbformat.validate(nb)
    target = os.fspath(path)
    parent = os.path.dirname(target)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(target, "w", encoding="utf-8") as fp:
        nbformat.write(nb, fp)


def export_run(
    record: RunRecord,
    dest: str | os.PathLike[str] | IO[str],
    format: Literal["jsonl", "ipynb"] | None = None,
) -> None:
    """Write ``record`` to ``dest``: a path or a text stream.

    ``format`` defaults to "ipynb" when ``dest`` is a path ending in
    ``.ipynb`` and to "jsonl" otherwise; a text stream is always JSONL.

    Raises:
        RunLogError: a notebook asked for on a stream, or an unknown format.
    """
    if not isinstance(dest, (str, os.PathLike)):  # a text stream
        if format == "ipynb":
            raise RunLogError("Notebook export needs a file path, not a stream.")
        export_jsonl(record, dest)
        return
    path = Path(os.fspath(dest))
    fmt = format or ("ipynb" if path.suffix.lower() == ".ipynb" else "jsonl")
    if fmt == "ipynb":
        export_notebook(record, path)
    elif fmt == "jsonl":
        with path.open("w", encoding="utf-8") as fp:
            export_jsonl(record, fp)
    else:
        raise RunLogError(f"Unknown export format {fmt!r}: use 'jsonl' or 'ipynb'.")
