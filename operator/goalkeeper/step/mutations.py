"""The act step's mutation set, for the act tools: the grammar lives in the pure core
(`goalkeeper.core.mutations`), where the engine checks the same entries against the
pinned contract before the step launches."""

from __future__ import annotations

from goalkeeper.core.mutations import Command, HttpCall, KubeObject, MutationSet, Write

__all__ = ["Command", "HttpCall", "KubeObject", "MutationSet", "Write"]
