"""Bounding and fencing of tool results before they reach the model. Pure, no I/O.

Every tool result is cut to a fixed budget with a marker that says how much was cut and how
to narrow the query, then wrapped in a fence that names it untrusted target data. The fence
carries a per-run random id, and any run of three or more `<` or `>` inside the data is
broken up, so text from the target can neither open nor close a fence: the only `<<<` and
`>>>` in a fenced result are the fence's own.

Lookalikes count: the data is first put in NFKC form (the fullwidth and small less-than
signs U+FF1C and U+FE64 become `<`) with invisible characters removed (format characters
such as zero-width joiners and bidi controls, variation selectors, fillers), so three
fullwidth `<`, or `<<<` with a zero-width joiner inside, are broken up too.
"""

from __future__ import annotations

import re
import secrets
import unicodedata
from typing import Literal

RESULT_MAX_CHARS = 16_000
OPEN = "UNTRUSTED_TARGET_DATA"
CLOSE = "END_UNTRUSTED_TARGET_DATA"

_RUN_OF_LT = re.compile(r"<{3,}")
_RUN_OF_GT = re.compile(r">{3,}")
_SOURCE_UNSAFE = re.compile(r"[^A-Za-z0-9 ._:/=,@+-]")
# Invisible characters that are not format (Cf) characters: the combining grapheme joiner,
# variation selectors and the Hangul fillers.
_INVISIBLE = re.compile("[\u034f\ufe00-\ufe0f\U000e0100-\U000e01ef\u115f\u1160\u3164\uffa0]")


def new_fence_id() -> str:
    """A fresh random fence id for one run (not guessable by the target)."""
    return secrets.token_hex(8)


def _split_run(match: re.Match[str]) -> str:
    run = match.group(0)
    # "<<<<<" -> "<< << <": pairs separated by spaces, never three in a row
    return " ".join(run[i : i + 2] for i in range(0, len(run), 2))


def _visible(text: str) -> str:
    text = _INVISIBLE.sub("", text)
    return "".join(c for c in text if c.isascii() or unicodedata.category(c) != "Cf")


def normalise(text: str) -> str:
    """NFKC form without invisible characters: what a reader takes the text to say."""
    return _visible(unicodedata.normalize("NFKC", _visible(text)))


def neutralise(text: str) -> str:
    """Break up every run of three or more angle brackets so no fence marker survives."""
    text = normalise(text)
    return _RUN_OF_GT.sub(_split_run, _RUN_OF_LT.sub(_split_run, text))


def truncation_marker(cut: int, total: int, hint: str) -> str:
    return f"[... truncated: {cut} of {total} characters cut. Narrow the query to see more: {hint}]"


DEFAULT_HINT = "use a label or field selector, fewer tail lines, a byte range, or a single object"


def bound(
    text: str,
    limit: int = RESULT_MAX_CHARS,
    *,
    keep: Literal["head", "tail"] = "head",
    hint: str = DEFAULT_HINT,
) -> str:
    """Cut `text` to at most `limit` characters, marker included.

    `keep="tail"` keeps the end (logs); otherwise the beginning is kept.
    """
    if limit < 1:
        raise ValueError("limit must be positive")
    total = len(text)
    if total <= limit:
        return text
    # The marker's own length depends on the number it reports; size it with the worst case.
    marker_len = len(truncation_marker(total, total, hint)) + 1
    room = max(limit - marker_len, 0)
    cut = total - room
    marker = truncation_marker(cut, total, hint)
    if room == 0:
        return marker[:limit]
    if keep == "tail":
        return marker + "\n" + text[total - room :]
    return text[:room] + "\n" + marker


def fence(text: str, fence_id: str, *, source: str = "") -> str:
    """Wrap already neutralised text in the untrusted-data fence."""
    label = _SOURCE_UNSAFE.sub("_", source)[:120]
    attrs = f"id={fence_id}" + (f' source="{label}"' if label else "")
    return f"<<<{OPEN} {attrs}>>>\n{text}\n<<<{CLOSE} id={fence_id}>>>"


_FENCED = re.compile(rf"\A<<<{OPEN} [^\n]*>>>\n(.*)\n<<<{CLOSE} [^\n]*>>>\Z", re.S)


def unfence(text: str) -> str:
    """The data inside one fence made by `fence`; text that is not fenced, as it is."""
    found = _FENCED.match(text)
    return found.group(1) if found else text


def fence_overhead(fence_id: str, source: str = "") -> int:
    return len(fence("", fence_id, source=source))


def fenced_result(
    text: str,
    fence_id: str,
    *,
    source: str = "",
    limit: int = RESULT_MAX_CHARS,
    keep: Literal["head", "tail"] = "head",
    hint: str = DEFAULT_HINT,
) -> str:
    """Neutralise, bound and fence one tool result; the whole string is at most `limit` chars."""
    budget = limit - fence_overhead(fence_id, source)
    if budget < 200:
        raise ValueError("limit too small for the fence")
    return fence(bound(neutralise(text), budget, keep=keep, hint=hint), fence_id, source=source)
