"""The stop rule read into typed predicates over facts, and their value. Pure, no I/O.

A Monitor's `stopWhen` is plain English. Each sentence is read whole by a small positive grammar
into leaves: a Job's end or state, a workload's replica counts or rollout, crash-looping pods, a
CronJob's suspension or last run, a ConfigMap key's value, a count of checks or minutes. A part
the grammar cannot read with certainty becomes a `judged` leaf whose words a model answers:
never a guess, never dropped.

The rule is kept in disjunctive normal form, with no recursive type, so that a CRD status can
hold it: the run is done when every leaf of some `done` group holds, and given up when any
`giveUp` leaf holds. "and" binds tighter than "or". A limit (checks, minutes), a failed Job and
crash-looping pods only ever end a run as given up: they meet no goal.

Sentences combine so that no condition is lost: each "Stop when …" sentence is one alternative;
a sentence without a lead is a condition of every alternative when the rule has no such sentence
or when it says what must hold ("must", "should"); otherwise it is context, kept in `unclear`.
A sentence the authority grammar reads as a grant or prohibition is left to it (core/reading.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, TypeVar

from pydantic import Field, ValidationError

from goalkeeper.core.models import (
    _FAILURES,
    _FITS,
    _LIMITS,
    GROUPS_MAX,
    LEAVES_MAX,
    LIST_ENTRY_MAX,
    GoalLeaf,
    GoalRule,
    GoalState,
    Identifier,
    JobEnd,
    LeafKind,
    Model,
    ObjectFacts,
    ObjectRef,
    Observation,
    ObservedStopReason,
    PodsFacts,
    Route,
    StopReason,
    Words,
    WorkState,
)
from goalkeeper.core.reading import (
    _KINDS,
    _RESERVED,
    TYPOGRAPHY,
    Sentence,
    _count,
    _Cursor,
    _mentions,
    _name,
    _names,
    _NoParse,
    _object,
    _objects,
    _phrases,
    _set,
    _table,
    clip,
    read,
    sentences,
    tokens,
)

# --- the record ----------------------------------------------------------------------------------


# --- words ---------------------------------------------------------------------------------------

# reading.tokens' words, with case kept for a ConfigMap's key and value and `_` inside a word.
_TOKEN = re.compile(r"[a-z0-9*_][a-z0-9._/=*-]*[a-z0-9*_]|[a-z0-9*_]|[:;,()'?\"]", re.IGNORECASE)
_NOT_STEMS = {"can": "can", "won": "will", "shan": "shall"}
_APOSTROPHE_TAILS = {"re": "are", "ve": "have", "ll": "will", "m": "am", "d": "would"}
_IS_BEFORE = _set("it that there here what")


@dataclass
class _Text(_Cursor):
    """A sentence's words, casefolded, with each word as written and where it stands."""

    raw: list[str] = field(default_factory=list)
    spans: list[tuple[int, int]] = field(default_factory=list)
    text: str = ""

    def quote(self, start: int, end: int) -> str:
        return self.text[self.spans[start][0] : self.spans[end - 1][1]]

    def part(self, start: int, end: int) -> _Text:
        return _Text(
            self.words[start:end],
            raw=self.raw[start:end],
            spans=self.spans[start:end],
            text=self.text,
        )


def _text(text: str) -> _Text:
    """The words of `text`: "isn't" as "is not", "it's" as "it is", "web's" as "web 's"."""
    found = [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(text.translate(TYPOGRAPHY))]
    raw: list[str] = []
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(found):
        word, start, end = found[i]
        tied = (
            i + 2 < len(found)
            and found[i + 1][0] == "'"
            and end == found[i + 1][1]
            and found[i + 1][2] == found[i + 2][1]
        )
        tail = found[i + 2][0].casefold() if tied else ""
        after = (found[i + 1][1], found[i + 2][2]) if tied else (0, 0)
        folded = word.casefold()
        if tail == "t" and folded.endswith("n"):
            raw += [_NOT_STEMS.get(folded, word[:-1]), "not"]
        elif tail == "s":
            raw += [word, "is" if folded in _IS_BEFORE else "'s"]
        elif tail in _APOSTROPHE_TAILS:
            raw += [word, _APOSTROPHE_TAILS[tail]]
        else:
            raw.append(word)
            spans.append((start, end))
            i += 1
            continue
        spans += [(start, end), after]
        i += 3
    return _Text([w.casefold() for w in raw], raw=raw, spans=spans, text=text)


_MORE_NUMBERS = {
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
}


def _number(c: _Cursor) -> int | None:
    n = _count(c)
    if n is None and c.peek() in _MORE_NUMBERS:
        c.at += 1
        return _MORE_NUMBERS[c.words[c.at - 1]]
    return n


# --- the vocabulary ------------------------------------------------------------------------------

_WHEN = _phrases("""
    when
    once
    if
    after
    as soon as
    only when
    only once
    only if
    only after
    whenever
    the moment
""")
# "Stop when …", "Done when …": what follows says when the run is complete.
_DONE_HEADS = _phrases("""
    stop
    stop only
    only stop
    you can stop
    you may stop
    stop monitoring
    stop watching
    stop checking
    stop the run
    end the run
    finish
    done
    complete
    you are done
    we are done
    it is done
    the run is done
    the run is complete
    the task is done
    the task is complete
    the goal is met
    the goal is reached
    the goal is achieved
    the goal is complete
    consider the goal met
    consider it done
    success
""")
# "Do not stop until …": the same, said the other way round.
_UNTIL_HEADS = _phrases("""
    do not stop until
    keep going until
    keep watching until
    keep checking until
    continue until
    wait until
    watch until
    run until
""")
# "Give up if …": what follows ends the run without its goal.
_GIVE_UP_HEADS = _phrases("""
    give up
    you can give up
    you may give up
    stop and give up
    stop and fail
    fail
    fail the run
    abort
    abort the run
    bail out
""")
# Before "stop if" inside a sentence: a new clause that ends the run as given up.
_OR_ELSE = frozenset({"or", "otherwise", "else"})
_WHICHEVER = _phrases("""
    whichever comes first
    whichever is first
    whichever happens first
    whatever comes first
""")
# What a predicate's verb is: `be` before an adjective, `have` before a participle or a count,
# `do` before "not" and a verb, `verb` (a modal) before a verb.
_AUX = _table("""
    is = be
    are = be
    was = be
    were = be
    is now = be
    are now = be
    becomes = be
    become = be
    gets = be
    get = be
    has been = be
    have been = be
    must be = be
    should be = be
    will be = be
    needs to be = be
    need to be = be
    has to be = be
    have to be = be
    has = have
    have = have
    must have = have
    should have = have
    will have = have
    does = do
    do = do
    did = do
    must = verb
    should = verb
    will = verb
    needs to = verb
    need to = verb
    has to = verb
    have to = verb
""")
_NEGATIONS = _phrases("""
    not
    not yet
    no longer
    never
""")
# A state each phrase names; "-": the negation of that state ("resumed": not suspended).
_ADJECTIVES = _table("""
    complete = succeeded
    completed = succeeded
    done = succeeded
    finished = succeeded
    successful = succeeded
    succeeded = succeeded
    failed = failed
    running = running
    still running = running
    active = running
    suspended = suspended
    paused = suspended
    resumed = -suspended
    unsuspended = -suspended
    available = available
    fully available = available
    ready = available
    up = available
    up and running = available
    rolled out = updated
    fully rolled out = updated
    updated = updated
    fully updated = updated
    up to date = updated
    up-to-date = updated
    crash-looping = restarting
    crashlooping = restarting
    crash looping = restarting
    restarting = restarting
    in crashloopbackoff = restarting
""")
_PARTICIPLES = _table("""
    succeeded = succeeded
    completed = succeeded
    finished = succeeded
    failed = failed
    rolled out = updated
    fully rolled out = updated
    stopped running = -running
    become available = available
""")
_VERBS = _table("""
    succeeds = succeeded
    succeed = succeeded
    succeeded = succeeded
    completes = succeeded
    complete = succeeded
    completed = succeeded
    finishes = succeeded
    finish = succeeded
    finished = succeeded
    fails = failed
    fail = failed
    failed = failed
    crash-loops = restarting
    crash-loop = restarting
    crashloops = restarting
    keeps restarting = restarting
    keep restarting = restarting
    keeps crashing = restarting
    keep crashing = restarting
    keeps crash-looping = restarting
    keep crash-looping = restarting
    rolls out = updated
    rolled out = updated
    stops running = -running
    stop running = -running
    stopped running = -running
""")
# The leaf kinds a state may be, by the kind of object it is said of.
_STATES: dict[str, tuple[LeafKind, ...]] = {
    "succeeded": (LeafKind.jobSucceeded,),
    "failed": (LeafKind.jobFailed,),
    "running": (LeafKind.jobRunning,),
    "suspended": (LeafKind.jobSuspended, LeafKind.cronjobSuspended),
    "available": (LeafKind.workloadAvailable,),
    "replicas": (LeafKind.workloadReplicas,),
    "updated": (LeafKind.workloadUpdated,),
    "restarting": (LeafKind.podsRestarting,),
}
# "the rollout of X", "the pods of X", "X's last run": a part of an object, and what its states
# say of the object (the leaf kind, and whether the state is its negation).
_ROLE_BEFORE = _table("""
    rollout of = rollout
    the rollout of = rollout
    rollout for = rollout
    the rollout for = rollout
    pods of = pods
    the pods of = pods
    any pod of = pods
    any pods of = pods
    a pod of = pods
    no pods of = -pods
    no pod of = -pods
    last run of = last run
    the last run of = last run
    the latest run of = last run
    the most recent run of = last run
""")
_ROLE_AFTER = _table("""
    rollout = rollout
    pods = pods
    pod = pods
    last run = last run
    latest run = last run
    most recent run = last run
""")
_ROLES: dict[str, dict[str, tuple[LeafKind, bool]]] = {
    "rollout": {"succeeded": (LeafKind.workloadUpdated, False)},
    "pods": {"restarting": (LeafKind.podsRestarting, False)},
    "last run": {
        "succeeded": (LeafKind.cronjobLastRunSucceeded, False),
        "failed": (LeafKind.cronjobLastRunSucceeded, True),
    },
}
_READY = _set("ready available running")
_REPLICAS = _set("replicas replica pods pod")
_LIMIT_LEADS = _phrases("""
    after
    at most
    no more than
    up to
    a maximum of
    at the latest after
""")
_UNITS = {
    phrase[0]: int(minutes)
    for phrase, minutes in _table("""
        minute = 1
        minutes = 1
        min = 1
        mins = 1
        hour = 60
        hours = 60
        h = 60
        hr = 60
        hrs = 60
        day = 1440
        days = 1440
    """).items()
}
_IDLE = _set("unchanged idle stalled fruitless")
_NO_PROGRESS = _phrases("""
    without progress
    without any progress
    with no progress
    without change
    without changes
    without any change
    without any changes
    with no change
    with no changes
    with nothing changed
    with nothing changing
    where nothing changes
    in which nothing changes
    without anything changing
    that change nothing
    showing no progress
""")
# "nothing changes for 5 checks": a stall, and the count of checks it lasts.
_STALLS = tuple(
    (*stall, over)
    for stall in _phrases("""
        nothing changes
        nothing has changed
        nothing changed
        there is no progress
        there has been no progress
        no progress is made
        no progress has been made
        no progress
        no change
        no changes
        progress stalls
    """)
    for over in ("for", "in", "over", "during")
)
_PASSED = _phrases("""
    have passed
    have run
    have been made
    have been done
    have elapsed
    have gone by
    are done
    pass
    elapse
    in a row
    in total
""")
_VALUE_VERBS = _phrases("""
    is
    is now
    is set to
    is equal to
    equals
    =
    set to
    must be
    should be
    with value
    with the value
    has value
    has the value
""")
_KEY = re.compile(r"^[-._A-Za-z0-9]+$")
# Words that may reach over their neighbours: a part that holds one is no part on its own.
_SCOPING = _set("""
    not no never nor neither unless except but without until before after if when once then
    only it its they them their this that these those which either all any none every each
    otherwise instead rather""")
_REQUIRING = _set("must should need needs required")
# Objects named before, as a subject: `either of them`, `any of these`.
_THEM = _phrases("""
    either of them
    any of them
    one of them
    each of them
    both of them
    all of them
    either of these
    any of these
    both of these
    either of those
    any of those""")


# "every running pod of X started after …": which pods, the verb, then what they follow.
_EVERY = _phrases("""
    every
    each
    all
    all the
    all of the
    the
""")
_LIVE = _set("running current live")
_STARTED = _phrases("""
    started
    has started
    have started
    was started
    were started
    has been started
    have been started
    restarted
    has restarted
    have restarted
    was restarted
    were restarted
    has been restarted
    have been restarted
    were created
    have been created
    were recreated
    have been recreated
    were replaced
    have been replaced
""")
_SINCE = _set("after since")
_RUN_START = _phrases("""
    this monitor did
    this monitor started
    this monitor was created
    this monitor was applied
    the monitor did
    the monitor started
    the monitor was created
    the monitor was applied
    this run started
    this run began
    the run started
    the run began
    the start of the run
    the start of this run
    the run 's start
""")
# What the task says befell an object, by the noun the stop rule refers to it with ("the
# fix"): a family of participles, each with its nouns.
_CHANGE_FAMILIES = {
    "fix": (
        _set("fixed corrected repaired"),
        _phrases("""
            the fix
            the correction
            the config fix
            the configuration fix
            the configmap fix
        """),
    ),
    "change": (
        _set("changed updated edited modified patched rewritten"),
        _phrases("""
            the change
            the update
            the edit
            the config change
            the configuration change
            the configmap change
            the config update
            the configuration update
            the configmap update
        """),
    ),
}
_WRITTEN = _set("written changed updated edited modified patched rewritten fixed corrected")
_HAPPENED = _phrases("""
    was
    were
    has been
    have been
    got
    is
""")
_ADVERBS = _set("just recently already now last")
_LAST_WRITE = _phrases("""
    the last write to
    the last write of
    the last change to
    the last change of
    the last update to
    the last update of
    the last edit to
    the last edit of
    the latest change to
    the latest update to
""")


# --- predicates ----------------------------------------------------------------------------------

_Part = tuple[str, int | None, bool]  # a state, its count, negated
_Dnf = list[list[GoalLeaf]]


@dataclass(frozen=True)
class _Context:
    namespace: str
    kinds: Mapping[str, str]  # a name written without its kind: the one kind written elsewhere
    # "the fix", "the change": the one ConfigMap the task says was fixed, or changed
    changed: Mapping[str, ObjectRef] = field(default_factory=dict)
    # Judged leaves whose states are failures ("either of them has failed"): they give up.
    failing: list[GoalLeaf] = field(default_factory=list)


@dataclass(frozen=True)
class _Subject:
    refs: list[ObjectRef]
    joiner: str  # "and" or "or"
    role: str  # "", or the part of the objects ("rollout", "pods", "last run")
    negated: bool  # "no pods of X"


def _leaf(
    kind: LeafKind,
    quote: str,
    *,
    object: ObjectRef | None = None,
    count: int | None = None,
    key: str | None = None,
    value: str | None = None,
    negated: bool = False,
    after: ObjectRef | None = None,
) -> GoalLeaf:
    said = clip(quote)
    return GoalLeaf(
        id="g0",
        kind=kind,
        object=object,
        count=count,
        key=key,
        value=value,
        negated=negated,
        after=after,
        quote=said,
        question=said if kind is LeafKind.judged else None,
    )


def _refs(c: _Text, ctx: _Context) -> tuple[list[ObjectRef], str] | None:
    """Objects by kind and name (`Job a`, `jobs a and b`, `the web Deployment`), or names alone
    whose kind the task or the rule writes; joined by "and" or by "or", never both."""
    start = c.at
    try:
        refs = _objects(c, ctx.namespace)
        if not refs:
            names = _names(c)
            if not names or any(n not in ctx.kinds for n in names):
                raise _NoParse("a name of no one kind")
            refs = [ObjectRef(kind=ctx.kinds[n], name=n, namespace=ctx.namespace) for n in names]
    except _NoParse:
        c.at = start
        return None
    joined = {"and", "or"} & set(c.words[start : c.at])
    if len(joined) > 1:
        c.at = start
        return None
    return refs, "or" if "or" in joined else "and"


def _subject(c: _Text, ctx: _Context) -> _Subject | None:
    start = c.at
    before = c.take_any(_ROLE_BEFORE)
    role = _ROLE_BEFORE[before] if before else ""
    found = _refs(c, ctx)
    if found is not None and not role and c.take(("'s",)):
        after = c.take_any(_ROLE_AFTER)
        role = _ROLE_AFTER[after] if after else "?"
    if found is None or role == "?":
        c.at = start
        return None
    return _Subject(found[0], found[1], role.lstrip("-"), role.startswith("-"))


def _listed(c: _Text, table: dict[tuple[str, ...], str], negated: bool) -> list[_Part] | None:
    found = c.take_any(table)
    if found is None:
        return None
    state = table[found]
    if state == "succeeded":
        c.take(("successfully",))
    return [(state.lstrip("-"), None, negated != state.startswith("-"))]


def _scaled(c: _Text, negated: bool) -> list[_Part] | None:
    """After "scaled": `[up|down] to N [replicas]`."""
    c.take(("up",)) or c.take(("down",))
    n = _number(c) if c.take(("to",)) else None
    if n is None:
        return None
    c.take(("replicas",)) or c.take(("replica",))
    return [("replicas", n, negated)]


def _counted(c: _Text) -> list[_Part] | None:
    """After "has": `3 ready replicas` (available >= 3), `at least 2 pods`, `0 replicas`
    (replicas == 0), `3 replicas` (replicas == 3 and 3 available), `no ready pods`."""
    mark = c.at
    at_least = c.take(("at", "least"))
    none = not at_least and c.take(("no",))
    exactly = not (at_least or none) and c.take(("exactly",))
    n = 0 if none else _number(c)
    more = n is not None and not (none or exactly) and c.take(("or", "more"))
    ready = c.peek() in _READY
    c.at += ready
    if n is None or c.peek() not in _REPLICAS:
        c.at = mark
        return None
    c.at += 1
    if c.peek() in _READY:
        ready = True
        c.at += 1
    more = more or (not none and c.take(("or", "more")))
    if at_least or more or (ready and n > 0):
        return [("available", n, False)]
    if ready:  # none of them ready
        return [("available", 1, True)]
    parts: list[_Part] = [("replicas", n, False)]
    return [*parts, ("available", n, False)] if n else parts


def _state(c: _Text) -> list[_Part] | None:
    """What one predicate says of its subject, every part to hold: `has succeeded`, `is not
    running`, `has 3 ready replicas`, `is scaled to zero`, terse `succeeded`, `available`."""
    mark = c.at
    aux = c.take_any(_AUX)
    role = _AUX[aux] if aux else "verb"
    negated = c.take_any(_NEGATIONS) is not None
    if role == "have" and c.take(("been",)):
        role = "be"
    # "does not have 3 replicas" would deny two leaves at once: no count is read after "not".
    found = _counted(c) if role == "have" and not negated else None
    if found is None and role in ("be", "have", "verb") and c.take(("scaled",)):
        found = _scaled(c, negated)
    elif found is None and role == "be":
        found = _listed(c, _ADJECTIVES, negated)
    elif found is None and role == "have":
        found = _listed(c, _PARTICIPLES, negated)
    elif found is None and (role == "verb" or negated):  # "fails", "does not fail"
        found = _listed(c, _VERBS, negated)
        if found is None and aux is None:  # terse: "deploy/web available"
            found = _listed(c, _ADJECTIVES, negated)
    if found is None:
        c.at = mark
    return found


def _states(c: _Text) -> list[list[_Part]] | None:
    """`is available and has 3 ready replicas`, `has succeeded or failed`: states of one
    subject, joined by "and" or by "or", never both."""
    first = _state(c)
    if first is None:
        return None
    groups = [first]
    joiners: set[str] = set()
    while True:
        mark = c.at
        opened = c.take(("(",))  # "succeeded (or failed)"
        joiner = _separator(c)
        more = _state(c) if joiner in ("and", "or") else None
        if more is None or (opened and not c.take((")",))):
            c.at = mark
            break
        joiners.add(joiner)
        if joiner == "or":
            groups.append(more)
        else:
            groups[-1] += more
    return None if len(joiners) > 1 else groups


def _kind_of(state: str, role: str, kind: str) -> tuple[LeafKind, bool] | None:
    if role:
        options = [_ROLES[role][state]] if state in _ROLES[role] else []
    else:
        options = [(k, False) for k in _STATES[state]]
    return next(((k, flip) for k, flip in options if kind in _FITS.get(k, ())), None)


def _said_of(subject: _Subject, states: list[list[_Part]], quote: str) -> _Dnf | None:
    """The leaves of states said of each object; None when a state does not fit its kind."""
    each: list[_Dnf] = []
    for ref in subject.refs:
        groups: _Dnf = []
        for parts in states:
            group = []
            for state, count, negated in parts:
                kind = _kind_of(state, subject.role, ref.kind)
                if kind is None:
                    return None
                flipped = negated ^ kind[1] ^ subject.negated
                group.append(_leaf(kind[0], quote, object=ref, count=count, negated=flipped))
            groups.append(group)
        each.append(groups)
    combined = each[0]
    for more in each[1:]:
        combined = combined + more if subject.joiner == "or" else _and(combined, more)
    return combined


def _limit(c: _Text) -> _Dnf | None:
    """`after 10 checks`, `10 checks without progress`, `nothing changes for 5 checks`,
    `at most 20 checks`, `after 2 hours`."""
    start = c.at
    stalled = c.take_any(_STALLS) is not None
    if not stalled:
        c.take_any(_LIMIT_LEADS)
    n: int | None = None
    if not stalled and c.take(("half", "an", "hour")):
        n, unit = 30, 1
    else:
        n = _number(c)
        if n is None and not stalled and (c.take(("an",)) or c.take(("a",))):
            n = 1 if c.peek() in _UNITS else None
        unit = _UNITS.get(c.peek(), 0) if not stalled else 0
        c.at += bool(unit)
    if not n:
        c.at = start
        return None
    if unit:
        kind, count = LeafKind.elapsedAtLeast, n * unit
    else:
        stalled = c.peek() in _IDLE or stalled
        c.at += c.peek() in _IDLE
        c.take(("consecutive",))
        if not (c.take(("checks",)) or c.take(("check",))):
            c.at = start
            return None
        c.take(("in", "a", "row"))
        stalled = c.take_any(_NO_PROGRESS) is not None or stalled
        kind, count = (LeafKind.unchangedFor if stalled else LeafKind.checksAtLeast), n
    c.take_any(_PASSED)
    return [[_leaf(kind, c.quote(start, c.at), count=count)]]


def _key_value(c: _Text, ctx: _Context) -> _Dnf | None:
    """`ConfigMap app has key mode set to fast`, `key mode of ConfigMap app is fast`,
    `ConfigMap app's key mode is not 'slow'`."""
    start = c.at
    key = None
    if c.take(("the", "key")) or c.take(("key",)):
        key = _key(c)
        if key is None or not (c.take(("of",)) or c.take(("in",))):
            c.at = start
            return None
    found = _refs(c, ctx)
    if found is None or [r.kind for r in found[0]] != ["ConfigMap"]:
        c.at = start
        return None
    if key is None and (
        c.take(("has",)) or c.take(("must", "have")) or c.take(("'s",)) or c.peek() == "key"
    ):
        c.take(("key",))
        key = _key(c)
    negated = False
    if key is not None and c.take_any(_VALUE_VERBS) is not None:
        negated = c.take_any(_NEGATIONS) is not None
        if not c.take(("set", "to")):
            c.take(("equal", "to"))
        value = _config_value(c)
    else:
        value = None
    if value is None:
        c.at = start
        return None
    leaf = _leaf(
        LeafKind.configMapKey,
        c.quote(start, c.at),
        object=found[0][0],
        key=key,
        value=value,
        negated=negated,
    )
    return [[leaf]]


def _key(c: _Text) -> str | None:
    word = c.raw[c.at] if not c.done() else ""
    if not _KEY.match(word) or len(word) > 253 or word.casefold() in _RESERVED:
        return None
    c.at += 1
    return word


def _config_value(c: _Text) -> str | None:
    """One word as written, or the words between quotes."""
    mark = c.peek()
    if mark in ("'", '"'):
        close = next((i for i in range(c.at + 1, len(c.words)) if c.words[i] == mark), None)
        if close is None or close == c.at + 1:
            return None
        value = c.text[c.spans[c.at][1] : c.spans[close][0]]
        c.at = close + 1
    elif mark and (mark[0].isalnum() or mark[0] in "*_"):
        value = c.raw[c.at]
        c.at += 1
    else:
        return None
    return value if len(value) <= 253 else None


def _started_after(c: _Text, ctx: _Context) -> _Dnf | None:
    """`every running pod of web started after ConfigMap app was last written`, `web's pods
    have been restarted since this Monitor started`, `all pods of web started after the fix`
    (the one ConfigMap the task says was fixed): the run's start or a ConfigMap's last write,
    which its pods read only when they start."""
    start = c.at
    every = c.take_any(_EVERY) is not None
    c.at += c.peek() in _LIVE
    found = None
    if c.take(("pods", "of")) or c.take(("pod", "of")):
        found = _refs(c, ctx)
    elif not every:
        c.at = start
        found = _refs(c, ctx)
        if found is not None and c.take(("'s",)):
            c.at += c.peek() in _LIVE
            found = found if c.take(("pods",)) or c.take(("pod",)) else None
        else:
            found = None
    if found is None or found[1] == "or" or c.take_any(_STARTED) is None:
        c.at = start
        return None
    if c.peek() not in _SINCE:
        c.at = start
        return None
    c.at += 1
    after = _written(c, ctx)
    if after is None and c.take_any(_RUN_START) is None:
        c.at = start
        return None
    if any(ref.kind not in _FITS[LeafKind.podsStartedAfter] for ref in found[0]):
        c.at = start
        return None
    quote = c.quote(start, c.at)
    return [[_leaf(LeafKind.podsStartedAfter, quote, object=ref, after=after) for ref in found[0]]]


def _written(c: _Text, ctx: _Context) -> ObjectRef | None:
    """`ConfigMap app [was last written|changed]`, `the last change to ConfigMap app`,
    `the fix`: the ConfigMap whose last write is meant; None, and nothing taken, else."""
    start = c.at
    for family, (_, nouns) in _CHANGE_FAMILIES.items():
        if family in ctx.changed and c.take_any(nouns) is not None:
            return ctx.changed[family]
    lead = c.take_any(_LAST_WRITE) is not None
    found = _refs(c, ctx)
    if found is None or [r.kind for r in found[0]] != ["ConfigMap"]:
        c.at = start
        return None
    if not lead:
        mark = c.at
        if c.take_any(_HAPPENED) is not None:
            c.at += c.peek() in _ADVERBS
            if c.peek() in _WRITTEN:
                c.at += 1
            else:
                c.at = mark
    return found[0][0]


def _predicate(c: _Text, ctx: _Context) -> _Dnf | None:
    start = c.at
    found = _limit(c) or _key_value(c, ctx) or _started_after(c, ctx)
    if found is not None:
        return found
    subject = _subject(c, ctx)
    states = _states(c) if subject is not None else None
    said = _said_of(subject, states, c.quote(start, c.at)) if subject and states else None
    if said is None:
        c.at = start
    return said


# --- clauses -------------------------------------------------------------------------------------


def _and(left: _Dnf, right: _Dnf) -> _Dnf:
    if len(left) * len(right) > GROUPS_MAX:
        raise _NoParse("more alternatives than a rule holds")
    groups = [_unique(a + b) for a in left for b in right]
    if any(len(g) > LEAVES_MAX for g in groups):
        raise _NoParse("more conditions than a group holds")
    return groups


_T = TypeVar("_T")


def _unique(items: Sequence[_T]) -> list[_T]:
    found: list[_T] = []
    for item in items:
        if item not in found:
            found.append(item)
    return found


def _separator(c: _Text) -> str:
    """`, and` / `and` / `, or` / `or` / `,`: the joiner taken, or '' when none is there."""
    comma = c.take((",",))
    if c.take(("and",)):
        return "and"
    if c.take(("or",)):
        return "or"
    return "," if comma else ""


def _item(c: _Text, at: int, ctx: _Context) -> tuple[_Dnf, int] | None:
    """A typed predicate at `at` that ends where the clause or a joiner does, or states said
    of objects named before ("either of them has failed"): which objects, only a model can
    tell, so that one is judged; a give-up when its every state is a failure."""
    c.at = at
    c.take_any(_WHEN)  # "… or when Job b has failed"
    start = c.at
    found, failing = None, False
    if c.take_any(_THEM) is None:
        c.take(("either",)) or c.take(("both",))
        found = _predicate(c, ctx)
    elif (states := _states(c)) is not None:
        found = [[_leaf(LeafKind.judged, c.quote(start, c.at))]]
        failing = all(
            not negated and state in _STATES and set(_STATES[state]) <= _FAILURES
            for parts in states
            for state, _, negated in parts
        )
    if found is None or not (c.done() or c.peek() in (",", "and", "or")):
        return None
    if failing:
        ctx.failing.append(found[0][0])
    return found, c.at


def _judged_end(c: _Text, at: int, ctx: _Context) -> int:
    """Where words the grammar cannot read end: at the first joiner a typed predicate follows."""
    for i in range(at + 1, len(c.words)):
        if c.words[i] in (",", "and", "or"):
            c.at = i
            _separator(c)
            if _item(c, c.at, ctx) is not None:
                return i
    return len(c.words)


def _clause(c: _Text, ctx: _Context) -> _Dnf:
    """A condition's words, as OR of ANDs. Words the grammar cannot read between typed
    predicates are one judged leaf, unless they are no condition of their own (one word) or
    may reach over the predicates ("not", "unless", "it"): then the clause is not read
    (_NoParse), and is judged whole."""
    items: list[tuple[str, _Dnf]] = []
    joiner, at = "", 0
    while True:
        item = _item(c, at, ctx)
        if item is None:
            end = _judged_end(c, at, ctx)
            part = c.words[at:end]
            if (at, end) != (0, len(c.words)) and (len(part) < 2 or _SCOPING & set(part)):
                raise _NoParse(f"'{c.quote(at, end)}' is no condition of its own")
            item = [[_leaf(LeafKind.judged, c.quote(at, end))]], end
        items.append((joiner, item[0]))
        if item[1] >= len(c.words):
            break
        c.at = item[1]
        joiner, at = _separator(c), c.at
        if c.done():
            raise _NoParse("the clause ends on a joiner")
    joiners = [j for j, _ in items]
    for i, j in enumerate(joiners):
        if j == ",":  # "A, B and C": a comma joins as the list's last joiner does
            joiners[i] = next((k for k in joiners[i + 1 :] if k in ("and", "or")), "and")
    if "either" in c.words and {"and", "or"} <= set(joiners):
        raise _NoParse("'either … or … and': which binds first is not written")
    groups: _Dnf = []
    chunk: _Dnf = [[]]
    for j, (_, dnf) in zip(joiners, items, strict=True):
        if j == "or":
            groups, chunk = groups + chunk, [[]]
        chunk = _and(chunk, dnf)
    groups = _unique(groups + chunk)
    if len(groups) > GROUPS_MAX:
        raise _NoParse("more alternatives than a rule holds")
    return groups


def _segment(c: _Text, ctx: _Context, mode: str) -> tuple[_Dnf, list[GoalLeaf]]:
    """One condition's done groups and give-up leaves; read whole or judged whole. A group that
    is a limit or a failure gives up; one that joins such a leaf to others is not read."""
    for phrase in _WHICHEVER:  # "…, whichever comes first" says what "or" says
        n = len(phrase)
        if tuple(c.words[-n:]) == phrase:
            comma = c.words[-n - 1 : -n] == [","]
            c = c.part(0, len(c.words) - n - comma)
    if not c.words:
        return [], []
    try:
        done: _Dnf = []
        give_up: list[GoalLeaf] = []
        for group in _clause(c, ctx):
            ends = any(
                leaf.kind in _LIMITS
                or (leaf.kind in _FAILURES and not leaf.negated)
                or leaf in ctx.failing
                for leaf in group
            )
            if (ends or mode == "giveUp") and len(group) > 1:
                raise _NoParse("a give-up condition is one leaf")
            if ends or mode == "giveUp":
                give_up += group
            else:
                done.append(group)
        return done, give_up
    except _NoParse:
        split = _judged_alternative(c, ctx) if mode == "done" else None
        if split is not None:
            return split
        whole = _leaf(LeafKind.judged, c.quote(0, len(c.words)))
        return ([[whole]], []) if mode == "done" else ([], [whole])


# Words by which a last alternative may reach over those before it ("…, unless …").
_REACHING = _set("unless except otherwise instead rather only but nor neither")


def _judged_alternative(c: _Text, ctx: _Context) -> tuple[_Dnf, list[GoalLeaf]] | None:
    """A condition whose last alternative the grammar cannot read, after ones it reads with
    a typed leaf in each ("Job a has succeeded, or when it cannot finish without a change
    this task forbids"): those stand, and the last is a judged give-up. Whether it meant the
    goal or giving up only a model can tell, and so it may end the run but never as
    complete: a false typed leaf keeps every done group false. None when no such split is
    there, or the last alternative may reach over the others."""
    for i in range(len(c.words) - 2, 0, -1):
        if c.words[i] != "or":
            continue
        last = c.part(i + 1, len(c.words))
        last.take_any(_WHEN)
        if len(last.words) - last.at < 2 or _REACHING & set(last.words[last.at :]):
            return None
        if _readable(last.part(last.at, len(last.words)), ctx):
            return None  # the condition failed to read elsewhere ("either … or … and")
        try:
            done, give_up = _segment(c.part(0, i - (c.words[i - 1] == ",")), ctx, "done")
        except _NoParse:
            return None
        typed = all(any(leaf.kind is not LeafKind.judged for leaf in g) for g in done)
        if not done or not typed:
            return None
        return done, [*give_up, _leaf(LeafKind.judged, last.quote(last.at, len(last.words)))]
    return None


def _readable(c: _Text, ctx: _Context) -> bool:
    """Whether the words read as a condition with some typed leaf."""
    try:
        groups = _clause(c, _Context(ctx.namespace, ctx.kinds))
    except _NoParse:
        return False
    return any(leaf.kind is not LeafKind.judged for group in groups for leaf in group)


def _switch(c: _Text, at: int) -> int | None:
    """Where a give-up clause starts inside a sentence: `, or stop if`, `; give up when`,
    `and fail if`, `otherwise stop and give up if`."""
    c.at = at
    pause = c.take((",",)) or c.take((";",))
    joiner = c.peek() if c.peek() in {*_OR_ELSE, "and", "but"} else ""
    c.at += bool(joiner)
    if not (pause or joiner):
        return None
    head = c.at
    if c.take_any(_GIVE_UP_HEADS) is not None and c.take_any(_WHEN) is not None:
        return c.at
    c.at = head
    if (joiner in _OR_ELSE or c.words[at] == ";") and c.take(("stop",)) and c.take_any(_WHEN):
        return c.at
    return None


def _lead(c: _Text, led: bool = False) -> tuple[str, int, int] | None:
    """`Stop when …`, `Give up if …`, `Don't stop until …`: the mode, and where its condition
    runs. After a `Stop when` sentence (`led`), `Stop if …` says what else ends the run, as
    ", or stop if …" does inside one sentence: a give-up."""
    c.at = 0
    c.take(("please",))
    mark = c.at
    for mode, heads in (("giveUp", _GIVE_UP_HEADS), ("done", _DONE_HEADS)):
        c.at = mark
        head = c.take_any(heads)
        when = c.take_any(_WHEN) if head is not None else None
        if when is not None:
            c.take((":",))
            if led and (head, when) == (("stop",), ("if",)):
                mode = "giveUp"
            return mode, c.at, len(c.words)
    c.at = mark
    if c.take_any(_UNTIL_HEADS) is not None:
        return "done", c.at, len(c.words)
    return _trailing(c)


def _trailing(c: _Text) -> tuple[str, int, int] | None:
    """`Once Job a has succeeded, stop.`, `If Job a fails, give up.`"""
    c.at = 0
    if c.take_any(_WHEN) is None or "," not in c.words[c.at :]:
        return None
    comma = len(c.words) - 1 - c.words[::-1].index(",")
    tail = tuple(c.words[comma + 1 :])
    tail = tail[1:] if tail[:1] == ("then",) else tail
    for mode, heads in (("giveUp", _GIVE_UP_HEADS), ("done", _DONE_HEADS)):
        if tail in heads:
            return mode, c.at, comma
    return None


# Where "it" stands as a clause's subject: "… or when it has failed", "if it fails".
_BEFORE_IT = frozenset({"when", "if", "once", "until", "after", "before", "and", "or", ","})


def _resolve_it(c: _Text, kinds: Mapping[str, str]) -> _Text:
    """ "it" as a subject (and "its" before one), in a sentence that names exactly one
    object, by kind and name or by a name of one kind elsewhere (`kinds`), read as that
    object ("Stop when Job a has succeeded, or when it has failed", "… or give up if its pods
    keep crashing"); with more objects, or none, "it" stays and its clause is judged."""
    named = {
        (_KINDS[w], c.words[i + 1])
        for i, w in enumerate(c.words[:-1])
        if w in _KINDS and _name(c.words[i + 1]) and c.words[i + 1] not in _RESERVED
    }
    named |= {(kinds[w], w) for w in c.words if w in kinds}
    if len(named) != 1 or not {"it", "its"} & set(c.words):
        return c
    [(kind, name)] = named
    words, raw, spans = [], [], []
    for i, word in enumerate(c.words):
        if word in ("it", "its") and i and c.words[i - 1] in _BEFORE_IT:
            said = [kind, name] + (["'s"] if word == "its" else [])
            words += [w.casefold() for w in said]
            raw += said
            spans += [c.spans[i]] * len(said)
        else:
            words.append(word)
            raw.append(c.raw[i])
            spans.append(c.spans[i])
    return _Text(words, raw=raw, spans=spans, text=c.text)


def _sentence(sentence: Sentence, ctx: _Context, led: bool) -> tuple[str, _Dnf, list[GoalLeaf]]:
    """A sentence's role ('lead': a `Stop when` sentence; 'condition': a list item under a
    `Stop when:` header; 'giveUp'; 'bare': no lead; 'header': under a header not read), its
    done groups and its give-up leaves."""
    c = _resolve_it(_text(sentence.text), ctx.kinds)
    role = "bare"
    mode, start, end = "done", 0, len(c.words)
    if sentence.header:
        head = _lead(_text(sentence.header))
        heading = head is not None and head[1] == head[2]  # the header is the lead, whole
        mode = head[0] if head and heading else mode
        role = ("condition" if mode == "done" else "giveUp") if heading else "header"
    else:
        found = _lead(c, led)
        if found is not None:
            mode, start, end = found
            role = "lead" if mode == "done" else "giveUp"
    cuts = [(mode, start)]
    i = start + 1
    while i < end:
        after = _switch(c, i)
        if after is not None and after < end:
            cuts += [("", i), ("giveUp", after)]
            i = after
        i += 1
    cuts.append(("", end))
    done: _Dnf = []
    give_up: list[GoalLeaf] = []
    for (seg_mode, a), (_, b) in zip(cuts[::2], cuts[1::2], strict=True):
        d, g = _segment(c.part(a, b), ctx, seg_mode)
        done += d
        give_up += g
    return role, done, give_up


# --- the reading ---------------------------------------------------------------------------------


def _kinds_named(texts: Sequence[str], namespace: str) -> dict[str, str]:
    """Each name the texts write with exactly one kind."""
    seen: dict[str, set[str]] = {}
    for text in texts:
        for s in sentences(text):
            for ref in _mentions(tokens(s.text), namespace):
                seen.setdefault(ref.name, set()).add(ref.kind)
    return {name: kinds.pop() for name, kinds in seen.items() if len(kinds) == 1}


def _changed(task: str, namespace: str) -> dict[str, ObjectRef]:
    """For "the fix" and "the change": the one object the task says was fixed (or changed),
    as the subject of that participle in its clause, when that object is a ConfigMap; a
    family said of no object, of several, or of another kind resolves nothing."""
    said: dict[str, list[ObjectRef | None]] = {}
    for sentence in sentences(task):
        words = tokens(sentence.text)
        for family, (participles, _) in _CHANGE_FAMILIES.items():
            for at in _happened(words, participles):
                said.setdefault(family, []).append(_subject_before(words, at, namespace))
    return {
        family: refs[0]
        for family, refs in said.items()
        if len(_unique(refs)) == 1 and refs[0] is not None and refs[0].kind == "ConfigMap"
    }


def _happened(words: list[str], participles: frozenset[str]) -> list[int]:
    """Where `was corrected`, `has just been updated` begin: one of the participles after its
    auxiliary."""
    found = []
    for i in range(len(words)):
        c = _Cursor(words, i)
        if c.take_any(_HAPPENED) is not None:
            c.at += c.peek() in _ADVERBS
            if c.peek() in participles:
                found.append(i)
    return found


def _subject_before(words: list[str], at: int, namespace: str) -> ObjectRef | None:
    """The object named last before `at` in the same clause, when it is one object."""
    for start in range(at - 1, -1, -1):
        if words[start] in (";", ":", ",", "."):
            return None
        try:
            found = _object(_Cursor(words, start), namespace)
        except _NoParse:
            continue
        if found:
            return found[0] if len(found) == 1 else None
    return None


def _grants_or_forbids(text: str) -> bool:
    found = read([(Words.stopWhen, text)])
    return bool(found.grants or found.prohibitions or found.dropped or found.refused)


def read_stop_rule(stop_when: str, namespace: str, task: str = "") -> GoalRule:
    """The stop rule as typed leaves. `task` only tells the kind of a name the rule writes
    alone ("web has 3 ready replicas" after the task's "Deployment web")."""
    ctx = _Context(
        namespace, _kinds_named((task, stop_when), namespace), changed=_changed(task, namespace)
    )
    read_: list[tuple[Sentence, str, _Dnf, list[GoalLeaf]]] = []
    for s in sentences(stop_when):
        led = any(role == "lead" for _, role, _, _ in read_)
        read_.append((s, *_sentence(s, ctx, led)))
    led = any(role == "lead" for _, role, _, _ in read_)
    alternatives: _Dnf = []
    conditions: list[_Dnf] = []
    give_up: list[GoalLeaf] = []
    unclear: list[str] = []
    for sentence, role, done, ends in read_:
        if role == "header":
            unclear.append(clip(sentence.header))
        if role in ("bare", "header"):
            if _grants_or_forbids(sentence.text):
                continue  # the authority reading's
            limits_only = not done and all(leaf.kind in _LIMITS for leaf in ends)
            wanted = not led or bool(_REQUIRING & set(_text(sentence.text).words))
            role = "condition" if wanted or limits_only else "context"
        if role == "context":
            unclear.append(clip(sentence.text))
            continue
        give_up += ends
        if role == "lead":
            alternatives += done
        elif done:
            conditions.append(done)
    try:
        groups = alternatives or [[]]
        for condition in conditions:
            groups = _and(groups, condition)
        done_, give_up_ = _numbered(_unique([g for g in groups if g]), _unique(give_up))
        return GoalRule(namespace=namespace, done=done_, giveUp=give_up_, unclear=_unique(unclear))
    except (_NoParse, ValidationError):
        # More than a rule holds: the model judges the words whole.
        whole = _leaf(LeafKind.judged, stop_when).model_copy(update={"id": "g1"})
        return GoalRule(namespace=namespace, done=[[whole]])


def since_run_start(rule: GoalRule | None, at: datetime) -> GoalRule | None:
    """The rule with the run's start, `at` (when it is recorded), in each leaf that counts
    pods' starts from it."""
    if rule is None:
        return None

    def stamped(leaf: GoalLeaf) -> GoalLeaf:
        counts = leaf.kind is LeafKind.podsStartedAfter and leaf.after is None
        return leaf.model_copy(update={"since": at}) if counts else leaf

    return rule.model_copy(
        update={
            "done": [[stamped(leaf) for leaf in group] for group in rule.done],
            "giveUp": [stamped(leaf) for leaf in rule.giveUp],
        }
    )


def _numbered(done: _Dnf, give_up: list[GoalLeaf]) -> tuple[_Dnf, list[GoalLeaf]]:
    """Leaves with ids g1, g2, …: one id for one leaf wherever the DNF repeats it."""
    seen: list[GoalLeaf] = []

    def named(leaf: GoalLeaf) -> GoalLeaf:
        if leaf not in seen:
            seen.append(leaf)
        return leaf.model_copy(update={"id": f"g{seen.index(leaf) + 1}"})

    return [[named(leaf) for leaf in group] for group in done], [named(leaf) for leaf in give_up]


# --- the value -----------------------------------------------------------------------------------


class LeafValue(Model):
    """A leaf's value over what was read: True, False, or None when it cannot be told."""

    id: Identifier
    value: bool | None
    reason: Annotated[str, Field(max_length=LIST_ENTRY_MAX)]


@dataclass(frozen=True)
class Evaluation:
    """`done_group`: the first group whose every leaf holds; `done_refuted`: every group has a
    leaf that does not (a model's claim of completion must be refused; so with no group at
    all); `given_up`: the first give-up leaf that holds; `pending_judged`: judged leaves with
    no answer."""

    leaves: dict[str, LeafValue]
    done_group: list[GoalLeaf]
    done_refuted: bool
    given_up: GoalLeaf | None
    pending_judged: list[GoalLeaf]

    @property
    def done(self) -> bool:
        return bool(self.done_group)


def evaluate(
    rule: GoalRule,
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
    unchanged: int,
    judged: Mapping[str, bool],
    minutes: int | None = None,
) -> Evaluation:
    """Each leaf's value over the facts read, the checks accepted, the checks in a row with
    nothing changed, the model's answers to judged leaves (by leaf id) and the minutes since
    the stop rule was recorded (None: not known)."""
    read_ = {(f.kind.value, f.name): f for f in facts}
    values: dict[str, LeafValue] = {}
    for leaf in rule.leaves():
        value, reason = _leaf_value(leaf, rule, read_, checks, unchanged, judged, minutes)
        if leaf.negated and value is not None:
            value = not value
        values[leaf.id] = LeafValue(id=leaf.id, value=value, reason=clip(reason, LIST_ENTRY_MAX))
    return Evaluation(
        leaves=values,
        done_group=next(
            (g for g in rule.done if all(values[leaf.id].value is True for leaf in g)), []
        ),
        done_refuted=all(any(values[leaf.id].value is False for leaf in g) for g in rule.done),
        given_up=next((leaf for leaf in rule.giveUp if values[leaf.id].value is True), None),
        pending_judged=[
            leaf
            for leaf in rule.leaves()
            if leaf.kind is LeafKind.judged and values[leaf.id].value is None
        ],
    )


# What a give-up leaf that holds ends the run with: each reason from one kind of predicate.
_GIVE_UP_REASONS = {
    LeafKind.jobFailed: StopReason.failed,
    LeafKind.podsRestarting: StopReason.blocked,
    LeafKind.unchangedFor: StopReason.blocked,
    LeafKind.checksAtLeast: StopReason.safetyLimit,
    LeafKind.elapsedAtLeast: StopReason.safetyLimit,
}


def given_up(
    rule: GoalRule | None,
    facts: Sequence[ObjectFacts],
    *,
    checks: int,
    unchanged: int,
    minutes: int | None = None,
) -> tuple[StopReason, str] | None:
    """The stop a typed give-up leaf that holds asks for, with its words and the fact that
    makes it hold; None when none holds (a judged one is never taken for true here).
    `minutes`: since the stop rule was recorded."""
    if rule is None or not rule.giveUp:
        return None
    found = evaluate(
        rule,
        facts,
        checks=checks,
        unchanged=unchanged,
        judged={},
        minutes=minutes,
    )
    leaf = found.given_up
    if leaf is None or leaf.kind not in _GIVE_UP_REASONS:
        return None
    said = f'The stop rule gives up: "{leaf.quote}" holds ({found.leaves[leaf.id].reason}).'
    return _GIVE_UP_REASONS[leaf.kind], clip(said, LIST_ENTRY_MAX)


def settled_complete(
    rule: GoalRule | None, facts: Sequence[ObjectFacts], *, checks: int
) -> Observation | None:
    """The check's observation when the facts alone settle it: every leaf of a done group is
    typed and holds, so no model need be asked. None when a group needs a judged answer, a
    leaf's fact was not read, or a leaf does not hold."""
    if rule is None or not rule.done:
        return None
    # Pods that exited with an error may be available only between two exits (a container
    # that exits at once is ready again after each restart): whether the goal holds is not
    # the facts' alone to say.
    failing = {(f.kind.value, f.name) for f in facts if f.pods and f.pods.lastExit}
    if any(
        leaf.object is not None and (leaf.object.kind, leaf.object.name) in failing
        for leaf in rule.leaves()
    ):
        return None
    found = evaluate(rule, facts, checks=checks, unchanged=0, judged={})
    if not found.done:
        return None
    held = "; ".join(
        f'"{leaf.quote}" holds ({found.leaves[leaf.id].reason})' for leaf in found.done_group
    )
    said = clip(f"The stop rule is met by the facts read: {held}.", LIST_ENTRY_MAX)
    return Observation(
        route=Route.stop,
        goal=GoalState.complete,
        work=WorkState.complete,
        observation=said,
        report=said,
        reason=clip(f"Settled by the facts, with no model asked: {held}.", LIST_ENTRY_MAX),
        stopReason=ObservedStopReason.goalComplete,
    )


# Give-up leaves a step can tell from the objects it read (a count of checks is the engine's).
_SETTLED_GIVE_UPS = {
    LeafKind.jobFailed: WorkState.failed,
    LeafKind.podsRestarting: WorkState.blocked,
}


def settled_given_up(
    rule: GoalRule | None, facts: Sequence[ObjectFacts], *, checks: int
) -> Observation | None:
    """The check's observation when the facts alone end it short of the goal: a give-up
    leaf about an object holds, and no done group could hold even were every judged leaf
    affirmed. The engine stops with the reason that leaf maps to (`given_up`)."""
    if rule is None or not rule.giveUp:
        return None
    affirmed = {leaf.id: True for leaf in rule.leaves() if leaf.kind is LeafKind.judged}
    found = evaluate(rule, facts, checks=checks, unchanged=0, judged=affirmed)
    leaf = found.given_up
    if found.done or leaf is None or leaf.kind not in _SETTLED_GIVE_UPS:
        return None
    said = clip(
        f'The stop rule gives up: "{leaf.quote}" holds ({found.leaves[leaf.id].reason}).',
        LIST_ENTRY_MAX,
    )
    return Observation(
        route=Route.stop,
        goal=GoalState.incomplete,
        work=_SETTLED_GIVE_UPS[leaf.kind],
        observation=said,
        report=said,
        reason=clip(f"Settled by the facts, with no model asked: {said}", LIST_ENTRY_MAX),
        stopReason=ObservedStopReason.materialBlocker,
    )


def refuted_completion(
    rule: GoalRule | None, facts: Sequence[ObjectFacts], *, checks: int
) -> str | None:
    """Why a claim that the goal is complete is false by the facts: every done group has a
    typed leaf the facts make false. The claim stands for the judged leaves it answers; a
    leaf whose fact was not read refutes nothing. None when some group may hold."""
    if rule is None or not rule.done:
        return None
    affirmed = {leaf.id: True for leaf in rule.leaves() if leaf.kind is LeafKind.judged}
    found = evaluate(rule, facts, checks=checks, unchanged=0, judged=affirmed)
    if not found.done_refuted:
        return None
    why = []
    for group in rule.done:
        leaf = next(leaf for leaf in group if found.leaves[leaf.id].value is False)
        why.append(f'"{leaf.quote}" does not hold ({found.leaves[leaf.id].reason})')
    return "goal 'complete' contradicts the stop rule: " + "; ".join(why) + "."


def _leaf_value(
    leaf: GoalLeaf,
    rule: GoalRule,
    read_: Mapping[tuple[str, str], ObjectFacts],
    checks: int,
    unchanged: int,
    judged: Mapping[str, bool],
    minutes: int | None,
) -> tuple[bool | None, str]:
    """The value of the leaf's own predicate (before "not"), and the fact that gives it."""
    n = leaf.count or 0
    if leaf.kind is LeafKind.checksAtLeast:
        return checks >= n, f"{checks} checks accepted, the limit is {n}"
    if leaf.kind is LeafKind.unchangedFor:
        return unchanged >= n, f"{unchanged} checks in a row unchanged, the limit is {n}"
    if leaf.kind is LeafKind.elapsedAtLeast:
        if minutes is None:
            return None, "the run's minutes were not read"
        return minutes >= n, f"{minutes} minutes into the run, the limit is {n}"
    if leaf.kind is LeafKind.judged:
        answer = judged.get(leaf.id)
        return answer, {None: "no answer yet", True: "the model: yes", False: "the model: no"}[
            answer
        ]
    assert leaf.object is not None  # every other kind names its object
    ref, name = leaf.object.ref, leaf.object.name
    if leaf.object.namespace != rule.namespace:
        return None, f"{ref} in namespace {leaf.object.namespace}: not read"
    fact = read_.get((leaf.object.kind, name))
    if fact is None:
        return None, f"{ref}: not read"
    if leaf.kind is LeafKind.podsStartedAfter:
        return _started_value(leaf, fact, rule, read_)
    return _fact_value(leaf, fact)


def _started_value(
    leaf: GoalLeaf,
    fact: ObjectFacts,
    rule: GoalRule,
    read_: Mapping[tuple[str, str], ObjectFacts],
) -> tuple[bool | None, str]:
    """Whether every running pod of the workload started at or after the ConfigMap's last
    data write (a pod reads it when it starts), or the run's start: its oldest does."""
    since, what = leaf.since, "the run started"
    if leaf.after is not None:
        what = f"{leaf.after.ref} was last written"
        if leaf.after.namespace != rule.namespace:
            return None, f"{leaf.after.ref} in namespace {leaf.after.namespace}: not read"
        written = read_.get((leaf.after.kind, leaf.after.name))
        since = written.writtenAt if written is not None else None
        if since is None:
            return None, f"when {what}: not read"
    if since is None:
        return None, "when the run started: not recorded"
    if fact.pods is None:
        return None, f"{fact.ref}: its pods were not read"
    oldest = fact.pods.oldestStart
    if oldest is None:
        return False, f"{fact.ref}: no pod runs"
    at = f"{fact.ref}: its oldest running pod started {_stamp(oldest)}"
    if _utc(oldest) >= _utc(since):
        return True, f"{at}, at or after {what} ({_stamp(since)})"
    return False, f"{at}, before {what} ({_stamp(since)})"


def _utc(at: datetime) -> datetime:
    return at.astimezone(UTC) if at.tzinfo else at.replace(tzinfo=UTC)


def _stamp(at: datetime) -> str:
    return _utc(at).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fact_value(leaf: GoalLeaf, f: ObjectFacts) -> tuple[bool | None, str]:
    ref = f.ref
    if leaf.kind is LeafKind.podsRestarting:
        if f.pods is None:
            return None, f"{ref}: its pods were not read"
        last = f.pods.lastExit
        words = f': "{last.message}"' if last is not None and last.message else ""
        return f.pods.crash_looping, f"{ref}: {pods_said(f.pods)}{words}"
    if leaf.kind is LeafKind.configMapKey:
        if f.data is None:
            return None, f"{ref}: its data was not read"
        if leaf.key not in f.data:
            return False, f"{ref}: no key {leaf.key}"
        held = f.data[leaf.key or ""]
        if held is None:
            return None, f"{ref}: key {leaf.key} holds a value too long to keep"
        return held == leaf.value, f"{ref}: key {leaf.key} is {clip(held, 80)}"
    if leaf.kind is LeafKind.cronjobLastRunSucceeded:
        if f.lastRun is None:
            return None, f"{ref}: no finished run read"
        return f.lastRun is JobEnd.Complete, f"{ref}: its last run ended {f.lastRun.value}"
    ended = (
        f"ended {f.ended.value}"
        if f.ended is not None
        else "suspended, not ended"
        if f.suspended
        else f"not ended, active {f.active or 0}"
    )
    available, updated = f.availableReplicas or 0, f.updatedReplicas or 0
    match leaf.kind:
        case LeafKind.jobSucceeded:
            return f.ended is JobEnd.Complete, f"{ref}: {ended}"
        case LeafKind.jobFailed:
            return f.ended is JobEnd.Failed, f"{ref}: {ended}"
        case LeafKind.jobRunning:
            runs = f.ended is None and not f.suspended and bool(f.active)
            return runs, f"{ref}: {ended}, active {f.active or 0}, suspended {bool(f.suspended)}"
        case LeafKind.jobSuspended | LeafKind.cronjobSuspended:
            return f.suspended, f"{ref}: suspended {f.suspended}"
        case LeafKind.workloadAvailable:
            want = leaf.count if leaf.count is not None else max(f.replicas or 0, 1)
            return available >= want, f"{ref}: available {available}, wanted at least {want}"
        case LeafKind.workloadReplicas:
            if f.replicas is None:
                return None, f"{ref}: replicas not read"
            equal = f.replicas == leaf.count
            return equal, f"{ref}: replicas {f.replicas}" + ("" if equal else f", not {leaf.count}")
        case LeafKind.workloadUpdated:
            if f.replicas is None:
                return None, f"{ref}: replicas not read"
            done = updated == f.replicas == available
            return done, f"{ref}: {updated} updated and {available} available of {f.replicas}"
    return None, f"{ref}: no fact tells {leaf.kind.value}"


def _many(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def pods_said(pods: PodsFacts) -> str:
    """Pods' state from numbers and kubelet reasons alone, never the pods' own words (a fact
    sheet shows it outside the fence)."""
    said = f"{_many(pods.count, 'pod')}, {_many(pods.restarts, 'restart')}"
    if pods.waiting:
        said += f", a container waits in {pods.waiting}"
    last = pods.lastExit
    if last is not None:
        said += f"; pod {last.pod} last exited {last.exitCode}"
        said += f" ({last.reason})" if last.reason else ""
    return said


# --- in words ------------------------------------------------------------------------------------

_SAID = {
    LeafKind.jobSucceeded: "succeeded",
    LeafKind.jobFailed: "failed",
    LeafKind.jobRunning: "running",
    LeafKind.jobSuspended: "suspended",
    LeafKind.cronjobSuspended: "suspended",
    LeafKind.workloadUpdated: "rolled out",
    LeafKind.podsRestarting: "pods restarting",
    LeafKind.cronjobLastRunSucceeded: "last run succeeded",
}
_LIMIT_SAID = {
    LeafKind.checksAtLeast: "checks >= {}",
    LeafKind.unchangedFor: "unchanged checks >= {}",
    LeafKind.elapsedAtLeast: "minutes >= {}",
}


def leaf_line(leaf: GoalLeaf, namespace: str = "") -> str:
    """A leaf in a few words: `Deployment web replicas = 0`, `NOT Job a running`."""
    if leaf.kind is LeafKind.judged:
        said = f'judged "{leaf.question}"'
    elif leaf.kind in _LIMIT_SAID:
        said = _LIMIT_SAID[leaf.kind].format(leaf.count)
    else:
        assert leaf.object is not None
        ref = leaf.object.ref
        if leaf.object.namespace != namespace:
            ref += f" in namespace {leaf.object.namespace}"
        if leaf.kind is LeafKind.configMapKey:
            said = f"{ref} key {leaf.key} = {leaf.value}"
        elif leaf.kind is LeafKind.workloadReplicas:
            said = f"{ref} replicas = {leaf.count}"
        elif leaf.kind is LeafKind.workloadAvailable:
            said = f"{ref} available" + (f" >= {leaf.count}" if leaf.count is not None else "")
        elif leaf.kind is LeafKind.podsStartedAfter:
            after = f"{leaf.after.ref} was last written" if leaf.after else "the run started"
            said = f"{ref} pods all started after {after}"
        else:
            said = f"{ref} {_SAID[leaf.kind]}"
    return f"NOT {said}" if leaf.negated else said


def describe(rule: GoalRule) -> list[str]:
    """The rule for a person: a line for each done group, give-up leaf and unclear sentence."""
    lines = [
        "done when: " + " AND ".join(leaf_line(leaf, rule.namespace) for leaf in group)
        for group in rule.done
    ]
    lines += [f"give up when: {leaf_line(leaf, rule.namespace)}" for leaf in rule.giveUp]
    return lines + [f"unclear: {sentence}" for sentence in rule.unclear]
