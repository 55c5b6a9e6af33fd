"""What a code action leaves on the host: the files it wrote and the figures it showed, within the run's budget.

The file list comes from the sandbox, so every name is checked (plain
relative paths only) and written without following links, below the run's
output directory only; per-step and per-run caps bound what is copied, and
the observation says what was left out.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

from sandbox.hostfiles import UnsafePath, check_relative_path
from sandbox.result import ExecutionResult

from .images import image_suffix, is_image_mime, is_image_name
from .observation import ObservationParts
from .run import RunArtifacts

#: Characters of text (HTML, SVG, Markdown...) the rich outputs of one Observation event carry;
#: beyond it an output is replaced by a one-line note, so events and the run log stay small.
MAX_OUTPUT_TEXT = 2_000_000

#: A listing of the working directory: path -> (size, mtime).
FileListing = dict[str, tuple[int, float]]


def file_listing(sandbox: Any) -> FileListing:
    """The working directory's files now ({} when it cannot be listed)."""
    try:
        return {f.path: (f.size, f.mtime) for f in sandbox.list_files()}
    except Exception:
        return {}


def collect_artifacts(exec_result: ExecutionResult, step: int, sandbox: Any, before: FileListing,
                      artifacts: RunArtifacts) -> tuple[ObservationParts, list[bytes]]:
    """Keep the step's figures and the files its code wrote (changed since ``before``, which is updated).

    Returns the observation's parts (what was kept, changed, skipped; the
    images for the model) and the PNGs the code showed (for the event).
    """
    parts = ObservationParts()
    budget = artifacts.budget
    # Raster images the code showed (PNG figures, display(Image(...)) of a JPEG...), in order.
    shown = [raster[0] for out in exec_result.outputs
             if (raster := [(m, d) for m, d in out.data.items() if isinstance(d, bytes) and is_image_mime(m)])]
    # What this step kept, by content: a plot both saved (plt.savefig) and shown is kept once, under
    # the name the code gave it. Files go first for that reason.
    kept: dict[bytes, str] = {}
    image_files: list[tuple[str, bytes]] = []
    current = ({f.path: (f.size, f.mtime) for f in exec_result.files} if exec_result.files is not None
               else file_listing(sandbox))
    for rel, (size, mtime) in sorted(current.items()):
        if before.get(rel) == (size, mtime) or rel.startswith("."):
            continue
        try:
            check_relative_path(rel)
        except UnsafePath as exc:
            parts.skipped.append((rel, f"unsafe name: {exc}"))
            continue
        parts.changed_files.append((rel, size))
        if not budget.take(size, step):
            parts.skipped.append((rel, budget.reason(size)))
            continue
        try:
            data = sandbox.download(rel)
            if len(data) > size and not budget.grow(len(data) - size, step):
                parts.skipped.append((rel, budget.reason(len(data))))
                continue
            artifacts.write(rel, data)
        except Exception as exc:  # vanished, grew past the download cap, or a name the host refuses
            parts.skipped.append((rel, f"not copied: {exc}"))
            continue
        kept.setdefault(hashlib.sha256(data).digest(), rel)
        if is_image_name(rel):
            image_files.append((rel, data))
    for k, (mime, png) in enumerate(shown, 1):
        digest = hashlib.sha256(png).digest()
        if digest in kept:  # the same picture is already kept (a saved file, or shown twice)
            parts.artifacts.append(kept[digest])
            parts.images.append((kept[digest], png))
            continue
        name = f"step{step}_figure{k}{image_suffix(mime)}"
        if not budget.take(len(png), step):
            parts.skipped.append((name, budget.reason(len(png))))
            continue
        try:
            artifacts.write(name, png)
        except Exception as exc:  # a full disk: say so, keep the step
            parts.skipped.append((name, f"not saved: {exc}"))
            continue
        parts.artifacts.append(name)
        parts.images.append((name, png))
        kept[digest] = name
    # For the model: what the code showed first, then the image files it wrote (step_images drops repeats).
    parts.images.extend(image_files)
    before.clear()
    before.update(current)
    return parts, exec_result.images


def output_bundles(outputs: Sequence[Any], limit: int = MAX_OUTPUT_TEXT) -> list[dict[str, str | bytes]]:
    """The code's rich outputs as MIME bundles for :class:`Observation`, their text within ``limit``.

    Image bytes are kept as they are: the sandbox's output limits already bound them.
    """
    bundles: list[dict[str, str | bytes]] = []
    room = limit
    for out in outputs:
        size = sum(len(v) for v in out.data.values() if isinstance(v, str))
        if size <= room:
            room -= size
            bundles.append(dict(out.data))
        else:
            bundles.append({"text/plain": f"[{out.mime} output of {size:,} characters not kept for display]"})
    return bundles
