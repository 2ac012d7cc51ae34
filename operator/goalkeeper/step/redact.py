"""Redaction of everything the step reads, before the model sees it. Pure, no I/O.

Objects (`redact`):
- Secrets: `data` and `stringData` keep their keys, every value is replaced;
- ConfigMaps: `data` and `binaryData` values under a secret-looking key are replaced;
- any `env` list (containers of pods, templates, custom resources): the `value` of an
  entry whose `name` looks secret is replaced;
- the last-applied annotation is redacted as the object it holds (a Secret's wholesale);
- every other string in the object goes through `redact_text`.

Text (`redact_text`: pod logs, HTTP bodies, files, command output, raw API answers): PEM
private key blocks, `Authorization:` header values, `Bearer` tokens, JWT-looking strings,
passwords in URLs (`scheme://user:PASSWORD@host`), and `KEY=value`, `KEY: value` or
`"key": "value"` pairs whose key looks secret.

A name looks secret when it contains, in any case, one of `SECRET_WORDS`.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted by goalkeeper>"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
SECRET_WORDS = (
    "key",
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "apikey",
    "api_key",
    "private",
)

_SECRET_WORD = "|".join(re.escape(w) for w in SECRET_WORDS)
_PEM = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----.*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)",
    re.DOTALL,
)
# The value runs to the closing quote when quoted, else to the end of the line or a quote.
_AUTHORIZATION = re.compile(
    r"""(?P<key>(?P<q>["']?)(?:proxy-)?authorization(?P=q)\s*[:=]\s*)"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?!\s*<redacted)[^\r\n"']+)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(?P<key>bearer\s+)(?!<redacted)[A-Za-z0-9\-._~+/]+=*", re.IGNORECASE)
_JWT = re.compile(r"\beyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
# `KEY=value`, `"key": value`, or `key: value` with a space (so `keycloak:24.0` stays).
_PAIR = re.compile(
    rf"""(?P<key>(?<![A-Za-z0-9_.\-])(?P<q>["']?)[A-Za-z0-9_.\-]{{0,80}}(?:{_SECRET_WORD})"""
    rf"""[A-Za-z0-9_.\-]{{0,80}}(?P=q)(?:[ \t]*=[ \t]*|(?<=["'])[ \t]*:[ \t]*|:[ \t]+))"""
    r"""(?P<value>"[^"\n]*"|'[^'\n]*'|(?!<redacted)[^\s,;&"'}\]]+)""",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"(?P<key>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?!<redacted)[^/\s@]+(?=@)")
_SECRET_NAME = re.compile(_SECRET_WORD, re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """Whether a key, variable or field name looks like it holds a credential."""
    return bool(_SECRET_NAME.search(name))


def _quoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return f"{value[0]}{REDACTED}{value[0]}"
    return REDACTED


def _keep_key(match: re.Match[str]) -> str:
    return match.group("key") + _quoted(match.group("value"))


def redact_text(text: str) -> str:
    """`text` with credentials replaced (see the module docstring)."""
    text = _PEM.sub(f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----", text)
    text = _AUTHORIZATION.sub(_keep_key, text)
    text = _BEARER.sub(lambda m: m.group("key") + REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    text = _URL_PASSWORD.sub(lambda m: m.group("key") + REDACTED, text)
    return _PAIR.sub(_keep_key, text)


def redact(doc: Any) -> Any:
    """A redacted copy of a Kubernetes answer (an object, a list, or any JSON value)."""
    if isinstance(doc, str):
        return redact_text(doc)
    if not isinstance(doc, dict | list):
        return doc
    doc = copy.deepcopy(doc)
    _redact_in_place(doc, list_kind=None)
    return doc


def _redact_in_place(doc: Any, *, list_kind: str | None) -> None:
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            if isinstance(item, str):
                doc[i] = redact_text(item)
            else:
                _redact_in_place(item, list_kind=list_kind)
        return
    if not isinstance(doc, dict):
        return
    # List items come without their kind: it is the list's kind without "List".
    kind = doc.get("kind") if isinstance(doc.get("kind"), str) else list_kind
    if kind == "Secret":
        _redact_secret(doc)
    elif kind == "ConfigMap":
        _redact_config_map(doc)
    _redact_last_applied(doc, secret=kind == "Secret")
    env = doc.get("env")
    for entry in env if isinstance(env, list) else []:
        if isinstance(entry, dict) and "value" in entry and looks_secret(str(entry.get("name"))):
            entry["value"] = REDACTED
    own_kind = doc.get("kind")
    item_kind = (
        own_kind.removesuffix("List")
        if isinstance(own_kind, str) and own_kind.endswith("List")
        else None
    )
    for key, value in doc.items():
        if isinstance(value, str):
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


def _redact_config_map(obj: dict[str, Any]) -> None:
    for key in ("data", "binaryData"):
        values = obj.get(key)
        if isinstance(values, dict):
            for name in values:
                if looks_secret(str(name)):
                    values[name] = REDACTED


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
    known = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)
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
    "SECRET_WORDS",
    "looks_secret",
    "redact",
    "redact_text",
    "scrub",
]
