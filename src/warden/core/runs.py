"""The result of one sandboxed command."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunResult"]


@dataclass(frozen=True)
class RunResult:
    """What a sandboxed command did: its status, output and how it ended."""

    exit_code: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    signal: int | None = None
    # The quota setting that stopped the run (workspace.max_disk, ...); not in the JSON, whose
    # stderr already ends with the note saying so.
    stopped_by: str | None = None

    def to_json(self) -> dict[str, object]:
        return {"exit_code": self.exit_code, "stdout": self.stdout, "stderr": self.stderr,
                "duration_s": round(self.duration_s, 6), "timed_out": self.timed_out,
                "signal": self.signal}
