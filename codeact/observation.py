"""Turn an execution result into the text the model sees next."""

from __future__ import annotations

from dataclasses import dataclass, field

from sandbox.result import ExecutionResult

NOTHING_PRINTED = (
    "(The code ran and printed nothing. Use print() to see values, or call final_answer(...) when done.)"
)


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` characters and say what was cut."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut from the middle of this output ...]\n{text[-tail:]}"


@dataclass
class ObservationParts:
    """Pieces of an observation, before they are joined."""

    artifacts: list[str] = field(default_factory=list)  # saved image/file names, for the summary
    changed_files: list[tuple[str, int]] = field(default_factory=list)  # files the code wrote
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (name, why) not copied to the host
    images: list[tuple[str, bytes]] = field(default_factory=list)  # (artifact name, bytes) of the step's images

    def saved_files(self) -> list[str]:
        """The written files that were copied to the host (not the skipped ones)."""
        left_out = {name for name, _ in self.skipped}
        return [p for p, _ in self.changed_files if p not in left_out]


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size} B"


def format_observation(result: ExecutionResult, parts: ObservationParts | None = None,
                       *, limit: int | None = 8000) -> str:
    """The observation for one code action: output, rich results, errors, files, hints.

    ``limit`` caps the text (head and tail kept, the cut said); ``None`` returns it whole.
    """
    parts = parts or ObservationParts()
    sections: list[str] = []
    sections.extend(result.notices)
    if result.stdout:
        sections.append(result.stdout.rstrip("\n"))
    if result.stderr.strip():
        sections.append("[stderr]\n" + result.stderr.rstrip("\n"))
    image_names = iter(parts.artifacts)
    for out in result.outputs:
        if out.is_image:
            name = next(image_names, None)
            sections.append(f"[image {out.mime} shown{f', saved as {name}' if name else ''}]")
        elif out.text is not None:
            label = "Out" if out.kind == "result" else "Display"
            sections.append(f"{label}: {out.text}")
        else:
            sections.append(f"[{out.mime} output, {sum(len(v) for v in out.data.values())} characters]")
    if parts.changed_files:
        listing = ", ".join(f"{p} ({_size(s)})" for p, s in parts.changed_files)
        sections.append(f"Files written in the working directory: {listing}")
    if parts.skipped:
        shown = parts.skipped[:20]
        listing = "; ".join(f"{ascii(p)[1:-1]}: {why}" for p, why in shown)
        more = f" (and {len(parts.skipped) - len(shown)} more)" if len(parts.skipped) > len(shown) else ""
        sections.append(f"Not saved for the user: {listing}{more}")
    if result.error is not None:
        tb = result.error.traceback.strip() or str(result.error)
        last = tb.splitlines()[-1] if tb else ""
        # Tracebacks end with "Type: message" (SyntaxError's message loses its "(file, line n)"
        # suffix there); add the error line only when the traceback does not already end with it.
        if str(result.error) not in tb and not last.startswith((f"{result.error.type}:", result.error.type + " ")) \
                and last != result.error.type:
            tb = f"{tb}\n{result.error}"
        sections.append("Error:\n" + tb)
    if not sections:
        sections.append(NOTHING_PRINTED)
    text = "\n".join(sections)
    return text if limit is None else truncate_middle(text, limit)
