"""File chores: host-side tools over an inbox folder, one of them behind an approval.

The sandbox never sees your folders. Three tools run on the host instead:

* ``list_inbox()`` and ``read_inbox_file(name)`` read ``data/inbox/`` (expense
  CSVs from three people, a note from their lead, unrelated minutes);
* ``save_report(filename, content)`` writes into an outbox folder, and needs
  your approval for every call (``requires_approval=True``).

The model merges the CSVs in its own code, totals them per person and per
category, flags large expenses next to the lead's notes about them, and saves
a Markdown report through the approved tool.

    python examples/file_chores.py --scripted --yes      # approve the write without asking
    python examples/file_chores.py --scripted            # asks y/N in the terminal; denied without one
    CODEACT_MODEL=gpt-4o-mini python examples/file_chores.py --outbox /tmp/outbox

See examples/README.md for all options.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

from _common import DATA, make_agent, parser, run

from codeact import Tool, tool
from codeact.agent import ApprovalRequest
from codeact.events import RunResult

INBOX = DATA / "inbox"
OUTBOX = Path(__file__).resolve().parent / "output" / "outbox"
REPORT = "expenses_report.md"

TASK = (
    "The inbox holds April expense files from my team and some other documents. "
    "Merge all expense CSVs into one Markdown report: the total per person and per category, and a list of "
    "every expense over 500 together with anything the notes in the inbox say about it. "
    f"Save the report as {REPORT} with save_report. "
    "Answer with a dict: report (where it was saved, or None), total, per_person, over_500 (descriptions)."
)


def inbox_tools(inbox: Path, outbox: Path) -> list[Tool[Any, Any]]:
    """The three host-side tools, bound to the given folders."""

    def resolve(folder: Path, name: str) -> Path:
        path = (folder / name).resolve()
        if path.parent != folder.resolve():
            raise ValueError(f"{name!r} is not a plain file name in the folder; use a name from list_inbox()")
        return path

    @tool
    def list_inbox() -> list[dict]:
        """The files in the inbox: name, size in bytes, modified (ISO time), kind (csv, txt, ...)."""
        return [
            {
                "name": p.name,
                "size": p.stat().st_size,
                "modified": datetime.fromtimestamp(p.stat().st_mtime).isoformat(timespec="seconds"),
                "kind": p.suffix.lstrip(".").lower(),
            }
            for p in sorted(inbox.iterdir())
            if p.is_file() and not p.name.startswith(".")
        ]

    @tool
    def read_inbox_file(name: str) -> str:
        """The text of one inbox file.

        Args:
            name: a file name from list_inbox(), e.g. "notes.txt"
        """
        path = resolve(inbox, name)
        if not path.is_file():
            raise FileNotFoundError(f"no file {name!r} in the inbox; list_inbox() shows what is there")
        return path.read_text(encoding="utf-8")

    @tool(requires_approval=True)
    def save_report(filename: str, content: str) -> str:
        """Save a text report in the outbox (the user approves each call). Returns where it was saved.

        Args:
            filename: a plain file name such as "report.md" (no folders)
            content: the whole text of the report
        """
        outbox.mkdir(parents=True, exist_ok=True)
        path = resolve(outbox, filename)
        path.write_text(content, encoding="utf-8")
        return str(path)

    return [list_inbox, read_inbox_file, save_report]


def approver(auto_yes: bool):
    """Ask in the terminal before a tool that needs approval runs (``--yes`` allows all)."""

    def approve(request: ApprovalRequest) -> bool:
        args = request.arguments
        print(f"\n[approval] step {request.step} wants to call {request.tool}({', '.join(args)}):")
        for name, value in args.items():
            text = str(value)
            lines = text.splitlines()
            more = f"\n             ... ({len(lines) - 6} more lines)" if len(lines) > 6 else ""
            shown = "\n             ".join(lines[:6]) + more
            print(f"  {name:>9}: {shown}")
        if auto_yes:
            print("[approval] allowed (--yes)")
            return True
        if not sys.stdin.isatty():
            print("[approval] denied: no terminal to ask (pass --yes to allow)")
            return False
        allowed = input("[approval] Allow? [y/N] ").strip().lower() in ("y", "yes")
        print("[approval] allowed" if allowed else "[approval] denied")
        return allowed

    return approve


SCRIPTED_REPLIES = [
    """Let me see what is in the inbox.

```python
files = list_inbox()
for f in files:
    print(f"{f['name']:<22} {f['kind']:<4} {f['size']:>6} bytes  {f['modified']}")
```""",
    """Three expense CSVs (one per person) and two text files. I'll read the CSVs into one list of rows, \
keeping who each row belongs to, and read the text files to find notes about the expenses.

```python
import csv, io

rows = []
for f in files:
    if f["kind"] == "csv" and f["name"].startswith("expenses_"):
        person = f["name"][len("expenses_"):-len(".csv")].title()
        for r in csv.DictReader(io.StringIO(read_inbox_file(f["name"]))):
            rows.append({**r, "person": person, "amount": float(r["amount"])})
texts = {f["name"]: read_inbox_file(f["name"]) for f in files if f["kind"] == "txt"}

print(len(rows), "expenses from", sorted({r["person"] for r in rows}))
print("columns:", list(rows[0]))
for name, text in texts.items():
    print(f"--- {name}\\n{text.strip()}")
```""",
    """notes.txt has the lead's remarks on the large items; the minutes are unrelated. Now the totals, the \
expenses over 500 with the matching notes, the report, and saving it (which needs the user's approval).

```python
from collections import defaultdict

per_person, per_category = defaultdict(float), defaultdict(float)
for r in rows:
    per_person[r["person"]] += r["amount"]
    per_category[r["category"]] += r["amount"]
total = round(sum(per_person.values()), 2)
large = sorted((r for r in rows if r["amount"] > 500), key=lambda r: -r["amount"])
note_lines = [ln[2:].strip() for ln in texts.get("notes.txt", "").splitlines() if ln.startswith("- ")]

def notes_about(r):
    return [n for n in note_lines if r["person"].lower() in n.lower()]

lines = ["# April expenses", "", f"{len(rows)} expenses from {len(per_person)} people, total **{total:,.2f}**.", "",
         "## Per person", "", "| person | total |", "|---|---:|"]
lines += [f"| {p} | {v:,.2f} |" for p, v in sorted(per_person.items(), key=lambda kv: -kv[1])]
lines += ["", "## Per category", "", "| category | total |", "|---|---:|"]
lines += [f"| {c} | {v:,.2f} |" for c, v in sorted(per_category.items(), key=lambda kv: -kv[1])]
lines += ["", "## Expenses over 500", ""]
for r in large:
    lines.append(f"- {r['date']} {r['person']}: {r['description']} ({r['category']}), {r['amount']:,.2f}")
    lines += [f"  - note: {n}" for n in notes_about(r)]
report = "\\n".join(lines) + "\\n"
print(report)

try:
    saved = save_report("expenses_report.md", report)
    print("saved to", saved)
except Exception as e:
    saved = None
    print("not saved:", e)
```""",
    """Done. Here is the summary.

```python
final_answer({
    "report": saved,
    "total": total,
    "per_person": {p: round(v, 2) for p, v in sorted(per_person.items())},
    "over_500": [f"{r['person']}: {r['description']} ({r['amount']:.2f})" for r in large],
})
```""",
]


def main(argv: Sequence[str] | None = None) -> RunResult:
    p = parser("Merge expense files from an inbox folder into a report (host-side tools, one needs approval).")
    p.add_argument("--inbox", type=Path, default=INBOX, help=f"folder to read (default: {INBOX})")
    p.add_argument("--outbox", type=Path, default=OUTBOX, help=f"folder save_report writes to (default: {OUTBOX})")
    p.add_argument("--yes", action="store_true", help="approve every save_report call without asking")
    args = p.parse_args(argv)
    agent = make_agent(args, SCRIPTED_REPLIES, inbox_tools(args.inbox, args.outbox), approve=approver(args.yes))
    return run(agent, TASK, quiet=args.quiet)


if __name__ == "__main__":
    sys.exit(0 if main().ok else 1)
