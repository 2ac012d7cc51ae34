"""Redaction of everything the step reads, before the model sees it. Pure, no I/O.

A value is withheld for its name or for its shape.

Names (`looks_secret`), split into words (snake, kebab, dotted or camelCase): a name looks
secret when a word holds password, passwd, passphrase, secret, credential, apikey or
privatekey, is or ends in token, is pass, pwd, creds, auth or private, or when the name
ends in key after another word (`API_KEY`, `tls.key`; not `public_key`, `keycloak` or a bare
`key`). A last word that says the value is about a secret rather than the secret itself
(`PASSWORD_FILE`, `secretName`, `token_count`) makes the name plain; so do `passwordless`
and `max_tokens`.

Objects (`redact`), of any kind, custom resources included:
- Secrets: `data` and `stringData` keep their keys, every value is replaced;
- a field whose name looks secret (an annotation, a ConfigMap key, any spec field): its
  string or number value;
- an entry `{name: ..., value: ...}` or `{key: ..., value: ...}` (env, parameters) whose
  name looks secret: its value;
- a list of strings (command, args) is read as one command line, so `["--password", "x"]`
  loses `x`;
- the last-applied annotation is redacted as the object it holds (a Secret's wholesale);
- every other string goes through `redact_text`.

Text (`redact_text`: logs, HTTP bodies, files, command output, raw API answers):
- PEM private key blocks, `Authorization:` and `Cookie:` values, `Bearer` tokens, JWTs;
- `KEY=value`, `KEY: value`, `"key": "value"`, `<key>value</key>` and `--key value` whose
  key looks secret, and a YAML block (`password: |`) under such a key;
- passwords of tools that take them in a flag: `mysql -pX`, `sshpass -p X`,
  `redis-cli -a X`, `curl -u user:X`;
- passwords in URLs and DSNs (`postgres://user:X@host`, `user:X@tcp(host)`), webhook URLs
  that hold their token (Slack, Discord, Teams, Telegram), and signatures, keys and codes in
  query strings (`?sig=`, `?key=`, `?code=`);
- tokens of a well-known shape (`sk-...`, `ghp_...`, `github_pat_...`, `glpat-...`,
  `xoxb-...`, `AIza...`, `hf_...`, `npm_...`);
- every occurrence of a secret the caller knows (`known`: the model's own key).

`secret_spans` finds what `redact_text` replaces as positions in the text, so that a reader
showing part of a text (a file read from an offset) withholds what the whole text shows
(`redact_part`). The patterns are ASCII-only: on bytes read as latin-1, a position is a
byte offset.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted by goalkeeper>"
PEM_REDACTED = f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
KNOWN_MIN_CHARS = 4  # a shorter known value would redact ordinary words

# A word holding one of these names a secret: dbPassword, client_secret, AWS_CREDENTIALS.
SECRET_PARTS = ("password", "passwd", "passphrase", "secret", "credential", "apikey", "privatekey")
# Words that name a secret only as a whole word (`DB_PASS`, `Pwd`); `token` also ends one.
SECRET_WORDS = frozenset({"pass", "pwd", "creds", "auth", "private", "token"})
# Words before `key` that make it no credential: `public_key`, `primary_key`.
PLAIN_KEYS = frozenset(
    {"public", "primary", "foreign", "sort", "partition", "cache", "routing", "idempotency"}
)
# A last word that says the value is about a secret, not the secret: PASSWORD_FILE,
# secretName, token_count, --password-stdin.
ABOUT_WORDS = frozenset(
    {
        "file",
        "path",
        "dir",
        "ref",
        "name",
        "length",
        "count",
        "size",
        "type",
        "url",
        "uri",
        "endpoint",
        "ttl",
        "expiry",
        "expires",
        "policy",
        "mode",
        "stdin",
        "enabled",
        "required",
    }
)
PLAIN_WORDS = frozenset({"passwordless", "secretless"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")  # snake, kebab, dotted, camelCase
_FLAGS = re.IGNORECASE | re.ASCII
# A name worth asking `looks_secret` about: it holds one of these.
_HINT = r"(?:pass|pwd|secret|token|cred|key|private|auth)"
_NAME = rf"[A-Za-z0-9_.\-]{{0,80}}{_HINT}[A-Za-z0-9_.\-]{{0,80}}"
# A value runs to its closing quote when quoted, else to a space, separator or quote; one
# that is already redacted is left alone, so redacting twice changes nothing, and so is a
# YAML block indicator (`password: |`), whose lines `_BLOCK_KEY` finds.
_VALUE = r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?!<redacted|[|>][0-9+-]*(?:\s|\Z))[^\s,;&"'}\]]+)"""

_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    re.DOTALL | re.ASCII,
)
_HEADER = re.compile(
    r"""(?P<q>["']?)(?:(?:proxy-)?authorization|(?:set-)?cookie)(?P=q)\s*[:=]\s*"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?!\s*<redacted)[^\r\n"']+)""",
    _FLAGS,
)
_BEARER = re.compile(r"\bbearer\s+(?P<value>(?!<redacted)[A-Za-z0-9\-._~+/]+=*)", _FLAGS)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*", re.ASCII)
# `KEY=value`, `key => value`, `"key": value`, or `key: value` with a space (so
# `keycloak:24.0` and `token:abc` stay).
_PAIR = re.compile(
    rf"""(?<![A-Za-z0-9_.\-])(?P<q>["']?)(?P<name>{_NAME})(?P=q)"""
    rf"""(?:[ \t]*=>?[ \t]*|(?<=["'])[ \t]*:[ \t]*|:[ \t]+){_VALUE}""",
    _FLAGS,
)
# `--password x`: a flag whose value is the next word (not another flag).
_FLAG = re.compile(
    rf"""(?<![^\s"'])(?P<name>--?{_NAME})[ \t]+"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?!<redacted|-)[^\s"']+)""",
    _FLAGS,
)
_XML = re.compile(rf"<(?P<name>{_NAME})>(?P<value>(?!<redacted)[^<\n]+)</(?P=name)>", _FLAGS)
# Tools whose password is a flag with no secret-looking name; case matters (`mysql -P` is
# the port).
_TOOL_PASSWORD = re.compile(
    r"""(?:\b(?:mysql\w*|mariadb[\w-]*)\b[^\n]*?(?<!\S)-p(?=\S)"""
    r"""|\bsshpass\b[^\n]*?(?<!\S)-p[ \t]*"""
    r"""|\bredis-cli\b[^\n]*?(?<!\S)-a[ \t]+"""
    r"""|\bcurl\b[^\n]*?(?<!\S)(?:-u|--user)[ \t=]*[^\s:"']*:)"""
    r"""(?P<value>(?!<redacted)[^\s"']+)""",
    re.ASCII,
)
_URL_PASSWORD = re.compile(
    r"[a-z][a-z0-9+.-]*://[^/\s:@]*:(?P<value>(?!<redacted)[^/\s@]+)(?=@)", _FLAGS
)
_GO_DSN = re.compile(r"(?<![\w.-])[\w.-]+:(?P<value>(?!<redacted)[^\s:@/]+)@(?:tcp|unix)\(", _FLAGS)
_WEBHOOK = re.compile(
    r"(?:hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|discord(?:app)?\.com/api/webhooks/[0-9]+/"
    r"|\.webhook\.office\.com/webhookb2/"
    r"|outlook\.office(?:365)?\.com/webhook/"
    r"|api\.telegram\.org/bot)"
    r"""(?P<value>(?!<redacted)[^\s"'<>?#]+)""",
    _FLAGS,
)
_QUERY_SECRET = re.compile(
    r"(?<=[?&;])(?:sig|signature|key|code|x-amz-signature|x-goog-signature)="
    r"""(?P<value>(?!<redacted)[^&\s#"']+)""",
    _FLAGS,
)
_TOKEN_SHAPE = re.compile(
    r"\b(?:sk-[A-Za-z0-9_-]{20,}|[sr]k_(?:live|test)_[A-Za-z0-9]{16,}|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{40,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|AIza[A-Za-z0-9_-]{35}|hf_[A-Za-z0-9]{30,}|npm_[A-Za-z0-9]{36})",
    re.ASCII,
)
# A YAML block scalar (`password: |`, `- token: >-`); its lines follow, indented deeper.
_BLOCK_KEY = re.compile(
    r"""^(?P<indent>[ \t]*)(?P<dash>-[ \t]+)?(?P<q>["']?)(?P<name>[A-Za-z0-9_.\-]{1,160})"""
    r"""(?P=q)[ \t]*:[ \t]*[|>][0-9+-]*[ \t]*(?:\#[^\n]*)?$""",
    re.MULTILINE | re.ASCII,
)

Span = tuple[int, int, str]  # start, end, what replaces it


def looks_secret(name: str) -> bool:
    """Whether a key, variable, flag or field name looks like it holds a credential."""
    words = [w.lower() for w in _WORD.findall(name) if not w.isdigit()]  # API_KEY_2 as API_KEY
    if len(words) > 1 and words[-1] in ABOUT_WORDS:
        return False
    for word in words:
        if word in PLAIN_WORDS:
            continue
        if any(part in word for part in SECRET_PARTS):
            return True
        if word in SECRET_WORDS or word.endswith("token"):
            return True
    return len(words) > 1 and words[-1] == "key" and words[-2] not in PLAIN_KEYS


def _value_span(match: re.Match[str]) -> Span | None:
    """The value of a match, inside its quotes; None for an empty one."""
    start, end = match.span("value")
    if (
        end - start >= 2
        and match.string[start] in "\"'"
        and match.string[end - 1] == match.string[start]
    ):
        start, end = start + 1, end - 1
    return (start, end, REDACTED) if end > start else None


def _block_span(text: str, match: re.Match[str]) -> Span | None:
    """The lines of a YAML block scalar: those after the key, indented deeper than it."""
    column = len(match.group("indent")) + len(match.group("dash") or "")
    start = end = None
    at = match.end() + 1
    while at < len(text):
        stop = text.find("\n", at)
        stop = len(text) if stop < 0 else stop
        line = text[at:stop]
        content = line.lstrip(" \t")
        if content:
            if len(line) - len(content) <= column:
                break
            start = at + len(line) - len(content) if start is None else start
            end = stop
        at = stop + 1
    return (start, end, REDACTED) if start is not None and end is not None else None


def secret_spans(text: str, known: Iterable[str] = ()) -> list[Span]:
    """Where `text` shows a credential (see the module docstring), sorted, overlaps merged."""
    spans: list[Span] = [(m.start(), m.end(), PEM_REDACTED) for m in _PEM.finditer(text)]
    spans.extend((m.start(), m.end(), REDACTED) for m in _JWT.finditer(text))
    spans.extend((m.start(), m.end(), REDACTED) for m in _TOKEN_SHAPE.finditer(text))
    for pattern in (
        _HEADER,
        _BEARER,
        _TOOL_PASSWORD,
        _URL_PASSWORD,
        _GO_DSN,
        _WEBHOOK,
        _QUERY_SECRET,
    ):
        spans.extend(s for m in pattern.finditer(text) if (s := _value_span(m)))
    for pattern in (_PAIR, _FLAG, _XML):
        spans.extend(
            s for m in pattern.finditer(text) if looks_secret(m["name"]) and (s := _value_span(m))
        )
    spans.extend(
        s
        for m in _BLOCK_KEY.finditer(text)
        if looks_secret(m["name"]) and (s := _block_span(text, m))
    )
    for secret in {k for k in known if len(k) >= KNOWN_MIN_CHARS}:
        at = text.find(secret)
        while at >= 0:
            spans.append((at, at + len(secret), REDACTED))
            at = text.find(secret, at + 1)
    return _merged(spans)


def _merged(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end, replacement in sorted(spans):
        if merged and start < merged[-1][1]:
            first = merged[-1]
            merged[-1] = (first[0], max(first[1], end), first[2])
        else:
            merged.append((start, end, replacement))
    return merged


def _excerpt(text: str, spans: list[Span], start: int, end: int) -> str:
    """`text[start:end]` with every span that reaches into it replaced, in part or whole."""
    pieces: list[str] = []
    at = start
    for span_start, span_end, replacement in spans:
        if span_end <= start or span_start >= end:
            continue
        pieces.append(text[at : max(span_start, start)])
        pieces.append(replacement)
        at = min(span_end, end)
    pieces.append(text[at:end])
    return "".join(pieces)


def redact_text(text: str) -> str:
    """`text` with credentials replaced (see the module docstring)."""
    return _excerpt(text, secret_spans(text), 0, len(text))


def redact_part(data: bytes, start: int, end: int, known: Iterable[str] = ()) -> str:
    """Bytes `start:end` of `data`, decoded, without any credential `data` shows, also one
    the part holds only the end or the beginning of."""
    text = data.decode("latin-1")  # one character per byte: positions are byte offsets
    known_bytes = [k.encode("utf-8").decode("latin-1") for k in known]
    part = _excerpt(text, secret_spans(text, known_bytes), start, end)
    return part.encode("latin-1").decode("utf-8", "replace")


def _redact_command_line(items: list[str]) -> list[str]:
    """A list of strings read as one command line: `["--password", "x"]` loses `x`."""
    line = " ".join(items)
    spans = secret_spans(line)
    redacted: list[str] = []
    at = 0
    for item in items:
        redacted.append(_excerpt(line, spans, at, at + len(item)))
        at += len(item) + 1
    return redacted


def redact(doc: Any) -> Any:
    """A redacted copy of a Kubernetes answer (an object, a list, or any JSON value)."""
    if isinstance(doc, str):
        return redact_text(doc)
    if not isinstance(doc, dict | list):
        return doc
    doc = copy.deepcopy(doc)
    _redact_in_place(doc, list_kind=None)
    return doc


def _secret_value(name: Any, value: Any) -> bool:
    """A string or number under a name that looks secret (a flag such as `true` is kept)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return False
    return value not in ("", REDACTED) and isinstance(name, str) and looks_secret(name)


def _redact_in_place(doc: Any, *, list_kind: str | None) -> None:
    if isinstance(doc, list):
        if doc and all(isinstance(item, str) for item in doc):
            doc[:] = _redact_command_line(doc)
            return
        for item in doc:
            _redact_in_place(item, list_kind=list_kind)
        return
    if not isinstance(doc, dict):
        return
    # List items come without their kind: it is the list's kind without "List".
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) else list_kind
    if kind == "Secret":
        _redact_secret(doc)
    _redact_last_applied(doc, secret=kind == "Secret")
    entry_name = doc.get("name", doc.get("key"))
    if _secret_value(entry_name, doc.get("value")):
        doc["value"] = REDACTED
    own_kind = doc.get("kind")
    item_kind = (
        own_kind.removesuffix("List")
        if isinstance(own_kind, str) and own_kind.endswith("List")
        else None
    )
    for key, value in doc.items():
        if _secret_value(key, value):
            doc[key] = REDACTED
        elif isinstance(value, str):
            doc[key] = redact_text(value)
        elif key == "items":
            _redact_in_place(value, list_kind=item_kind or list_kind)
        else:
            _redact_in_place(value, list_kind=None)


def _redact_secret(obj: dict[str, Any]) -> None:
    for key in ("data", "stringData"):
        if isinstance(obj.get(key), dict):
            obj[key] = {k: REDACTED for k in obj[key]}
        elif key in obj:
            obj[key] = REDACTED


def _redact_last_applied(obj: dict[str, Any], *, secret: bool) -> None:
    annotations = (obj.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict) or LAST_APPLIED not in annotations:
        return
    if secret:
        annotations[LAST_APPLIED] = REDACTED
        return
    try:
        applied = json.loads(annotations[LAST_APPLIED])
    except (TypeError, ValueError):
        annotations[LAST_APPLIED] = REDACTED
        return
    if isinstance(applied, dict) and applied.get("kind") == "Secret":
        annotations[LAST_APPLIED] = REDACTED
        return
    _redact_in_place(applied, list_kind=None)
    annotations[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"))


def scrub(value: Any, secrets: Iterable[str]) -> Any:
    """`value` (text, or JSON-like data) with every occurrence of each known secret replaced."""
    known = sorted({s for s in secrets if s and len(s) >= KNOWN_MIN_CHARS}, key=len, reverse=True)
    if not known:
        return value
    return _scrub(value, known)


def _scrub(value: Any, known: list[str]) -> Any:
    if isinstance(value, str):
        for secret in known:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, known) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, known) for v in value]
    return value


__all__ = [
    "LAST_APPLIED",
    "REDACTED",
    "looks_secret",
    "redact",
    "redact_part",
    "redact_text",
    "scrub",
    "secret_spans",
]
