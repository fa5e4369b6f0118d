"""`MemorySink`: the dispatcher's Sink protocol in memory, for tests that drive the dispatcher without a store."""

from __future__ import annotations

from typing import Any


class MemorySink:
    """The dispatcher's Sink protocol, in memory: every call is kept in order."""

    def __init__(self) -> None:
        self.accepted: list[dict[str, Any]] = []
        self.rejected: list[dict[str, Any]] = []

    def add_accepted(self, row: dict[str, Any]) -> None:
        self.accepted.append(row)

    def add_rejected(self, row: dict[str, Any]) -> None:
        self.rejected.append(row)

    @property
    def ids(self) -> list[str]:
        return [r["id"] for r in self.accepted + self.rejected]
