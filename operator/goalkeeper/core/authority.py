"""Authority from the person's words: the typed grants the engine keeps for a generation.

What may change is read by the grammar of `core/reading.py` from the task, the stop rule
and the operators' instructions, never by word lists over the model's proposals: a grant
is one verb of a closed vocabulary on exactly one object, read from a clause parsed whole,
and a prohibition read the same way drops every grant it meets. A clause that may bear on
authority but does not parse is *unclear*; no act runs until a person confirms or corrects
the reading (`goalkeeper authority NAME`).

The extract step's model proposes a reading too. Its proposals neither grant nor take away:
every grant the grammar reads from the task and the stop rule stands (one of the operators'
instructions, an offer to every Monitor they cover, only when a proposal names it), and one
whose sentence a proposal quotes takes the id the model gave it; a proposal the engine
cannot read from the words is shown as refused, its sentence as unclear. Restrictions the
model found (forbidden changes, protected contracts, checks, stop conditions) only narrow
and are kept as written. The operators' instructions count as words: their prohibitions
hold like the task's, and a grant may come from them only in so many words (a permission,
not an imperative). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from goalkeeper.core import goals, reading
from goalkeeper.core.models import (
    INSTRUCTIONS_CONFIGMAP,
    INSTRUCTIONS_KEY,
    INSTRUCTIONS_MAX,
    LIST_ENTRIES,
    LIST_ENTRY_MAX,
    LIST_TOTAL_MAX,
    RECORD_ENTRIES,
    RECORD_QUOTE_MAX,
    TYPED_MAX,
    UNCLEAR_MAX,
    AuthorityExtraction,
    AuthorityRecord,
    AuthorizedAction,
    ConditionState,
    Contract,
    FactKind,
    Grant,
    GrantCondition,
    GrantVerb,
    Instructions,
    JobEnd,
    Money,
    MonitorSpec,
    MonitorState,
    MonitorStatus,
    ObjectFacts,
    ObjectRef,
    SyncedBy,
    TypedGrant,
    TypedProhibition,
    UnclearWords,
    Words,
)

# A quote must be at least this long and this many words: "Job" alone quotes nothing.
QUOTE_MIN_CHARS, QUOTE_MIN_WORDS = 6, 2

_EDGES = " \t\"'`()[]{}<>.,;:!?"
_WORD = re.compile(r"[a-z0-9][a-z0-9._/:-]*[a-z0-9]|[a-z0-9]")
_STOPWORDS_TEXT = (
    "a an the this that these those it its them they their there here of in on at to for "
    "from by with and or but if when while until as is are be been being was were may must "
    "can could should would will shall not no nor do does did don't any all some each every "
    "you your we our i me my monitor goalkeeper namespace only also then than so such "
    "anything everything nothing else other others otherwise after before once again more "
    "which who what whose where how why via per into onto up down out over"
)
_STOPWORDS = frozenset(_STOPWORDS_TEXT.split())
_KIND_WORDS = frozenset(k.casefold() for k in reading.PLURALS) | frozenset(reading.PLURALS.values())


def _flat(text: str) -> str:
    """Casefolded, typographic quotes and dashes made plain, whitespace collapsed."""
    return " ".join(text.translate(reading.TYPOGRAPHY).casefold().split())


def sentences(text: str) -> list[str]:
    """The sentences of the person's words, as written, each on one line (a list item is
    a sentence of its own)."""
    return [s.text for s in reading.sentences(text)]


def _words(text: str) -> set[str]:
    """The words of a text, and the parts of each path-like one (`jobs/build`)."""
    found = set(_WORD.findall(_flat(text)))
    return found | {part for word in found for part in re.split(r"[/:]", word) if part}


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


# How a record names each source of words, in a refusal.
WHOSE = {
    Words.task: "the task",
    Words.stopWhen: "the stop rule",
    Words.clusterInstructions: "the cluster instructions",
    Words.namespaceInstructions: "the namespace instructions",
    Words.person: "a person's confirmation",
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


# Prose lists a reading may hold: shown to the observe and repair steps, never a write.
_PROSE_LISTS = (
    ("allowedSystems", "allowed system"),
    ("allowedFiles", "allowed file"),
    ("allowedRecoveryActions", "allowed recovery action"),
)


# Why a proposal of the model is not taken as it stands.
QUOTE_NOT_FOUND = "its quote is not in the task, the stop rule or the instructions"
QUOTE_ACROSS_SOURCES = "its quote runs across two sources of words"
NOT_READ = "the words it quotes give no grant the engine reads with certainty"
SEEN_UNREAD = "the task reader saw a grant here that the engine cannot read with certainty"
# Why a proposal is dropped for its quote alone: another sentence of the same words may give it.
MISQUOTED = (QUOTE_NOT_FOUND, QUOTE_ACROSS_SOURCES, NOT_READ)
REFUSED_UNCLEAR = "words the engine cannot read may take it back; only a person's grant gives it"


def _bounded(unclear: list[UnclearWords]) -> list[UnclearWords]:
    """Unclear sentences within the record's bound; past it, one entry says how many more
    (any of them keeps the reading waiting for a person, so none is lost)."""
    if len(unclear) <= UNCLEAR_MAX:
        return unclear
    more = len(unclear) - UNCLEAR_MAX + 1
    return [
        *unclear[: UNCLEAR_MAX - 1],
        UnclearWords(sentence=f"{more} more sentences", why="the record holds no more of them"),
    ]


def _forbidding(prohibition: TypedProhibition) -> str:
    whose = WHOSE[prohibition.source] if prohibition.source is not None else "the words"
    verb = "forbid" if whose.endswith("s") else "forbids"
    return f"{whose} {verb} it: {prohibition.quote!r}"


def entry_of(ref: ObjectRef) -> str:
    """A mutation-set entry naming exactly one object: `jobs/etl`, `batch/jobs/etl`."""
    plural = reading.PLURALS[ref.kind]
    return f"{ref.namespace}/{plural}/{ref.name}" if ref.namespace else f"{plural}/{ref.name}"


def action_of(grant: TypedGrant) -> AuthorizedAction:
    """The authorized action an act names to use a grant."""
    return AuthorizedAction(
        id=grant.id,
        description=_clip(reading.grant_line(grant), 1000),
        paid=grant.paid,
        verb=grant.verb,
    )


def pin(
    spec: MonitorSpec,
    extraction: AuthorityExtraction,
    *,
    generation: int | None,
    author: str = "",
    instructions: Instructions | None = None,
) -> PinnedAuthority:
    """The grants the person's words (and the operators' `instructions`) give, read by the
    engine; the model's proposals name them, and what they claim beyond them is refused."""
    texts = words_of(spec, instructions)
    source = _Source.of(texts)
    read = reading.read(texts)
    unclear = list(read.unclear)
    dropped: list[str] = []
    candidates = list(read.grants)
    # Every grant the grammar reads from the author's words stands: a model that leaves one
    # out takes no authority away, as one that names more gives none. A proposal quoting a
    # sentence of one grant names it; of several, which it means is not written, so each
    # keeps the grammar's id, and a paid mark marks them all (the safer reading).
    named: dict[int, tuple[str | None, bool]] = {}
    for action in extraction.authorizedActions:
        where = source.locate(action.quote)
        origin = source.origin(action.quote)
        if where is None or origin is None:
            why = QUOTE_NOT_FOUND if where is None else QUOTE_ACROSS_SOURCES
            dropped.append(_clip(f"authorized action {action.id!r}: {why}"))
            continue
        clipped = {reading.clip(w) for w in where}
        quoted = [i for i, g in enumerate(candidates) if g.quote in clipped and g.source == origin]
        for i in quoted:
            gid, paid = named.get(i, (None, False))
            named[i] = (action.id if len(quoted) == 1 else gid, paid or action.paid)
        if quoted:
            continue
        said = any(
            g.quote in clipped
            for g in (*candidates, *(g for g, _ in (*read.dropped, *read.refused)))
        )
        if not said:
            dropped.append(_clip(f"authorized action {action.id!r}: {NOT_READ}"))
            unclear += [
                UnclearWords(sentence=_clip(w, RECORD_QUOTE_MAX), why=SEEN_UNREAD)
                for w in where
                if all(u.sentence != w for u in unclear)
            ]
    grants = _named_by_proposals(candidates, named, [g for g, _ in read.refused])
    dropped += [_clip(f"{reading.grant_line(g)}: {_forbidding(p)}") for g, p in read.dropped]
    dropped += [
        _clip(f"{reading.grant_line(g)}: {REFUSED_UNCLEAR} ({u.sentence!r})")
        for g, u in read.refused
    ]
    read_objects = {
        entry_of(g.object)
        for g in (*grants, *(g for g, _ in (*read.dropped, *read.refused)))
        if g.object is not None
    }
    for entry in extraction.allowedResources:
        if entry.entry not in read_objects:
            dropped.append(_clip(f"allowed resource {entry.entry!r}: {NOT_READ}"))
    prose: dict[str, list[str]] = {}
    record_grants: list[Grant] = []
    for field, noun in _PROSE_LISTS:
        prose[field] = []
        for q in getattr(extraction, field):
            origin = source.origin(q.quote)
            if source.locate(q.quote) is None or origin is None:
                dropped.append(_clip(f"{noun} {q.entry!r}: {QUOTE_NOT_FOUND}"))
                continue
            prose[field].append(q.entry)
            record_grants.append(
                Grant(
                    field=field,
                    entry=_clip(q.entry),
                    quote=_clip(q.quote, RECORD_QUOTE_MAX),
                    source=origin,
                )
            )
    grants = _paid_by_their_price(grants, spec)[:TYPED_MAX]
    actions = [action_of(g) for g in grants]
    ceiling = _ceiling(extraction, source, record_grants, dropped) or _ceiling_in_words(
        spec, record_grants
    )
    # Any change forbidden to one object is a forbidden change as it stands, so an act on
    # it is refused whatever grant it names; a verb forbidden alone is enforced above.
    forbidden = [
        entry_of(p.object)
        for p in read.prohibitions
        if p.object is not None and len(p.forbids) == len(GrantVerb)
    ]
    contract = Contract(
        goal=extraction.goal,
        allowedResources=_fit([entry_of(g.object) for g in grants if g.object is not None]),
        allowedSystems=_fit(prose["allowedSystems"]),
        allowedFiles=_fit(prose["allowedFiles"]),
        allowedRecoveryActions=_fit(prose["allowedRecoveryActions"]),
        forbiddenChanges=_fit([*forbidden, *extraction.forbiddenChanges]),
        costCeiling=ceiling,
        protectedContracts=extraction.protectedContracts,
        requiredChecks=extraction.requiredChecks,
        stopConditions=extraction.stopConditions,
    )
    record = AuthorityRecord(
        generation=generation,
        author=author[:512],
        grants=record_grants[:RECORD_ENTRIES],
        dropped=dropped[:RECORD_ENTRIES],
        prohibitions=_fit(list(dict.fromkeys(_clip(p.quote) for p in read.prohibitions))),
        typedGrants=grants,
        typedProhibitions=list(read.prohibitions)[:TYPED_MAX],
        heldBack=[g for g, _ in read.refused][:TYPED_MAX],
        unclear=_bounded(unclear),
        goal=goals.read_stop_rule(spec.stopWhen, "", spec.task),
    )
    return PinnedAuthority(contract, actions, record)


_OPERATORS_WORDS = (Words.clusterInstructions, Words.namespaceInstructions)


def _named_by_proposals(
    candidates: list[TypedGrant],
    named: dict[int, tuple[str | None, bool]],
    held: list[TypedGrant],
) -> list[TypedGrant]:
    """The grammar's grants in its order, each one a proposal named under the proposal's id
    (unless it is another grant's, or a held-back one's) and paid mark. A grant of the
    operators' instructions is their offer to every Monitor of the scope, not words this
    Monitor's author wrote: it stands only when the task's reading names it."""
    others = {g.id for g in (*candidates, *held)}
    grants: list[TypedGrant] = []
    for i, grant in enumerate(candidates):
        if i not in named and grant.source in _OPERATORS_WORDS:
            continue
        gid, paid = named.get(i, (None, False))
        if gid is None or gid in others - {grant.id}:
            gid = grant.id
        grants.append(grant.model_copy(update={"id": gid, "paid": paid or grant.paid}))
    return grants


# The request id a person's confirmation of the reading names before any act asks for it.
READING_REQUEST = "reading"


def awaits_answer(status: MonitorStatus) -> bool:
    """Whether a person's MonitorApproval may move this monitor: a request is open, or the
    reading left words unclear and nobody has confirmed it yet."""
    record = status.authority
    unconfirmed = record is not None and bool(record.unclear) and not record.confirmedBy
    return status.approval is not None or (unconfirmed and status.monitor is MonitorState.active)


def grant_named(record: AuthorityRecord | None, gid: str) -> TypedGrant | None:
    """The recorded typed grant with this id."""
    grants = record.typedGrants if record is not None else []
    return next((g for g in grants if g.id == gid), None)


def by_code(grant: TypedGrant | None) -> bool:
    """Whether the act of this grant is done by code alone: every verb but a repair, a scale
    within a range (which count is the model's choice) and a key with a choice of values."""
    if grant is None or grant.object is None:
        return False
    if grant.verb is GrantVerb.scale:
        return grant.replicas is not None
    if grant.verb is GrantVerb.setKey:
        return len(grant.values) == 1
    return grant.verb is not GrantVerb.repair


def condition_holds(condition: GrantCondition, facts: Sequence[ObjectFacts]) -> bool | None:
    """Whether a grant's condition holds in the facts code read; None when they lack the
    object (a condition never holds by default)."""
    fact = fact_of(condition.object, facts)
    if fact is None:
        return None
    match condition.state:
        case ConditionState.succeeded:
            return fact.ended is JobEnd.Complete
        case ConditionState.failed:
            return fact.ended is JobEnd.Failed
        case ConditionState.suspended:
            return fact.suspended is True
        case ConditionState.available:
            wanted, available = fact.replicas, fact.availableReplicas
            return wanted is not None and available is not None and available >= wanted
    return None


def condition_coming(condition: GrantCondition, facts: Sequence[ObjectFacts]) -> bool:
    """Whether a grant's condition, not yet holding, may come to hold with no act of ours:
    its Job runs (neither suspended nor ended), or its workload rolls out (replicas wanted,
    fewer available), and no container of its pods has failed (a crash loop, or a first
    failed exit before the kubelet backs off). A suspended object only a person's act moves."""
    fact = fact_of(condition.object, facts)
    if fact is None or condition_holds(condition, facts) is not False:
        return False
    if fact.pods is not None and (fact.pods.crash_looping or fact.pods.lastExit is not None):
        return False
    match condition.state:
        case ConditionState.succeeded | ConditionState.failed:
            return fact.suspended is False and fact.ended is None
        case ConditionState.available:
            return bool(fact.replicas)
    return False


def fact_of(ref: ObjectRef, facts: Sequence[ObjectFacts]) -> ObjectFacts | None:
    """The facts code read of the object `ref` names (facts are of the Monitor's namespace)."""
    if ref.namespace:
        return None
    return next((f for f in facts if f.kind.value == ref.kind and f.name == ref.name), None)


def precondition_unmet(grant: TypedGrant, facts: Sequence[ObjectFacts]) -> str | None:
    """Why the grant's act would do nothing now, by the facts code read: resume needs a
    suspended Job, suspend one that is not, scale to N a count that differs, rerun an ended
    Job, delete-failed-pods a failed pod, and every act on a Job or workload that it exists
    (the facts hold others of its kind, but not it). A key, a repair, a scale within a range
    (whose count the act chooses) and an object in another namespace are not read as facts
    and not checked here; nor is one the observe step's identity could not list, which the
    act step reads before it writes."""
    ref = grant.object
    if ref is None or ref.namespace or grant.verb in (GrantVerb.setKey, GrantVerb.repair):
        return None
    if ref.kind not in FactKind.__members__ or ref.kind == FactKind.ConfigMap:
        return None  # a ConfigMap is read as a fact only for the keys the stop rule names
    fact = fact_of(ref, facts)
    if fact is None:
        # Read facts hold every object of the kind the task names: none, and it is gone.
        return f"{ref.ref} was not found" if any(f.kind.value == ref.kind for f in facts) else None
    match grant.verb:
        case GrantVerb.resume if fact.suspended is not True:
            return f"{ref.ref} is not suspended"
        case GrantVerb.suspend if fact.suspended is True:
            return f"{ref.ref} is already suspended"
        case GrantVerb.scale if grant.replicas is not None and fact.replicas == grant.replicas:
            return f"{ref.ref} already asks for {grant.replicas} replicas"
        case GrantVerb.rerun if fact.ended is None:
            return f"{ref.ref} has not ended"
        case GrantVerb.deleteFailedPods if not fact.failed:
            return f"{ref.ref} has no failed pod"
    return None


def unsynced_refusal(grant: TypedGrant, synced: SyncedBy | None) -> str | None:
    """Why the grant's act is refused on an object a GitOps controller keeps in sync: the
    change would be reverted at its next sync, unless the grant's words say the person
    knows ("... even though Argo CD manages it")."""
    if synced is None or grant.gitopsAcknowledged or grant.object is None:
        return None
    return (
        f"{grant.object.ref} is kept in sync by {synced.controller} ({synced.source}): "
        f"{grant.verb.value} would be reverted at its next sync. Change it in its source, or "
        f"say in the grant that you know ('... even though {synced.controller} manages it')."
    )


_NAMED_PHRASE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._:/-]{0,199})\s*=\s*(\S.*)$")


def person_grants(phrases: Sequence[str]) -> tuple[list[TypedGrant], list[str]]:
    """The grants a person adds when confirming a reading, each phrase read by the same
    grammar as the task (`ID=WORDS` names the grant, as an act names it); a phrase it
    cannot read whole as one grant is refused with why."""
    grants: list[TypedGrant] = []
    refused: list[str] = []
    for phrase in phrases:
        named = _NAMED_PHRASE.match(phrase)
        words = named.group(2) if named else phrase
        read = reading.read([(Words.person, words)])
        if read.unclear or read.refused or read.prohibitions or len(read.grants) != 1:
            refused.append(f"{phrase!r}: not one grant the reading parses whole")
            continue
        [grant] = read.grants
        grants.append(grant.model_copy(update={"id": named.group(1)}) if named else grant)
    return grants, refused


def confirm(
    status: MonitorStatus,
    who: str,
    *,
    grants: Sequence[TypedGrant] = (),
    denied: Sequence[str] = (),
) -> list[str]:
    """A person's confirmation of the reading in `status`, recorded with who they are: the
    grants they deny (by id) are removed, those they add (read from their own words) are
    added, and the contract and authorized actions follow. Returns what changed, as lines.
    The caller has asked the API server whether `who` may make each write the grants
    allow."""
    record, contract = status.authority, status.contract
    assert record is not None and contract is not None
    changed = [f"denied {gid}" for gid in denied if any(g.id == gid for g in record.typedGrants)]
    kept = [g for g in record.typedGrants if g.id not in denied]
    taken = {g.id for g in kept}
    for added in grants:
        gid, n = added.id, 2
        while gid in taken:
            gid, n = f"{added.id}-{n}", n + 1
        taken.add(gid)
        kept.append(added.model_copy(update={"id": gid, "confirmedBy": who[:600]}))
        changed.append(f"granted {gid}: {reading.grant_line(added)}")
    kept = kept[:TYPED_MAX]
    record.typedGrants = kept
    record.confirmedBy = who[:600]
    status.authorizedActions = [action_of(g) for g in kept]
    status.contract = contract.model_copy(
        update={
            "allowedResources": _fit([entry_of(g.object) for g in kept if g.object is not None])
        }
    )
    return changed


def without_found(contract: Contract, record: AuthorityRecord | None) -> Contract:
    """The contract without the forbidden changes the engine found itself: an observation
    restates what the model extracted, and cannot remove what the engine keeps anyway."""
    found = {
        entry_of(p.object)
        for p in (record.typedProhibitions if record is not None else [])
        if p.object is not None
    }
    kept = [e for e in contract.forbiddenChanges if e not in found]
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
# The amount must be money, by its sign or its currency: "at most 2 times" caps nothing.
_CAP = re.compile(
    r"\b(?:capped\s+at|cap\s+of|at\s+most|not\s+exceed|no\s+more\s+than|ceiling\s+of|"
    r"limit\s+of|limited\s+to|budget\s+of|up\s+to)\s+(?:(?:usd\s*|\$\s*)"
    r"(\d[\d,]*(?:\.\d+)?)\s*(usd|eur|gbp|dollars?)?|(\d[\d,]*(?:\.\d+)?)\s*(usd|eur|gbp|dollars?)\b)"
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
            for signed, signed_unit, written, written_unit in _CAP.findall(_flat(sentence)):
                amount, unit = signed or written, signed_unit or written_unit
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
    """What a text names, without its kinds and filler: "Job report" and "Job build" share
    no name."""
    return _words(text) - _STOPWORDS - _KIND_WORDS


def _prices_it(action: AuthorizedAction, sentence: str) -> bool:
    return bool(_names(f"{action.id} {action.description}") & _names(sentence))


def _paid_by_their_price(grants: list[TypedGrant], spec: MonitorSpec) -> list[TypedGrant]:
    """The grants, each paid when the task or stop rule prices what it names ("each replica
    of gpu-renderer rents a GPU at 9 USD per hour"): marking a grant paid only narrows."""
    priced = _priced_sentences(spec)
    return [
        g
        if g.paid or not any(_prices_it(action_of(g), s) for s in priced)
        else g.model_copy(update={"paid": True})
        for g in grants
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


def _whose(source: Words | None) -> str:
    return f" ({WHOSE[source]})" if source not in (None, Words.task) else ""


def describe(record: AuthorityRecord) -> list[str]:
    """The record as report lines: what was granted, by which words, what is forbidden,
    what is unclear and what was refused."""
    lines = []
    for typed in record.typedGrants:
        by = f" (added by {typed.confirmedBy})" if typed.confirmedBy else ""
        quote = " ".join(typed.quote.split())
        lines.append(
            f'grant {typed.id}: {reading.grant_line(typed)}: "{quote}"{_whose(typed.source)}{by}'
        )
    for grant in record.grants:
        quote = " ".join(grant.quote.split())
        lines.append(f'{grant.field} {grant.entry}: "{quote}"{_whose(grant.source)}')
    if not record.typedGrants:
        lines.append("no grant: this monitor may only observe")
    for forbidding in record.typedProhibitions:
        quote = " ".join(forbidding.quote.split())
        lines.append(f'forbidden: {reading.prohibition_line(forbidding)}: "{quote}"')
    lines += [f'unclear: "{u.sentence}": {u.why}' for u in record.unclear]
    lines += [f"refused {entry}" for entry in record.dropped]
    if record.confirmedBy:
        lines.append(f"confirmed by {record.confirmedBy}")
    return lines


def table(record: AuthorityRecord) -> str:
    """The record as a table a person reads in ten seconds: each grant with its verb,
    object, bounds, condition and quote, each prohibition, each unclear sentence and why."""
    rows: list[tuple[str, ...]] = [("", "ID", "VERB", "OBJECT", "LIMITS", "WORDS")]
    for g in record.typedGrants:
        what = g.object.ref if g.object is not None else g.scope
        if g.object is not None and g.object.namespace:
            what += f" (namespace {g.object.namespace})"
        limits = reading.grant_line(g).removeprefix(f"{g.verb.value} ").removeprefix(what)
        rows.append(("grant", g.id, g.verb.value, what, limits.strip(" ,") or "-", _said(g.quote)))
    for p in record.typedProhibitions:
        what = p.object.ref if p.object is not None else "anything"
        if p.exceptFor:
            what += " but " + ", ".join(o.ref for o in p.exceptFor)
        verb = p.verb.value if p.verb else "any change"
        rows.append(("forbidden", "-", verb, what, "-", _said(p.quote)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5]
        for r in rows
    ]
    if len(rows) == 1:
        lines = ["No grant: this monitor may only observe."]
    for u in record.unclear:
        lines.append(f"unclear    {_said(u.sentence)}: {u.why}")
    for entry in record.dropped:
        lines.append(f"refused    {entry}")
    state = (
        f"confirmed by {record.confirmedBy}"
        if record.confirmedBy
        else "waiting for a person: goalkeeper authority NAME --confirm"
        if record.unclear
        else "read whole from the words; no confirmation needed"
    )
    lines.append(f"reading    {state}")
    return "\n".join(lines)


def _said(text: str, limit: int = 90) -> str:
    one = " ".join(text.split())
    return '"' + (one if len(one) <= limit else one[: limit - 1] + "\u2026") + '"'
