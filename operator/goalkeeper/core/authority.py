"""Authority from the person's words: which grants of an extraction the engine keeps.

The extract step's model reads only the task and the stop rule and quotes the words that
give each grant. A model may still invent a grant, or read a prohibition as one, so the
engine keeps a grant only when

- its quote is in the spec text (compared after case and whitespace normalisation);
- no sentence the quote comes from forbids anything (`must not`, `never`, `only observe`);
- the quote names what it grants: an allowed resource's name (and its kind, where the
  entry says one), a URL's host, a command's program, a word of any other entry;
- for an action, no forbidding sentence of the spec forbids every change, or names the
  action's verb (or a verb that means any change) for an object the action names.

Forbidding sentences are kept as prohibitions whatever the model listed; those that forbid
any change to something are also recorded as forbidden changes. Restrictions the model
found (forbidden changes, protected contracts, checks, stop conditions) only narrow and are
kept as written.

The operators' instructions (the cluster's and the namespace's, pinned with the spec
generation) count as words too: a prohibition in them holds like one of the task, and a
grant may quote them, recorded with whose words the quote is. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from goalkeeper.core.models import (
    INSTRUCTIONS_CONFIGMAP,
    INSTRUCTIONS_KEY,
    INSTRUCTIONS_MAX,
    LIST_ENTRIES,
    LIST_ENTRY_MAX,
    LIST_TOTAL_MAX,
    RECORD_ENTRIES,
    RECORD_QUOTE_MAX,
    AuthorityExtraction,
    AuthorityRecord,
    AuthorizedAction,
    Contract,
    Grant,
    Instructions,
    Money,
    MonitorSpec,
    MonitorStatus,
    QuotedEntry,
    Words,
)
from goalkeeper.core.mutations import KINDS, CommandTarget, KubeTarget, UrlTarget, parse_entry

# A quote must be at least this long and this many words: "Job" alone quotes nothing.
QUOTE_MIN_CHARS, QUOTE_MIN_WORDS = 6, 2

_CHARS = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u00a0": " ",
    }
)
# A sentence ends at . ! ? before a space, at a blank line, or before a list item; a
# single line break inside a paragraph is only wrapping.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n\s*|\n(?=\s*(?:[-*\u2022]|\d+[.)])\s)")
# A forbidding sentence's clauses each name their own verbs and objects.
_CLAUSE = re.compile(r";")
_EDGES = " \t\"'`()[]{}<>.,;:!?"
_WORD = re.compile(r"[a-z0-9][a-z0-9._/:-]*[a-z0-9]|[a-z0-9]")

_FORBIDS = re.compile(
    r"\b(?:must\s+not|mustn't|may\s+not|can\s*not|can't|could\s+not|do\s+not|don't|"
    r"does\s+not|doesn't|shall\s+not|should\s+not|shouldn't|will\s+not|won't|never|"
    r"not\s+(?:be\s+)?(?:allowed|permitted|authori[sz]ed)|forbidden|prohibited|"
    r"(?:is|are)\s+not\s+to|no\s+(?:changes?|writes?|mutations?|actions?|edits?)\b|"
    r"nothing\s+(?:may|must|should|can|is\s+to)\b|"
    r"(?:nobody|no\s+(?:one|monitors?|steps?|teams?|users?|agents?))\s+"
    r"(?:may|must|should|can|shall|is\s+to|are\s+to)\b|"
    r"without\s+(?:changing|touching|modifying|altering|mutating)|"
    r"leave\s+.*\b(?:alone|untouched|as\s+it\s+is|as\s+is)|"
    r"(?:only|just|merely)\s+(?:to\s+)?(?:observe|watch|monitor|report|read|look|check|inspect)|"
    r"(?:observe|watch|report|read|monitor)[\s-]only|read[\s-]only)"
)
# A sentence that allows watching alone forbids every change.
_ONLY_WATCH = re.compile(
    r"\b(?:(?:only|just|merely)\s+(?:to\s+)?(?:observe|watch|monitor|report|read|look|check|"
    r"inspect)|(?:observe|watch|report|read|monitor)[\s-]only|read[\s-]only)\b"
)
_EVERYTHING = re.compile(
    r"\b(?:anything|everything|any\s+(?:thing|object|resource|workload|change)s?|"
    r"all\s+(?:objects|resources|workloads|things))\b(?!\s+(?:else|other))"
)
_PRONOUN = re.compile(r"\b(?:it|them|they|this one|these)\b")
# Words of a forbidding clause that name no object.
_NOT_NAMES = frozenset(
    [
        "never",
        "forbidden",
        "prohibited",
        "allowed",
        "permitted",
        "must",
        "not",
        "don't",
        "do",
        "cannot",
        "can't",
        # Who may not: the subject of "No monitor may delete ...", never its object.
        "nobody",
        "no",
        "one",
        "monitor",
        "monitors",
        "step",
        "steps",
        "team",
        "teams",
        "user",
        "users",
        "agent",
        "agents",
        "here",
    ]
)
_ELSE = re.compile(r"\b(?:else|other|others|otherwise)\b")
# Verbs that mean any change at all.
_ANY_CHANGE = re.compile(
    r"\b(?:chang|modif|touch|alter|mutat|edit|tamper|interfer|act\b|acting|writ|mess)\w*"
)
# Verb stems of the changes an action makes; the first one in its text is its verb.
_VERBS = (
    "resum",
    "unsuspend",
    "suspend",
    "paus",
    "restart",
    "rollout",
    "roll out",
    "redeploy",
    "scal",
    "delet",
    "remov",
    "creat",
    "appl",
    "patch",
    "updat",
    "set",
    "rerun",
    "re-run",
    "retr",
    "run",
    "start",
    "stop",
    "kill",
    "evict",
    "cordon",
    "drain",
    "restor",
    "rollback",
    "roll back",
    "upgrad",
    "install",
    "uninstall",
    "purg",
    "clean",
    "replac",
    "recreat",
    "trigger",
    "fix",
    "repair",
    "reset",
    "unpaus",
)
_VERB = re.compile(r"\b(" + "|".join(re.escape(v) for v in _VERBS) + r")\w*")
# Every word that names a kind, to the kind it names.
_KIND_OF = {alias: k.kind.lower() for k in KINDS for alias in (k.kind.lower(), k.plural, *k.short)}
# "Deployment pricing-worker": a Kind as Kubernetes spells it, then an object's name. Only
# the capitalised Kind counts ("its pods read the fix" names no pod "read").
_KIND_WORD = {k.kind: k.plural for k in KINDS}
_NAMED_OBJECT = re.compile(r"\b([A-Z][A-Za-z]+)\s+`?([a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)`?")
_STOPWORDS_TEXT = (
    "a an the this that these those it its them they their there here of in on at to for "
    "from by with and or but if when while until as is are be been being was were may must "
    "can could should would will shall not no nor do does did don't any all some each every "
    "you your we our i me my monitor goalkeeper namespace only also then than so such "
    "anything everything nothing else other others otherwise after before once again more "
    "which who what whose where how why via per into onto up down out over"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())


def _flat(text: str) -> str:
    """Casefolded, typographic quotes and dashes made plain, whitespace collapsed."""
    return " ".join(text.translate(_CHARS).casefold().split())


# A line ending in a colon with a list under it: one sentence, its items as clauses.
_LISTED = re.compile(r":[ \t]*\n((?:[ \t]*(?:[-*\u2022]|\d+[.)])[ \t]+[^\n]*(?:\n|$))+)")
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def _fold_lists(text: str) -> str:
    def fold(match: re.Match[str]) -> str:
        items = [_ITEM.sub("", line).strip().rstrip(".;") for line in match.group(1).splitlines()]
        return ": " + "; ".join(item for item in items if item) + ".\n\n"

    return _LISTED.sub(fold, text)


def sentences(text: str) -> list[str]:
    """The sentences of the person's words, as written, each on one line; a list under a
    line that ends in a colon is one sentence with that line (so "must never: - a - b"
    forbids both)."""
    parts = _SENTENCE_END.split(_fold_lists(text))
    return [" ".join(part.split()) for part in parts if part and part.strip()]


def _words(text: str) -> set[str]:
    """The words of a text, and the parts of each path-like one (`jobs/build`)."""
    found = set(_WORD.findall(_flat(text)))
    return found | {part for word in found for part in re.split(r"[/:]", word) if part}


def forbids(sentence: str) -> bool:
    """Whether a sentence forbids something (a grant quoted from it is no grant)."""
    return _FORBIDS.search(_flat(sentence)) is not None


@dataclass(frozen=True)
class _Prohibition:
    sentence: str
    everything: bool  # forbids every change to every object
    any_verb: bool  # names a verb that means any change
    verbs: frozenset[str]
    objects: frozenset[str]  # empty: every object (a pronoun or nothing named)
    complement: bool  # "anything else": what is not granted, which nothing grants anyway

    def stops(self, verbs: set[str], named: set[str]) -> bool:
        """Whether this prohibition forbids an action with these verbs on these words."""
        if self.everything:
            return True
        if self.complement:
            return False
        if not (self.any_verb or self.verbs & verbs):
            return False
        return not self.objects or bool(self.objects & named)


def _prohibitions(sentence: str) -> list[_Prohibition]:
    """What a forbidding sentence forbids, clause by clause: the negation at its start
    holds for every clause (`Not allowed: changing X; deleting anything`)."""
    whole = _flat(sentence)
    if _ONLY_WATCH.search(whole):
        return [_Prohibition(sentence, True, True, frozenset(), frozenset(), False)]
    found = []
    for clause in _CLAUSE.split(whole):
        verbs = frozenset(match.group(1) for match in _VERB.finditer(clause))
        any_verb = _ANY_CHANGE.search(clause) is not None
        if not (verbs or any_verb):
            continue
        universal = _EVERYTHING.search(clause) is not None
        words = _words(clause)
        kinds = {_KIND_OF[w] for w in words if w in _KIND_OF}
        names = {
            w
            for w in words
            if w not in _STOPWORDS
            and w not in _KIND_OF
            and w not in _NOT_NAMES
            and not _VERB.fullmatch(w)
            and not _ANY_CHANGE.fullmatch(w)
        }
        if universal or _PRONOUN.search(clause):
            names, kinds = set(), set()  # everything, or whatever the task named before
        found.append(
            _Prohibition(
                sentence=sentence,
                everything=universal and any_verb,
                any_verb=any_verb,
                verbs=verbs,
                objects=frozenset(names or kinds),
                complement=not universal and _ELSE.search(clause) is not None and not names,
            )
        )
    return found


@dataclass(frozen=True)
class _Source:
    """The words authority may be read from, split into sentences, with where each lies in
    the flat text and whose words it is."""

    sentences: tuple[str, ...]
    origins: tuple[Words, ...]
    flat: str
    spans: tuple[tuple[int, int], ...]

    @classmethod
    def of(cls, texts: Iterable[tuple[Words, str]]) -> _Source:
        found = [(origin, s) for origin, text in texts for s in sentences(text)]
        spans, parts, at = [], [], 0
        for _, sentence in found:
            flat = _flat(sentence)
            spans.append((at, at + len(flat)))
            parts.append(flat)
            at += len(flat) + 1
        return cls(
            tuple(s for _, s in found), tuple(o for o, _ in found), " ".join(parts), tuple(spans)
        )

    def _found(self, quote: str) -> list[int] | None:
        wanted = _flat(quote).strip(_EDGES)
        if len(wanted) < QUOTE_MIN_CHARS or len(wanted.split()) < QUOTE_MIN_WORDS:
            return None
        start = self.flat.find(wanted)
        if start < 0:
            return None
        end = start + len(wanted)
        return [i for i, (a, b) in enumerate(self.spans) if a < end and start < b]

    def locate(self, quote: str) -> list[str] | None:
        """The sentences a quote comes from, or None when it is not in these words."""
        found = self._found(quote)
        return None if found is None else [self.sentences[i] for i in found]

    def origin(self, quote: str) -> Words | None:
        """Whose words a quote is; None when it is not in them or runs across two sources."""
        found = self._found(quote) or []
        origins = {self.origins[i] for i in found}
        return origins.pop() if len(origins) == 1 else None

    def origin_of(self, sentence: str) -> Words:
        return self.origins[self.sentences.index(sentence)]


# How a record names each source of words, in a refusal.
WHOSE = {
    Words.task: "the task",
    Words.stopWhen: "the stop rule",
    Words.clusterInstructions: "the cluster instructions",
    Words.namespaceInstructions: "the namespace instructions",
}


def words_of(spec: MonitorSpec, instructions: Instructions | None) -> list[tuple[Words, str]]:
    """Every text authority may be read from, with whose it is: the person's task and stop
    rule, then the operators' instructions pinned with them."""
    texts = [(Words.task, spec.task), (Words.stopWhen, spec.stopWhen)]
    if instructions is not None:
        texts += [
            (Words.clusterInstructions, instructions.cluster),
            (Words.namespaceInstructions, instructions.namespace),
        ]
    return texts


def _verbs(text: str) -> set[str]:
    return {match.group(1) for match in _VERB.finditer(_flat(text))}


# Verbs that say how, not what: an action described with one agrees with any grant.
_HOW = frozenset({"set", "patch", "updat", "fix", "repair", "appl"})
# Verbs that name one change between them.
_SAME = (
    frozenset({"resum", "unsuspend", "unpaus"}),
    frozenset({"restart", "rollout", "roll out", "redeploy"}),
    frozenset({"rerun", "re-run", "retr", "run", "start", "trigger"}),
    frozenset({"delet", "remov", "purg", "clean"}),
    frozenset({"creat", "install", "recreat"}),
)


def _verbs_agree(action: set[str], quote: set[str]) -> bool:
    """Whether an action's verbs are among those its quote allows (either side without a
    verb, or with one that only says how, agrees)."""
    if not action or not quote or action & _HOW or quote & _HOW:
        return True
    widened = set(quote).union(*(same for same in _SAME if same & quote))
    return bool(action & widened)


# Grants that let something change: their quote must allow a change, in so many words or
# by naming one, not only state the goal ("Finish Job build") or what to watch.
_CHANGES = frozenset({"allowedResources", "authorizedActions"})
_PERMITS = re.compile(
    r"\b(?:may|can|allow(?:s|ed)?|permitted|permits?|authori[sz]ed|ok(?:ay)? to|free to)\b"
)


def _allows_a_change(sentence: str) -> bool:
    flat = _flat(sentence)
    return _PERMITS.search(flat) is not None or _VERB.search(flat) is not None


def _significant(text: str) -> set[str]:
    """The words of a text that are not a verb or filler."""
    return {w for w in _words(text) if w not in _STOPWORDS and not _VERB.match(w)}


def _shares_word(text: str, quote: str) -> bool:
    """A quote names a grant when they share a word that is not a verb or filler."""
    return bool(_significant(text) & _words(quote))


def _names_target(entry: str, where: Sequence[str], quote: str) -> bool:
    """A quote names what an allowed-resource entry names: the object's name (the fixed
    part of a glob), with its kind in the same sentences; a URL's host; a program."""
    target = parse_entry(entry, "")
    flat = _flat(quote)
    if isinstance(target, CommandTarget):
        return target.argv0.casefold() in _words(quote)
    if isinstance(target, UrlTarget):
        return target.host in flat
    if not isinstance(target, KubeTarget):
        return False
    fixed = [part for part in _flat(target.name).split("*") if part]
    if not fixed or not all(part in flat for part in fixed):
        return False
    if "*" not in target.name and target.name.casefold() not in _words(quote):
        return False
    named = {_KIND_OF[w] for s in where for w in _words(s) if w in _KIND_OF}
    kind = (target.kind or target.resource).casefold()
    return _KIND_OF.get(kind, kind) in named


def _objects_named(quote: str) -> list[str]:
    """`plural/name` of each object `quote` names with its kind in words, in order."""
    found = []
    for kind, name in _NAMED_OBJECT.findall(quote):
        plural = _KIND_WORD.get(kind)
        # "the build Job from saved outputs" names no Job "from"; a verb is no name either.
        if plural is not None and name not in _STOPWORDS and not _VERB.match(name):
            found.append(f"{plural}/{name}")
    return list(dict.fromkeys(found))


def is_current(status: MonitorStatus, generation: int | None) -> bool:
    """Whether authority read from the words of spec `generation` is recorded."""
    # authorityGeneration is written beside the record for earlier readers; the record's
    # own generation decides.
    return (
        status.contract is not None
        and status.authority is not None
        and status.authority.generation == generation
    )


def instructions_needed(status: MonitorStatus, generation: int | None) -> bool:
    """Whether a decision for a Monitor at spec `generation` may read its task, so that its
    caller reads the operators' instructions first (they are pinned at that reading)."""
    return not is_current(status, generation)


@dataclass(frozen=True)
class PinnedAuthority:
    """The authority the engine records for a spec generation."""

    contract: Contract
    actions: list[AuthorizedAction]
    record: AuthorityRecord


_GRANT_LISTS = (
    ("allowedResources", "allowed resource"),
    ("allowedSystems", "allowed system"),
    ("allowedFiles", "allowed file"),
    ("allowedRecoveryActions", "allowed recovery action"),
)


# Why a grant is dropped for its quote alone: another sentence of the same words may give it.
QUOTE_NOT_FOUND = "its quote is not in the task, the stop rule or the instructions"
QUOTE_ACROSS_SOURCES = "its quote runs across two sources of words"
QUOTE_NAMES_NOT = "its quote does not name it"
QUOTE_ALLOWS_NO_CHANGE = "its quote allows no change (it says what to finish or watch)"
MISQUOTED = (QUOTE_NOT_FOUND, QUOTE_ACROSS_SOURCES, QUOTE_NAMES_NOT, QUOTE_ALLOWS_NO_CHANGE)


def pin(
    spec: MonitorSpec,
    extraction: AuthorityExtraction,
    *,
    generation: int | None,
    author: str = "",
    instructions: Instructions | None = None,
) -> PinnedAuthority:
    """The grants of `extraction` that the person's words (and the operators' `instructions`)
    give, and every refusal. A prohibition in any of them holds for every action."""
    source = _Source.of(words_of(spec, instructions))
    prohibitions = [p for s in source.sentences if forbids(s) for p in _prohibitions(s)]
    grants: list[Grant] = []
    dropped: list[str] = []
    kept_lists: dict[str, list[str]] = {}

    def refusal(field: str, entry: str, quote: str) -> str | None:
        # An object must be named with its kind; any other grant by one of its words.
        named = None if field == "allowedResources" else _shares_word
        where = source.locate(quote)
        if where is None:
            return QUOTE_NOT_FOUND
        if source.origin(quote) is None:
            return QUOTE_ACROSS_SOURCES
        if any(forbids(s) for s in where):
            return "it is quoted from a sentence that forbids"
        if not (named(entry, quote) if named else _names_target(entry, where, quote)):
            return QUOTE_NAMES_NOT
        if field in _CHANGES and not any(_allows_a_change(s) for s in where):
            return QUOTE_ALLOWS_NO_CHANGE
        instructed = source.origin(quote) in (
            Words.clusterInstructions,
            Words.namespaceInstructions,
        )
        if instructed and field in _CHANGES and not any(_PERMITS.search(_flat(s)) for s in where):
            # The operators' rules say how things are done; only their explicit permissions grant.
            return "an instruction grants a change only in so many words (may, allowed, permitted)"
        return None

    def judge(
        field: str, noun: str, entry: str, quote: str, label: str = "", also: Sequence[str] = ()
    ) -> bool:
        # `also`: other quotes of the same reading; the first that passes every check is the
        # grant's (a small model often quotes the goal for an object and the grant for its action).
        why = refusal(field, entry, quote)
        if why is not None:
            quote = next((q for q in also if refusal(field, entry, q) is None), "")
        if why is not None and not quote:
            dropped.append(_clip(f"{noun} {label or repr(entry)}: {why}"))
            return False
        grants.append(
            Grant(
                field=field,
                entry=_clip(entry),
                quote=_clip(quote, RECORD_QUOTE_MAX),
                source=source.origin(quote),
            )
        )
        return True

    # Actions first: an allowed resource may stand on the quote of an action that stands.
    actions: list[AuthorizedAction] = []
    action_quotes: list[str] = []
    for action in extraction.authorizedActions:
        text = f"{action.id} {action.description}"
        if not judge("authorizedActions", "authorized action", text, action.quote, repr(action.id)):
            continue
        verbs = _verbs(text) or _verbs(action.quote)
        if not _verbs_agree(verbs, _verbs(action.quote)):
            grants.pop()
            dropped.append(
                _clip(f"authorized action {action.id!r}: its quote allows another change")
            )
            continue
        stopping = next((p for p in prohibitions if p.stops(verbs, _words(text))), None)
        if stopping is not None:
            grants.pop()
            whose = WHOSE[source.origin_of(stopping.sentence)]
            forbidding = f"{whose} forbid{'' if whose.endswith('s') else 's'} it: "
            forbidding += repr(stopping.sentence)
            dropped.append(_clip(f"authorized action {action.id!r}: {forbidding}"))
            continue
        grants[-1] = grants[-1].model_copy(update={"entry": _clip(action.id)})
        actions.append(
            AuthorizedAction(id=action.id, description=action.description, paid=action.paid)
        )
        action_quotes.append(action.quote)
    action_grants, action_drops = grants[:], dropped[:]
    grants.clear()
    dropped.clear()

    for field, noun in _GRANT_LISTS:
        quoted: list[QuotedEntry] = getattr(extraction, field)
        also = action_quotes if field == "allowedResources" else ()
        kept_lists[field] = [
            q.entry for q in quoted if judge(field, noun, q.entry, q.quote, also=also)
        ]
    # An object a standing action's own words name with its kind ("You may restart
    # Deployment pricing-worker") is an allowed resource by those words, read or not.
    for quote in action_quotes:
        for entry in _objects_named(quote):
            kept = kept_lists["allowedResources"]
            if entry not in kept and refusal("allowedResources", entry, quote) is None:
                kept.append(entry)
                grants.append(
                    Grant(
                        field="allowedResources",
                        entry=_clip(entry),
                        quote=_clip(quote, RECORD_QUOTE_MAX),
                        source=source.origin(quote),
                    )
                )
    grants.extend(action_grants)
    dropped.extend(action_drops)

    ceiling = _ceiling(extraction, source, grants, dropped) or _ceiling_in_words(spec, grants)
    actions = _paid_by_their_price(actions, spec)
    found = list(dict.fromkeys(p.sentence for p in prohibitions))
    # A prohibition of any change to something is a forbidden change as it stands; one of
    # a verb only is enforced above, on the actions.
    forbidden = [
        p.sentence for p in prohibitions if p.everything or (p.any_verb and not p.complement)
    ]
    contract = Contract(
        goal=extraction.goal,
        allowedResources=_fit(kept_lists["allowedResources"]),
        allowedSystems=_fit(kept_lists["allowedSystems"]),
        allowedFiles=_fit(kept_lists["allowedFiles"]),
        allowedRecoveryActions=_fit(kept_lists["allowedRecoveryActions"]),
        forbiddenChanges=_fit([*extraction.forbiddenChanges, *forbidden]),
        costCeiling=ceiling,
        protectedContracts=extraction.protectedContracts,
        requiredChecks=extraction.requiredChecks,
        stopConditions=extraction.stopConditions,
    )
    record = AuthorityRecord(
        generation=generation,
        author=author[:512],
        grants=grants[:RECORD_ENTRIES],
        dropped=dropped[:RECORD_ENTRIES],
        prohibitions=_fit([_clip(s) for s in found]),
    )
    return PinnedAuthority(contract, actions, record)


def without_found(contract: Contract, record: AuthorityRecord | None) -> Contract:
    """The contract without the forbidden changes the engine found itself: an observation
    restates what the model extracted, and cannot remove what the engine keeps anyway."""
    found = {_flat(s) for s in (record.prohibitions if record is not None else [])}
    kept = [e for e in contract.forbiddenChanges if _flat(e) not in found]
    return contract.model_copy(update={"forbiddenChanges": kept})


def with_found(contract: Contract, recorded: Contract) -> Contract:
    """`contract` with every forbidden change of the recorded one kept."""
    merged = _fit([*recorded.forbiddenChanges, *contract.forbiddenChanges])
    return contract.model_copy(update={"forbiddenChanges": merged})


def _ceiling(
    extraction: AuthorityExtraction,
    source: _Source,
    grants: list[Grant],
    dropped: list[str],
) -> Money | None:
    """The cost ceiling, when its quote is in the person's words and holds its amount.
    A ceiling is usually written as a prohibition ("must not exceed"), so that is allowed."""
    quoted = extraction.costCeiling
    if quoted is None:
        return None
    where = source.locate(quoted.quote)
    amounts = {float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", quoted.quote)}
    amount = float(quoted.amount)
    # What a person's run may spend is theirs to say: the operators' rules cannot raise it.
    theirs = source.origin(quoted.quote) in (Words.task, Words.stopWhen)
    if where is None or not theirs or amount not in amounts:
        why = (
            "its quote is not in the task or the stop rule"
            if where is None or not theirs
            else ("its quote does not state that amount")
        )
        dropped.append(_clip(f"cost ceiling {amount:g} {quoted.currency}: {why}"))
        return None
    grants.append(
        Grant(
            field="costCeiling",
            entry=f"{amount:g} {quoted.currency}",
            quote=_clip(quoted.quote, RECORD_QUOTE_MAX),
            source=source.origin(quoted.quote),
        )
    )
    return Money(amount=quoted.amount, currency=quoted.currency)


# "capped at 10 USD", "must not exceed $40", "a budget of 25 EUR": a spending limit.
_CAP = re.compile(
    r"\b(?:capped\s+at|cap\s+of|at\s+most|not\s+exceed|no\s+more\s+than|ceiling\s+of|"
    r"limit\s+of|limited\s+to|budget\s+of|up\s+to)\s+(?:usd\s*|\$\s*)?"
    r"(\d[\d,]*(?:\.\d+)?)\s*(usd|eur|gbp|dollars?)?"
)
# "9 USD per hour", "$12 a run", "costs 3 EUR": a price.
_PRICE = re.compile(r"(?:\$\s*\d|\b\d[\d,]*(?:\.\d+)?\s*(?:usd|eur|gbp|dollars?)\b)")


def _ceiling_in_words(spec: MonitorSpec, grants: list[Grant]) -> Money | None:
    """A spending limit the task or stop rule states, found by the engine itself when the
    reading recorded none: a ceiling only narrows, so it is never left out. One amount only;
    with two different ones the engine cannot tell which is meant and records none."""
    found: dict[tuple[float, str], tuple[str, Words]] = {}
    for origin, text in ((Words.task, spec.task), (Words.stopWhen, spec.stopWhen)):
        for sentence in sentences(text):
            for amount, unit in _CAP.findall(_flat(sentence)):
                currency = {"eur": "EUR", "gbp": "GBP"}.get(unit, "USD")
                found.setdefault((float(amount.replace(",", "")), currency), (sentence, origin))
    if len(found) != 1:
        return None
    [((amount, currency), (sentence, origin))] = found.items()
    grants.append(
        Grant(
            field="costCeiling",
            entry=f"{amount:g} {currency}",
            quote=_clip(sentence, RECORD_QUOTE_MAX),
            source=origin,
        )
    )
    return Money(amount=amount, currency=currency)


# The amount and currency of a price: "$12", "12 USD", "about 3.50 eur".
_PRICE_PARTS = re.compile(
    r"\$\s*(\d[\d,]*(?:\.\d+)?)|\b(\d[\d,]*(?:\.\d+)?)\s*(usd|eur|gbp|dollars?)\b"
)
# A price over time ("9 USD per hour", "$2 a day") is a rate, not what one action costs.
_RATE = re.compile(
    r"\b(?:per|an?|each|every)\s+(?:second|minute|hour|day|week|month)\b|"
    r"/\s*(?:h|hr|hour|d|day)\b|\b(?:hourly|daily|weekly|monthly)\b"
)


def _priced_sentences(spec: MonitorSpec) -> list[str]:
    """The sentences of the task and stop rule that state a price, a spending limit apart."""
    return [
        s
        for text in (spec.task, spec.stopWhen)
        for s in sentences(text)
        if _PRICE.search(_flat(s)) and not _CAP.search(_flat(s))
    ]


def _names(text: str) -> set[str]:
    """What a text names, without its kinds: "Job report" and "Job build" share no name."""
    return _significant(text) - _KIND_OF.keys()


def _prices_it(action: AuthorizedAction, sentence: str) -> bool:
    return bool(_names(f"{action.id} {action.description}") & _names(sentence))


def _paid_by_their_price(
    actions: list[AuthorizedAction], spec: MonitorSpec
) -> list[AuthorizedAction]:
    """The actions, each paid when the task or stop rule prices what it names ("each replica
    of gpu-renderer rents a GPU at 9 USD per hour"): marking an action paid only narrows."""
    priced = _priced_sentences(spec)
    return [
        a
        if a.paid or not any(_prices_it(a, s) for s in priced)
        else a.model_copy(update={"paid": True})
        for a in actions
    ]


def stated_price(spec: MonitorSpec, action: AuthorizedAction) -> Money | None:
    """What the person's words say one run of `action` costs ("each run rents an encoder for
    about 12 USD"): one amount, not a rate over time; None when they state none or several."""
    found: set[tuple[float, str]] = set()
    for sentence in _priced_sentences(spec):
        flat = _flat(sentence)
        if not _prices_it(action, sentence) or _RATE.search(flat):
            continue
        for dollars, amount, unit in _PRICE_PARTS.findall(flat):
            currency = {"eur": "EUR", "gbp": "GBP"}.get(unit, "USD")
            found.add((float((dollars or amount).replace(",", "")), currency))
    if len(found) != 1:
        return None
    [(amount, currency)] = found
    return Money(amount=amount, currency=currency)


def _clip(text: str, limit: int = LIST_ENTRY_MAX) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "\u2026"


def _fit(entries: Sequence[str]) -> list[str]:
    """Entries within a list's bounds, first ones first, each kept once."""
    kept: list[str] = []
    seen: set[str] = set()
    total = 0
    for entry in entries:
        entry = _clip(entry)
        key = _flat(entry)
        if key in seen or len(kept) >= LIST_ENTRIES or total + len(entry) > LIST_TOTAL_MAX:
            continue
        seen.add(key)
        kept.append(entry)
        total += len(entry)
    return kept


def instructions_of(
    cluster: str, namespace_data: dict[str, str] | None, version: str = ""
) -> Instructions | str:
    """The operators' instructions from the cluster's text and the data of the namespace's
    ConfigMap (None: it has none), or why the namespace's cannot be used."""
    where = f"ConfigMap {INSTRUCTIONS_CONFIGMAP}"
    data = namespace_data or {}
    text = data.get(INSTRUCTIONS_KEY, "") if namespace_data is not None else ""
    if namespace_data is not None and INSTRUCTIONS_KEY not in data:
        return f"{where} has no data.{INSTRUCTIONS_KEY}: write the instructions under that key."
    if len(text.strip()) > INSTRUCTIONS_MAX:
        return (
            f"{where}: data.{INSTRUCTIONS_KEY} is {len(text.strip()):,} characters, over the "
            f"bound of {INSTRUCTIONS_MAX:,}; the task is read together with them, so it waits "
            "until they fit."
        )
    return Instructions(cluster=cluster.strip(), namespace=text.strip(), namespaceVersion=version)


def instructions_line(instructions: Instructions | None) -> str:
    """Which of the operators' instructions a reading held, as a clause; empty for none."""
    if instructions is None:
        return ""
    held = []
    if instructions.cluster:
        held.append("the cluster instructions")
    if instructions.namespace:
        held.append(
            f"the namespace instructions (ConfigMap {INSTRUCTIONS_CONFIGMAP}, resourceVersion "
            f"{instructions.namespaceVersion or 'unknown'})"
        )
    return " with " + " and ".join(held) if held else ""


def describe(record: AuthorityRecord) -> list[str]:
    """The record as report lines: what was granted, by which words, and what was refused."""
    lines = []
    for grant in record.grants:
        quote = " ".join(grant.quote.split())
        whose = f" ({WHOSE[grant.source]})" if grant.source not in (None, Words.task) else ""
        lines.append(f'{grant.field} {grant.entry}: "{quote}"{whose}')
    if not record.grants:
        lines.append("no grant: this monitor may only observe")
    lines += [f"refused {entry}" for entry in record.dropped]
    lines += [f"forbidden: {entry}" for entry in record.prohibitions]
    return lines
