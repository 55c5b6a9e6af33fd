"""What one sandbox session may cost the host.

Every number here bounds something the code in the sandbox controls: how
much it sends, how often it calls, how many files it lists. The host checks
them on its side; a limit that is hit becomes an error the code (or the
caller) can read, never an exception out of :meth:`Sandbox.run` and never
unbounded memory or time on the host.

Example::

    from sandbox import DockerSandbox, Limits

    DockerSandbox(limits=Limits(max_payload=256 * 2**20))   # tools that return 200 MB DataFrames
"""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Per-session caps; see the module docstring."""

    #: One host-function call's encoded arguments, or its result (bytes). A larger
    #: argument fails in the sandbox, a larger result reaches the code as an error.
    max_payload: int = 64 * MiB
    #: Host-function calls one run may make.
    max_calls_per_run: int = 100_000
    #: Host-function calls running at once (calls that overran their timeout count
    #: until their thread ends: Python cannot stop it).
    max_concurrent_calls: int = 32
    #: Bytes of call arguments and results kept in ``ExecutionResult.calls`` per run;
    #: beyond it the records keep an :class:`~sandbox.result.Elided` stand-in.
    max_kept_call_bytes: int = 64 * MiB
    #: Call records kept per run (later ones are counted, not kept).
    max_call_records: int = 10_000
    #: Rich outputs (plots, HTML...) kept per run, and their total size.
    max_outputs: int = 50
    max_output_bytes: int = 20_000_000
    #: Files reported by one listing of the working directory.
    max_listed_files: int = 10_000
    #: One file downloaded from the sandbox (bytes).
    max_download_bytes: int = 256 * MiB
    #: Seconds the kernel may leave the host's messages unread before it counts as broken: what
    #: was waiting must have been read within this time (plus a second per MiB of it).
    write_stall: float = 30.0
    #: Bytes of replies the host holds for a kernel that has not read them yet (at least two
    #: ``max_frame``: two largest replies at once); beyond it the kernel counts as broken and is replaced.
    max_unread_bytes: int = 128 * MiB
    #: One session snapshot (its files and pickled variables, bytes): what the host copies out of the
    #: sandbox to save it, and into a new one to restore it. See :mod:`sandbox.snapshot`.
    max_snapshot_bytes: int = 2048 * MiB
    #: Values one call's arguments may hold once decoded (list elements, dict entries...). The
    #: host-side cost of a value is up to ~70 bytes however short its text: this bounds the memory
    #: of one call's arguments, not only its bytes on the wire. Big data travels as bytes/arrays.
    max_call_items: int = 2_000_000
    #: Host memory the arguments of the calls running at once may hold (estimated from each call's
    #: payload and ``max_call_items`` before it is decoded). A call that would go over it is refused
    #: at once, unless no other call is running (one call of ``max_payload`` always fits).
    max_call_memory: int = 512 * MiB

    @property
    def max_frame(self) -> int:
        """The longest message the host accepts from the kernel: a payload plus framing."""
        return self.max_payload + MiB

    def call_memory(self, payload_bytes: int) -> int:
        """What a call's arguments may cost the host once decoded: the payload, a copy of its
        buffers, and at most ``max_call_items`` values of ~72 bytes (a value takes >= 2 bytes of text)."""
        return 2 * payload_bytes + min(36 * payload_bytes, 72 * self.max_call_items)

    @property
    def max_queued(self) -> int:
        """Bytes the host queues for a kernel that does not read (``max_unread_bytes``, at least two frames)."""
        return max(self.max_unread_bytes, 2 * self.max_frame)
