"""The person's words read into typed authority, with certainty or not at all. Pure, no I/O.

Each sentence of the task, the stop rule and the operators' instructions is split into
clauses, and each clause is parsed whole by a small positive grammar:

- a grant: a permission (`you may`, `allowed:`, an imperative), one verb of the closed
  vocabulary (`VERBS`), its objects by kind and literal name, and what the typed grant can
  carry: a replica count or range, how many times, a condition over a named object's state,
  the words that a GitOps controller manages it;
- a prohibition: a negation, a verb (one of the vocabulary, or one meaning any change), its
  objects, every object, or every object but some;
- a statement of the goal about named objects (`Job build must complete`).

A clause is read only when every word of it is accounted for. Any other clause is
*unclear* when it may bear on authority: it names an object a grant names, refers back with
a pronoun, or holds a word of permission, restriction or change (those words only ever send
a clause to a person; no word grants or forbids by being present). The model's proposals are
not consulted here: what is granted is what this grammar reads (core/authority.py `pin`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from goalkeeper.core.models import (
    LIST_ENTRY_MAX,
    RECORD_QUOTE_MAX,
    ConditionState,
    GrantCondition,
    GrantVerb,
    ObjectRef,
    TypedGrant,
    TypedProhibition,
    UnclearWords,
    Words,
)

# --- the vocabulary ----------------------------------------------------------------------------


def _phrases(text: str) -> tuple[tuple[str, ...], ...]:
    """One phrase a line, as token tuples, longest first so the longest phrase wins."""
    found = {tuple(line.split()) for line in text.strip().splitlines() if line.strip()}
    return tuple(sorted(found, key=lambda p: (-len(p), p)))


def _set(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _table(text: str) -> dict[tuple[str, ...], str]:
    """`phrase = value` a line."""
    pairs = (line.rsplit("=", 1) for line in text.strip().splitlines() if line.strip())
    return {tuple(phrase.split()): value.strip() for phrase, value in pairs}


# Kind words, in any case, to the Kind they name.
_KINDS = {
    alias: kind
    for kind, aliases in {
        "Job": "job jobs",
        "CronJob": "cronjob cronjobs cj",
        "Deployment": "deployment deployments deploy",
        "StatefulSet": "statefulset statefulsets sts",
        "DaemonSet": "daemonset daemonsets ds",
        "ConfigMap": "configmap configmaps cm",
    }.items()
    for alias in _set(aliases)
}
PLURALS = {
    "Job": "jobs",
    "CronJob": "cronjobs",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "ConfigMap": "configmaps",
}
# Kinds each verb acts on.
VERB_KINDS: dict[GrantVerb, frozenset[str]] = {
    GrantVerb.resume: frozenset({"Job", "CronJob"}),
    GrantVerb.suspend: frozenset({"Job", "CronJob"}),
    GrantVerb.scale: frozenset({"Deployment", "StatefulSet"}),
    GrantVerb.restart: frozenset({"Deployment", "StatefulSet", "DaemonSet"}),
    GrantVerb.deleteFailedPods: frozenset({"Job"}),
    GrantVerb.rerun: frozenset({"Job"}),
    GrantVerb.setKey: frozenset({"ConfigMap"}),
    GrantVerb.repair: frozenset(),
}
# The one table of verbs: each form to the verb it names. Gerunds serve "avoid scaling".
_VERB_WORDS = {
    word: GrantVerb(verb)
    for verb, words in {
        "resume": "resume resuming unsuspend unsuspending unpause unpausing",
        "suspend": "suspend suspending pause pausing",
        "scale": "scale scaling",
        "restart": "restart restarting rollout-restart redeploy",
        "rerun": "rerun re-run rerunning re-running",
        "repair": "repair fix repairing fixing",
    }.items()
    for word in _set(words)
}
# Verbs that only ever forbid: a change of any kind, and a deletion.
_ANY_CHANGE = _set("""
    touch touching change changing modify modifying edit editing alter altering mutate
    mutating update updating patch patching write writing tamper tampering act acting
    interfere interfering""")
_DELETE = _set("delete deleting remove removing")
_CREATE = _set("create creating recreate recreating")
_START = _set("start starting")
# What forbidding a start forbids of the vocabulary: every verb that starts work or pods.
_STARTING = frozenset(
    {GrantVerb.resume, GrantVerb.rerun, GrantVerb.restart, GrantVerb.scale, GrantVerb.repair}
)
# What forbidding a creation forbids of the vocabulary: a re-run creates the Job again.
_CREATING = frozenset({GrantVerb.rerun})
# What forbidding a deletion forbids of the vocabulary: every verb that deletes something.
_DELETING = frozenset({GrantVerb.deleteFailedPods, GrantVerb.rerun})

_PERMISSIONS = _phrases("""
    you are also allowed to
    you are allowed to
    you are permitted to
    you are authorized to
    you are authorised to
    you have permission to
    you may also
    you can also
    you may
    you can
    goalkeeper may
    the monitor may
    a monitor may
    monitors may
    monitors here may
    it is ok to
    it is okay to
    it is fine to
    feel free to
    permission to
    allowed to
    permitted to
    ok to
    may
    can
    allowed :
    permitted :
    allowed actions :
    grants :
    may :
    can :
    allowed
    please
""")
_NEGATIONS = _phrases("""
    no monitor may
    no monitors may
    nobody may
    no one may
    under no circumstances should you
    under no circumstances may you
    under no circumstances
    you are not allowed to
    you are not permitted to
    you are not authorized to
    you are never to
    you are not to
    it is forbidden to
    it is not ok to
    do not ever
    never ever
    you must never
    you must not
    you may not
    you should not
    you shall not
    you will not
    you cannot
    you can not
    you never
    must never
    must not
    may not
    should not
    shall not
    cannot
    can not
    do not
    never
    not allowed to
    not allowed :
    forbidden :
    prohibited :
    must not :
    never :
    do not :
    not allowed
    forbidden
    refrain from
    avoid
    no
""")
# "Deployment payments is off-limits": an object's state as forbidden.
_OFF_LIMITS = _phrases("""
    is off-limits
    are off-limits
    is read-only
    are read-only
    is out of bounds
    are out of bounds
    is protected
    are protected
    is not to be touched
    are not to be touched
    is not to be changed
    are not to be changed
    must not be touched
    must not be changed
    must stay untouched
    must be left alone
    stays untouched
    stay untouched
    is forbidden
    are forbidden
""")
# A prohibition of every object.
_EVERY = _phrases("""
    anything
    everything
    any object
    any objects
    any resource
    any resources
    any workload
    any workloads
    all objects
    all resources
    other objects
    other resources
    any other object
    any other objects
    any other resource
    any other resources
    any other workload
    any other workloads
    other workloads
    every other object
    every other workload
    every other pod
    any other pod
    other pods
    the cluster
    the namespace
    this namespace
""")
_ELSE = frozenset({"else", "other", "otherwise"})
# An object's fields a prohibition may name, to the verbs of the vocabulary that write them:
# a restart writes an annotation of the pod template, a scale the replica count, a set-key
# the data, every verb the spec. A field no verb writes forbids none of them.
_FIELD_VERBS: dict[tuple[str, ...], frozenset[GrantVerb]] = {
    tuple(phrase.split()): verbs
    for phrases, verbs in (
        (
            "image, images, container image, container images, command, commands, "
            "arguments, args, environment, env, environment variables, volume settings, "
            "volumes, resources, resource limits, ports, probes, schedule, job template, "
            "other keys",
            frozenset(),
        ),
        ("pod template, template, pod spec, annotations", frozenset({GrantVerb.restart})),
        ("replica count, replicas, size", frozenset({GrantVerb.scale})),
        ("data, keys", frozenset({GrantVerb.setKey})),
        ("spec", frozenset(GrantVerb)),
    )
    for phrase in phrases.split(", ")
}
# "Only observe.": a task that allows watching alone forbids every change.
_ONLY_WATCH = _phrases("""
    only observe
    only watch
    only monitor
    only report
    just observe
    just watch
    just monitor
    just report
    observe only
    watch only
    report only
    read-only
    this is read-only
    this monitor is read-only
    do nothing but observe
    do nothing but watch
    make no changes
    make no change
    no changes
    change nothing
    touch nothing
    do not change anything
    do not touch anything
    do not make any changes
    do not act
""")
# "Do nothing else.": what no grant names is forbidden, and nothing grants it anyway.
_NOTHING_ELSE = _phrases("""
    do nothing else
    otherwise do nothing
    nothing else
    otherwise only observe
    otherwise just observe
    otherwise only watch
    otherwise just watch
    otherwise observe only
    leave everything else alone
    leave the rest alone
    change nothing else
    touch nothing else
    make no other changes
    make no other change
""")
_JOB_STATES = {
    phrase: ConditionState(state)
    for phrase, state in _table("""
        succeeded = succeeded
        has succeeded = succeeded
        have succeeded = succeeded
        succeeds = succeeded
        completed = succeeded
        has completed = succeeded
        completes = succeeded
        is complete = succeeded
        has finished = succeeded
        finished = succeeded
        finishes = succeeded
        is done = succeeded
        has completed successfully = succeeded
        completed successfully = succeeded
        finished successfully = succeeded
        has finished successfully = succeeded
        failed = failed
        has failed = failed
        fails = failed
        is available = available
        are available = available
        becomes available = available
        is ready = available
        is fully available = available
        is suspended = suspended
        has been suspended = suspended
    """).items()
}
_CONDITION_WORDS = _phrases("""
    only after
    only once
    only when
    only if
    as soon as
    once
    after
    when
    if
""")
# Words that say the verb is meant as the engine does it anyway.
_FILLERS = _phrases("""
    if needed
    if necessary
    if required
    when needed
    when necessary
    as needed
    in this namespace
    in the monitor's namespace
    again
    ( spec.suspend = false )
    ( set spec.suspend = false )
    ( spec.suspend=false )
    ( set spec.suspend=false )
    ( spec.suspend = true )
    ( spec.suspend=true )
    by setting spec.suspend to false
    by setting spec.suspend=false
    by setting spec.suspend = false
    and let it finish
    and let it run
    and let it complete
    and let it run to the end
""")
# How a restart is done, said after it: the restart the act step does anyway.
_RESTART_HOW = _phrases("""
    with a rollout-restart
    by a rollout-restart
    through a rollout-restart
    via a rollout-restart
    with kubectl rollout-restart
""")
_TIMES = {
    phrase: int(n)
    for phrase, n in _table("""
        once = 1
        only once = 1
        at most once = 1
        one time = 1
        a single time = 1
        twice = 2
        at most twice = 2
    """).items()
}
# After a grant's condition: the same condition said again ("once Job a has succeeded, not
# before"), which adds nothing to read.
_NOT_BEFORE = _phrases("""
    not before
    not earlier
    no earlier
    no sooner
    and not before
    and not earlier
    but not before
    but not earlier
""")
_GITOPS = _phrases("""
    even though argo cd manages it
    even though argocd manages it
    even though flux manages it
    even though it is managed by argo cd
    even though it is managed by flux
    although argo cd manages it
    although flux manages it
""")
# Words that may start a trailer after a comma ("…, once", "…, if needed").
_TRAILER_STARTS = _set("once only at up no twice if when after even as although again in")
# Words the grammar reads as verbs beyond the vocabulary: never an object's name.
_GRAMMAR_VERBS = _set("set use clean run running do leave hands let")
_PRONOUNS = _set("it its them they")
# Words that may bear on authority: an unparsed clause holding one goes to a person, and
# one that may restrict without naming what holds back every grant. The lists never grant
# nor forbid: they only decide which unread clauses are worth asking about.
_PERMITTING = _set("""
    may can allowed allow allows permitted permit permission authorized authorised ok
    okay free must should shall""")
_RESTRICTING = _set("""
    not no never nothing none nobody cannot avoid refrain forbidden prohibited off-limits
    hands alone untouched only except unless without but instead protected read-only
    actually scratch retract ignore""")
# The grammar's own words: never an object's name.
_RESERVED = _set("""
    a an the and or but not to of in on at for from by with once after when if only is
    are be been has have was were it its them they this that these those any all every
    each else other others anything everything nothing named called also again until
    before as so then than may can must should shall will you your""")
_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
NAME_MAX = 253

# Typographic quotes and dashes as plain ones, backticks around a name as spaces.
TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u00a0": " ",
        "`": " ",
    }
)
_CONTRACTIONS = tuple(
    (re.compile(rf"\b{' '.join(written)}\b"), plain)
    for written, plain in _table("""
        don't = do not
        doesn't = does not
        mustn't = must not
        can't = cannot
        won't = will not
        shouldn't = should not
        shan't = shall not
        you're = you are
        it's = it is
        isn't = is not
        aren't = are not
        off limits = off-limits
        read only = read-only
        rollout restart = rollout-restart
        rolling restart = rollout-restart
        re run = re-run
    """).items()
)
_TOKEN = re.compile(r"[a-z0-9*][a-z0-9._/=*-]*[a-z0-9*]|[a-z0-9*]|[:;,()='?\"]")


# --- sentences ---------------------------------------------------------------------------------

# A sentence ends at . ! ? before a space or the end, or at a line break: a bullet, a YAML-ish
# entry and a wrapped line each stand alone (a wrapped sentence that no longer parses is
# unclear, which asks a person rather than guessing).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")
_HEADER = re.compile(r":\s*$")
_WRAPPED = re.compile(r"[A-Za-z0-9,]$")


@dataclass(frozen=True)
class Sentence:
    """One sentence as written, and the header line it sits under (`Allowed:`), if any."""

    text: str
    header: str = ""


def _lines(text: str) -> list[tuple[bool, str]]:
    """(is a list item, text) of each line; a line that ends mid-sentence (a letter, a
    digit or a comma) runs on into the next line that is neither a list item nor a heading
    (and, after a list item, only into an indented line)."""
    found: list[tuple[bool, str]] = []
    for line in text.splitlines():
        item = _ITEM.match(line) is not None
        stripped = _ITEM.sub("", line).strip()
        runs_on = (
            found
            and stripped
            and not item
            and not _HEADER.search(stripped)
            and _WRAPPED.search(found[-1][1])
            and (not found[-1][0] or line[:1].isspace())
        )
        if runs_on:
            found[-1] = (found[-1][0], f"{found[-1][1]} {stripped}")
        else:
            found.append((item, stripped))
    return found


def sentences(text: str) -> list[Sentence]:
    """The sentences of a text, each as written on one line; a list item keeps the line
    ending in a colon that it is listed under."""
    found: list[Sentence] = []
    header = ""
    for item, stripped in _lines(text):
        if not stripped:
            header = ""
            continue
        if not item:
            header = ""
        for part in _SENTENCE_END.split(stripped):
            part = " ".join(part.split())
            if not part:
                continue
            if _HEADER.search(part) and not item:
                header = part
                continue
            found.append(Sentence(part, header if item else ""))
    return found


def tokens(text: str) -> list[str]:
    flat = text.translate(TYPOGRAPHY).casefold()
    for pattern, plain in _CONTRACTIONS:
        flat = pattern.sub(plain, flat)
    return _TOKEN.findall(flat)


# --- the parse ---------------------------------------------------------------------------------


class _NoParse(Exception):
    """The clause is not in the grammar; the message says what was left unread."""


@dataclass
class _Cursor:
    words: list[str]
    at: int = 0
    # The one object its sentence names, which "it" in a grant or condition stands for.
    antecedent: ObjectRef | None = None
    resolved: ObjectRef | None = None  # set once "it" was read as the antecedent

    def done(self) -> bool:
        return self.at >= len(self.words)

    def peek(self, n: int = 0) -> str:
        i = self.at + n
        return self.words[i] if 0 <= i < len(self.words) else ""

    def take(self, phrase: Sequence[str]) -> bool:
        if tuple(self.words[self.at : self.at + len(phrase)]) == tuple(phrase):
            self.at += len(phrase)
            return True
        return False

    def take_any(self, phrases: Iterable[Sequence[str]]) -> tuple[str, ...] | None:
        for phrase in sorted(phrases, key=len, reverse=True):
            if self.take(phrase):
                return tuple(phrase)
        return None

    def rest(self) -> str:
        return " ".join(self.words[self.at :])


def _name(word: str) -> bool:
    return (
        len(word) <= NAME_MAX
        and bool(_NAME.match(word))
        and word not in _RESERVED
        and word not in _KINDS
        and word not in _VERB_WORDS
        and word not in _ANY_CHANGE
        and word not in _DELETE
        and word not in _GRAMMAR_VERBS
    )


def clip(text: str, limit: int = RECORD_QUOTE_MAX) -> str:
    """Words as a record keeps them: one line, cut to the record's bound."""
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "\u2026"


def _object(c: _Cursor, namespace: str, *, pronoun: bool = False) -> list[ObjectRef]:
    """One object, or several of one kind ("Jobs a and b"), in any of the forms people
    write: `Job etl`, `the etl Job`, `job/etl`, `jobs/etl`, `ns/jobs/etl`, `the Job named etl`."""
    start = c.at
    if pronoun and c.peek() == "it" and c.antecedent is not None:
        c.at += 1
        c.resolved = c.antecedent
        return [c.antecedent]
    the = c.take(("the",))
    the or c.take(("a",))
    word = c.peek()
    if "/" in word:
        parts = word.split("/")
        kind = _KINDS.get(parts[-2]) if len(parts) in (2, 3) else None
        ns = parts[0] if len(parts) == 3 else ""
        if kind and _name(parts[-1]) and (not ns or _NAMESPACE.match(ns)):
            c.at += 1
            return [ObjectRef(kind=kind, name=parts[-1], namespace=ns or namespace)]
        if "*" in word or kind:
            raise _NoParse(f"'{word}' is no single object")
        c.at = start
        return []
    if word in _KINDS:
        kind = _KINDS[word]
        c.at += 1
        c.take(("named",)) or c.take(("called",))
        names = _names(c)
        if not names:
            c.at = start
            return []
        return [ObjectRef(kind=kind, name=n, namespace=namespace) for n in names]
    if the and _name(word) and c.peek(1) in _KINDS:
        # "the build Job": a name before its kind only after "the" ("keep ConfigMap x" is
        # no ConfigMap "keep").
        c.at += 2
        return [ObjectRef(kind=_KINDS[c.words[c.at - 1]], name=word, namespace=namespace)]
    c.at = start
    return []


def _names(c: _Cursor) -> list[str]:
    """`a`, `a and b`, `a, b or c`: names after one kind word."""
    names: list[str] = []
    if "*" in c.peek():
        raise _NoParse(f"'{c.peek()}' is a glob: a grant names one object")
    while _name(c.peek()):
        names.append(c.peek())
        c.at += 1
        closing = c.peek() in ("and", "or") and _name(c.peek(1)) and c.peek(2) not in _KINDS
        listed = c.peek() == "," and _name(c.peek(1)) and _list_closes(c, c.at + 1)
        if c.peek() == "," and c.peek(1) in ("and", "or") and _name(c.peek(2)):
            c.at += 2
        elif closing or listed:
            c.at += 1
        else:
            break
    return names


def _list_closes(c: _Cursor, at: int) -> bool:
    """Whether names from `at` run, comma by comma, into `and NAME` / `or NAME`."""
    while at < len(c.words) and _name(c.words[at]):
        nxt = c.words[at + 1] if at + 1 < len(c.words) else ""
        if nxt in ("and", "or"):
            return True
        if nxt != ",":
            return False
        at += 2
        if at < len(c.words) and c.words[at] in ("and", "or"):
            return True
    return False


def _objects(c: _Cursor, namespace: str, *, pronoun: bool = False) -> list[ObjectRef]:
    """Objects joined by `,`, `and`, `or`, each with its kind; a namespace after them.
    With `pronoun`, "it" is the one object its sentence names (a grant's, a condition's)."""
    found = _object(c, namespace, pronoun=pronoun)
    while found:
        mark = c.at
        c.take((",",))
        c.take(("and",)) or c.take(("or",))
        more = _object(c, namespace)
        if not more:
            c.at = mark
            break
        found += more
    ns = ""
    if found and c.take(("in", "namespace")):
        ns = c.peek()
        c.at += 1
    elif found and c.peek(0) == "in" and c.peek(1) == "the" and c.peek(3) == "namespace":
        ns = c.peek(2)
        c.at += 4
    if ns:
        if not _NAMESPACE.match(ns) or ns in _RESERVED:
            raise _NoParse("the namespace is not a name")
        found = [o.model_copy(update={"namespace": ns}) for o in found]
    return found


def _condition(c: _Cursor, namespace: str) -> GrantCondition | None:
    """`once Job extract has succeeded`, `after Deployment db is available`."""
    mark = c.at
    if c.take_any(_CONDITION_WORDS) is None:
        return None
    objects = _object(c, namespace, pronoun=True)
    if len(objects) != 1:
        c.at = mark
        return None
    state = c.take_any(_JOB_STATES)
    if state is None:
        c.at = mark
        return None
    value = _JOB_STATES[state]
    kind = objects[0].kind
    fits = {
        ConditionState.succeeded: {"Job", "CronJob"},
        ConditionState.failed: {"Job", "CronJob"},
        ConditionState.suspended: {"Job", "CronJob"},
        ConditionState.available: {"Deployment", "StatefulSet", "DaemonSet"},
    }[value]
    if kind not in fits:
        raise _NoParse(f"a {kind} has no state '{' '.join(state)}' the engine can read")
    return GrantCondition(object=objects[0], state=value)


@dataclass
class _Clause:
    """What one clause said, once parsed whole."""

    grants: list[TypedGrant] = field(default_factory=list)
    prohibitions: list[TypedProhibition] = field(default_factory=list)
    verb: GrantVerb | None = None  # the verb, for an elliptical "but not Job b"
    permitted: bool = False  # in so many words ("you may"), not an imperative
    # "but only after Job a has succeeded", "but only once": what narrows the grants before
    condition: GrantCondition | None = None
    times: int | None = None


def _count(c: _Cursor) -> int | None:
    word = c.peek()
    words = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
    if word.isdigit() and len(word) <= 5:
        c.at += 1
        return int(word)
    if word in words:
        c.at += 1
        return words[word]
    return None


def _scale_bounds(c: _Cursor) -> tuple[int | None, int | None, int | None]:
    """`to 3 [replicas]`, `between 2 and 5 replicas`, `up to 5`, `down to 0`: (to, min, max)."""
    c.take(("up",)) or c.take(("down",)) or c.take(("back",))
    mark = c.at
    if c.take(("from",)) and _count(c) is None:
        c.at = mark  # "from 1 to 3": the count it has now, which the facts read anyway
    if c.take(("to",)):
        n = _count(c)
        if n is None:
            raise _NoParse("a scale needs a replica count")
        c.take(("replicas",)) or c.take(("replica",))
        return n, None, None
    if c.take(("between",)):
        low = _count(c)
        if low is None or not c.take(("and",)):
            raise _NoParse("a replica range reads 'between N and M'")
        high = _count(c)
        if high is None or high < low:
            raise _NoParse("a replica range reads 'between N and M', N at most M")
        c.take(("replicas",))
        return None, low, high
    if c.take(("within",)):
        low = _count(c)
        if low is None or not (c.take(("..",)) or c.take(("-",)) or c.take(("to",))):
            raise _NoParse("a replica range reads 'within N to M'")
        high = _count(c)
        if high is None or high < low:
            raise _NoParse("a replica range reads 'within N to M', N at most M")
        c.take(("replicas",))
        return None, low, high
    raise _NoParse("a scale grant names its replica count ('to 3') or range ('between 2 and 5')")


def _trailers(c: _Cursor, namespace: str) -> tuple[GrantCondition | None, int | None, bool]:
    """What may follow a verb and its objects: a condition, a count of times, fillers, the
    words that a GitOps controller manages the object. Each at most once, in any order."""
    condition: GrantCondition | None = None
    times: int | None = None
    gitops = False
    while not c.done():
        if c.take_any(_FILLERS):
            continue
        if not gitops and c.take_any(_GITOPS):
            gitops = True
            continue
        if condition is None:
            found = _condition(c, namespace)
            if found is not None:
                condition = found
                continue
        if times is None:
            n = c.take_any(_TIMES)
            if n is not None:
                times = _TIMES[n]
                continue
            mark = c.at
            most = c.take(("at", "most")) or c.take(("up", "to")) or c.take(("no", "more", "than"))
            k = _count(c) if most else None
            if k is not None and (c.take(("times",)) or (k == 1 and c.take(("time",)))):
                times = k
                continue
            c.at = mark
        mark = c.at
        c.take((",",))
        if condition is not None and c.take_any(_NOT_BEFORE) is not None:
            continue
        c.at = mark
        if c.take((",",)) and c.peek() in _TRAILER_STARTS:
            continue
        c.at = mark
        break
    return condition, times, gitops


def _verb(c: _Cursor) -> GrantVerb | None:
    word = c.peek()
    if word in _VERB_WORDS:
        c.at += 1
        return _VERB_WORDS[word]
    return None


def _grant_phrase(c: _Cursor, namespace: str, quote: str, source: Words) -> list[TypedGrant]:
    """One verb phrase of a grant, its objects and trailers, consumed whole."""
    mark = c.at
    # "delete the failed pods of Job x", "clean up failed pods of Job x"
    if c.take(("delete",)) or c.take(("clean", "up")) or c.take(("remove",)):
        c.take(("the",)) or c.take(("any",))
        if not (c.take(("failed", "pods", "of")) or c.take(("failed", "pods", "from"))):
            raise _NoParse("deleting is granted only for the failed pods of a Job")
        objects = _objects(c, namespace, pronoun=True)
        return _made(GrantVerb.deleteFailedPods, objects, c, namespace, quote, source)
    if c.take(("set",)) or c.take(("change",)):
        return _set_key(c, namespace, quote, source)
    if c.take(("use", "the", "repair", "workflow")) or c.take(("use", "the", "repair", "flow")):
        return _repair_rest(c, namespace, quote, source, scope="the repair workflow")
    if c.take(("run",)):
        # "run Job etl again" is a re-run; "run Job etl" alone may mean resume.
        objects = _objects(c, namespace, pronoun=True)
        if not c.take(("again",)):
            raise _NoParse("'run' alone may start or re-run: the words do not say which")
        return _made(GrantVerb.rerun, objects, c, namespace, quote, source)
    c.take(("do", "a")) or c.take(("perform", "a"))
    verb = _verb(c)
    if verb is None:
        c.at = mark
        raise _NoParse(f"no verb of the vocabulary at '{c.rest()}'")
    if verb is GrantVerb.repair:
        return _repair_rest(c, namespace, quote, source, scope="")
    if verb is GrantVerb.restart:
        c.take(("a", "rollout", "of")) or c.take(("the", "pods", "of"))
    if verb is GrantVerb.scale:
        c.take(("up",)) or c.take(("down",))
    objects = _objects(c, namespace, pronoun=True)
    return _made(verb, objects, c, namespace, quote, source)


_REPAIR_HOW = tuple(
    (how, *the, "repair", kind)
    for how in ("through", "via", "using", "with")
    for the in ((), ("the",))
    for kind in ("flow", "workflow")
)


def _repair_rest(
    c: _Cursor, namespace: str, quote: str, source: Words, scope: str
) -> list[TypedGrant]:
    """`fix the build configuration through the repair flow`, `use the repair workflow`: a
    repair, which the cluster's repair workflow carries out within its own limits. What it
    repairs is plain words: no verb, kind, pronoun or word that restricts."""
    words: list[str] = []
    if not scope:
        while not c.done() and c.peek() not in ("through", "via", "using", "with"):
            words.append(c.peek())
            c.at += 1
        if c.take_any(_REPAIR_HOW) is None:
            raise _NoParse("a repair is granted through the repair workflow in so many words")
    odd = _PRONOUNS | _RESTRICTING | _PERMITTING | _VERB_WORDS.keys() | _ANY_CHANGE | _KINDS.keys()
    if (not words and not scope) or any(
        w in odd or (not w.isalnum() and "-" not in w) for w in words
    ):
        raise _NoParse("what the repair is for is not plain words")
    condition, times, _ = _trailers(c, namespace)
    if not c.done():
        raise _NoParse(f"'{c.rest()}' is not read")
    return [
        TypedGrant(
            id="",
            verb=GrantVerb.repair,
            scope=" ".join(words) or scope,
            condition=condition,
            times=times,
            quote=clip(quote),
            source=source,
        )
    ]


def _set_key(c: _Cursor, namespace: str, quote: str, source: Words) -> list[TypedGrant]:
    """`set key mode of ConfigMap app to fast [or safe]`, `set ConfigMap app key mode to fast`."""
    c.take(("the",))
    key = None
    objects: list[ObjectRef] = []
    if c.take(("key",)):
        key = c.peek()
        c.at += 1
        if not (c.take(("of",)) or c.take(("in",))):
            raise _NoParse("a key is set 'of' or 'in' a ConfigMap")
        objects = _objects(c, namespace)
    else:
        objects = _objects(c, namespace)
        if not c.take(("key",)):
            raise _NoParse("set-key names the key ('key mode')")
        key = c.peek()
        c.at += 1
    if len(objects) != 1 or objects[0].kind != "ConfigMap" or not key:
        raise _NoParse("set-key is granted for one key of one ConfigMap")
    if not c.take(("to",)):
        raise _NoParse("set-key names the value ('to fast')")
    values = [c.peek()]
    c.at += 1
    while c.take(("or",)) or c.take((",",)):
        values.append(c.peek())
        c.at += 1
    if any(not v or v in _RESERVED for v in values):
        raise _NoParse("set-key's values are not read")
    condition, times, gitops = _trailers(c, namespace)
    if not c.done():
        raise _NoParse(f"'{c.rest()}' is not read")
    return [
        TypedGrant(
            id="",
            verb=GrantVerb.setKey,
            object=objects[0],
            key=key,
            values=values,
            condition=condition,
            times=times,
            gitopsAcknowledged=gitops,
            quote=clip(quote),
            source=source,
        )
    ]


def _made(
    verb: GrantVerb,
    objects: list[ObjectRef],
    c: _Cursor,
    namespace: str,
    quote: str,
    source: Words,
) -> list[TypedGrant]:
    if not objects:
        raise _NoParse(f"the {verb.value} names no object by kind and name")
    for o in objects:
        if o.kind not in VERB_KINDS[verb]:
            raise _NoParse(f"a {o.kind} cannot be {verb.value}d by goalkeeper")
    to = low = high = None
    if verb is GrantVerb.scale:
        to, low, high = _scale_bounds(c)
    if verb is GrantVerb.restart:
        c.take_any(_RESTART_HOW)
    condition, times, gitops = _trailers(c, namespace)
    return [
        TypedGrant(
            id="",
            verb=verb,
            object=o,
            replicas=to,
            minReplicas=low,
            maxReplicas=high,
            condition=condition,
            times=times,
            gitopsAcknowledged=gitops,
            quote=clip(quote),
            source=source,
        )
        for o in objects
    ]


def _grant_clause(c: _Cursor, namespace: str, quote: str, source: Words) -> list[TypedGrant]:
    """Verb phrases joined by `and` / `,` after one permission, each consumed whole, with a
    leading condition ("Once Job a has succeeded, you may resume Job b") for all."""
    grants = _grant_phrase(c, namespace, quote, source)
    while not c.done():
        mark = c.at
        c.take((",",))
        if not (c.take(("and",)) or c.take(("or",)) or c.at > mark):
            break
        c.take_any(_PERMISSIONS)
        try:
            grants += _grant_phrase(c, namespace, quote, source)
        except _NoParse:
            c.at = mark
            break
    return grants


def _one_prohibited_verb(c: _Cursor) -> tuple[GrantVerb | None, frozenset[GrantVerb]] | None:
    word = c.peek()
    if word in _VERB_WORDS:
        c.at += 1
        verb = _VERB_WORDS[word]
        if verb is GrantVerb.restart:
            c.take(("a", "rollout", "of"))
        if verb is GrantVerb.scale:
            c.take(("up",)) or c.take(("down",))
        return verb, frozenset({verb})
    if word in _ANY_CHANGE:
        c.at += 1
        c.take(("with",))
        return None, frozenset(GrantVerb)
    if word in _DELETE:
        c.at += 1
        return None, _DELETING
    if word in _CREATE:
        c.at += 1
        return None, _CREATING
    if word in _START:
        c.at += 1
        return None, _STARTING
    if c.take(("mess", "with")) or c.take(("messing", "with")):
        return None, frozenset(GrantVerb)
    return None


def _prohibited_verb(c: _Cursor) -> tuple[GrantVerb | None, frozenset[GrantVerb]] | None:
    """Forbidden verbs, one or a list ("restart, scale or change"): (the verb when one,
    the verbs they forbid); any change forbids all."""
    first = _one_prohibited_verb(c)
    if first is None:
        return None
    verb, forbids = first
    while True:
        mark = c.at
        c.take((",",))
        c.take(("or",)) or c.take(("and",)) or c.take(("nor",))
        more = _one_prohibited_verb(c) if c.at > mark else None
        if more is None:
            c.at = mark
            return verb, forbids
        verb, forbids = None, forbids | more[1]


def _fields(c: _Cursor) -> frozenset[GrantVerb] | None:
    """`its image, command or arguments`, `the pod template`: fields of an object, as the
    verbs of the vocabulary that write them (none for a field no verb writes); None when
    no field is named."""
    verbs: set[GrantVerb] = set()
    found = False
    while True:
        mark = c.at
        if found:
            c.take((",",))
            c.take(("or",)) or c.take(("and",))
        c.take(("its",)) or c.take(("their",)) or c.take(("the",))
        named = c.take_any(_FIELD_VERBS)
        if named is None:
            c.at = mark
            break
        found = True
        verbs |= _FIELD_VERBS[named]
    return frozenset(verbs) if found else None


def _forbidden_objects(
    c: _Cursor, namespace: str
) -> tuple[list[ObjectRef], bool, list[ObjectRef]] | None:
    """What a prohibition forbids: (objects, every object, the objects excepted)."""
    mark = c.at
    if c.take(("it",)) or c.take(("them",)):
        return [], True, []  # what "it" stands for is not read: every object, the safer
    every = c.take_any(_EVERY)
    if every is not None:
        excepted: list[ObjectRef] = []
        complement = c.peek() in _ELSE or "other" in every
        if c.peek() in _ELSE:
            c.at += 1
        if c.take(("except",)) or c.take(("but",)) or c.take(("other", "than")):
            excepted = _objects(c, namespace)
            if not excepted:
                raise _NoParse("the exception names no object")
        if complement:
            return [], False, []
        return [], True, excepted
    objects = _objects(c, namespace)
    if objects:
        return objects, False, []
    c.at = mark
    return None


def _prohibition_clause(
    c: _Cursor, namespace: str, quote: str, source: Words
) -> list[TypedProhibition]:
    found: list[TypedProhibition] = []
    named_here: list[ObjectRef] = []
    while True:
        verb_read = _prohibited_verb(c)
        # "Forbidden: Deployment db" names no verb: any change to it is forbidden.
        verb, forbids = verb_read or (None, frozenset(GrantVerb))
        fields = _fields(c)
        what: tuple[list[ObjectRef], bool, list[ObjectRef]] | None
        if fields is not None:
            # Fields of an object: the verbs that write them. "Of Deployment web" says
            # whose; "its" after one object of this clause, that one; else every object.
            verb, forbids = None, forbids & fields
            if c.take(("of",)):
                what = _forbidden_objects(c, namespace)
            else:
                what = (named_here, False, []) if len(named_here) == 1 else ([], True, [])
        else:
            what = _forbidden_objects(c, namespace)
        if what is None:
            raise _NoParse(f"'{c.rest()}' names nothing forbidden")
        objects, every, excepted = what
        named_here += [o for o in objects if o not in named_here]
        if not objects and not every:
            pass  # "anything else": what no grant names, which nothing grants anyway
        elif every:
            found.append(
                TypedProhibition(
                    verb=verb,
                    forbids=sorted(forbids),
                    exceptFor=excepted,
                    quote=clip(quote),
                    source=source,
                )
            )
        else:
            found += [
                TypedProhibition(
                    verb=verb, forbids=sorted(forbids), object=o, quote=clip(quote), source=source
                )
                for o in objects
            ]
        # Trailing time words keep the prohibition: it only narrows, however long it lasts.
        c.take_any(_FILLERS)
        mark = c.at
        c.take((",",))
        if c.take(("or",)) or c.take(("and",)) or c.take(("nor",)):
            c.take_any(_NEGATIONS)  # ", and do not touch any other object"
            continue
        if c.at > mark and (c.peek() in _VERB_WORDS or c.peek() in _ANY_CHANGE | _DELETE):
            continue
        c.at = mark
        return found


def _clause(
    c: _Cursor,
    namespace: str,
    quote: str,
    source: Words,
    header: tuple[str, ...],
    before: _Clause | None,
) -> _Clause:
    """One clause, parsed whole, or _NoParse. `before`: the clause read just before it in
    its sentence, which an elliptical clause ("but not Job b", "but only once") refers to."""
    clause = _Clause()
    c.take(("but",))
    c.words = c.words[c.at :]
    c.at = 0
    if header:
        # A list item under "Allowed:" / "Must not:" reads as if the header began it.
        c.words = list(header) + c.words
    elif before is not None and before.grants:
        narrowing = _narrowing(c, namespace, before.grants)
        if narrowing is not None:
            return narrowing
    previous = before.verb if before is not None else None
    # An elliptical exception: "… but not Job etl-backfill" keeps the verb before it.
    if previous is not None and c.take(("not",)):
        objects = _objects(c, namespace)
        if not objects or not c.done():
            raise _NoParse("the exception names no object")
        clause.prohibitions = [
            TypedProhibition(
                verb=previous, forbids=[previous], object=o, quote=clip(quote), source=source
            )
            for o in objects
        ]
        return clause
    if c.take_any(_NOTHING_ELSE) is not None and c.done():
        return clause
    c.at = 0
    if c.take_any(_ONLY_WATCH) is not None and (c.done() or c.take((".",))):
        clause.prohibitions = [
            TypedProhibition(verb=None, forbids=sorted(GrantVerb), quote=clip(quote), source=source)
        ]
        return clause
    c.at = 0
    if header:
        c.words = list(header) + c.words[len(header) :]
    # "Deployment payments is off-limits [this week]"
    mark = c.at
    objects = _objects(c, namespace)
    if objects and c.take_any(_OFF_LIMITS) is not None:
        clause.prohibitions = [
            TypedProhibition(
                verb=None, forbids=sorted(GrantVerb), object=o, quote=clip(quote), source=source
            )
            for o in objects
        ]
        return clause  # what follows (a time, a reason) only says how long: it narrows anyway
    c.at = mark
    kept = _kept(c, namespace, quote, source)
    if kept is not None:
        clause.prohibitions = kept
        return clause
    leading = _condition(c, namespace)
    if leading is not None:
        c.take((",",))
    if c.take_any(_NEGATIONS) is not None:
        if leading is not None:
            raise _NoParse("a prohibition with a condition")
        clause.prohibitions = _prohibition_clause(c, namespace, quote, source)
    else:
        permitted = c.take_any(_PERMISSIONS) is not None
        clause.permitted = permitted
        if (
            not permitted
            and c.peek() not in _VERB_WORDS
            and c.peek()
            not in (
                "delete",
                "set",
                "use",
                "clean",
                "run",
            )
        ):
            raise _NoParse("neither a permission nor a prohibition")
        clause.grants = _grant_clause(c, namespace, quote, source)
        if leading is not None:
            for g in clause.grants:
                if g.condition is not None:
                    raise _NoParse("two conditions")
            clause.grants = [g.model_copy(update={"condition": leading}) for g in clause.grants]
        clause.verb = clause.grants[-1].verb if clause.grants else None
    c.take((".",))
    if not c.done():
        raise _NoParse(f"'{c.rest()}' is not read")
    return clause


# "Keep X unchanged", "leave X alone": what stays as it is.
_KEPT = _phrases("""
    unchanged
    as it is
    as they are
    as is
    the same
    alone
    untouched
    intact
    in place
""")


def _kept(c: _Cursor, namespace: str, quote: str, source: Words) -> list[TypedProhibition] | None:
    """`Keep the image and replica count of Deployment web unchanged`, `Leave Deployment db
    alone`: a prohibition of any change to what lies between; None if the clause is not of
    that form."""
    mark = c.at
    if not (c.take(("keep",)) or c.take(("leave",))):
        return None
    words = c.words[c.at :]
    if words and words[-1] == ".":
        words = words[:-1]
    end = next(
        (len(words) - len(p) for p in _KEPT if tuple(words[len(words) - len(p) :]) == p), None
    )
    if not end:
        c.at = mark
        return None
    body = _Cursor(["change", *words[:end]], antecedent=c.antecedent)
    found = _prohibition_clause(body, namespace, quote, source)
    if not body.done():
        raise _NoParse(f"'{body.rest()}' is not read")
    c.at = len(c.words)
    return found


def _narrowing(c: _Cursor, namespace: str, grants: Sequence[TypedGrant]) -> _Clause | None:
    """A clause that only narrows the grants of the clause before it: "only after Job a
    has succeeded"; "only once". None when the clause is something else; _NoParse when it
    would narrow what it cannot."""
    if not c.take(("only",)):
        return None
    condition = _condition(c, namespace)
    times = None
    if condition is None and (n := c.take_any(_TIMES)) is not None:
        times = _TIMES[n]
    c.take((".",))
    if (condition is None and times is None) or not c.done():
        c.at = 0
        return None
    if condition is not None and any(g.condition is not None for g in grants):
        raise _NoParse("two conditions")
    if times is not None and any(g.times is not None for g in grants):
        raise _NoParse("two counts of times")
    return _Clause(condition=condition, times=times)


_HEADERS = frozenset(p for p in (*_PERMISSIONS, *_NEGATIONS) if p[-1] == ":")


_PURPOSE = frozenset({("so", "that"), ("in", "order")})


def _ends_not_before(words: Sequence[str]) -> bool:
    """Whether `words` are "not before" (or its like) and at most a full stop."""
    rest = tuple(w for w in words if w != ".")
    return rest in _NOT_BEFORE


# Clause boundaries inside a sentence: a semicolon, a colon after anything but a header
# ("Allowed:"), and ", but" / "but" before a new clause.
def _split_clauses(words: list[str]) -> list[list[str]]:
    """The clauses of a sentence's words; a clause after "but" keeps the word, which limits."""
    parts: list[list[str]] = [[]]
    for i, w in enumerate(words):
        said_again = w == "," and any(tuple(parts[-1][-len(p) :]) == p for p in _NOT_BEFORE)
        if tuple(words[i : i + 2]) in _PURPOSE and parts[-1]:
            # Why, after what: its own clause, which a person reads if it may bear on it.
            parts.append([w])
            continue
        if w == "so" and parts[-1] and _ends_not_before(words[i + 1 :]):
            # "…, so not before": a reason, then the condition said again.
            if parts[-1][-1] == ",":
                parts[-1].pop()
            parts.append([w])
            continue
        if said_again or w == ";" or (w == ":" and (*parts[-1], ":") not in _HEADERS):
            parts.append([])
            continue
        if (
            w == "but"
            and i > 0
            and words[i - 1] not in ("anything", "everything", "all", "nothing")
        ):
            if parts[-1] and parts[-1][-1] == ",":
                parts[-1].pop()
            parts.append([w])
            continue
        parts[-1].append(w)
    return [p for p in parts if p]


# --- goal statements -----------------------------------------------------------------------------

_GOAL_VERBS = _phrases("""
    must complete
    must succeed
    must finish
    must be available
    should complete
    should succeed
    should finish
    has to complete
    has to succeed
    has to finish
    needs to complete
    needs to succeed
    needs to finish
    is to complete
    is to finish
""")


def _goal(words: list[str], namespace: str) -> bool:
    """`Job build must complete`, `Finish Job build`, `Stop when …`, a spending limit or a
    price: the goal and what it costs, which grant and forbid nothing (a ceiling and a price
    are read from the same words by the engine's spending guards, and only narrow)."""
    try:
        return _goal_read(_Cursor(words), namespace) or _money(_Cursor(words), namespace)
    except _NoParse:
        return False


_CURRENCIES = _set("usd eur gbp dollars dollar euros euro")
_MONEY_SUBJECTS = _phrases("""
    spending
    total spending
    the spending
    the cost
    the total cost
    the run's cost
    cost
    the budget
    budget
    this run
    the run
""")
_CAPPED = _phrases("""
    is capped at
    must not exceed
    may not exceed
    should not exceed
    is limited to
    is at most
    must stay under
    must stay below
    must stay within
""")
_CEILING_LEADS = _phrases("""
    the cost ceiling is
    the ceiling is
    the budget is
    spend at most
    do not spend more than
    never spend more than
    you may spend at most
    you may spend up to
""")
_UNLESS = _phrases("""
    unless a person approves more
    unless someone approves more
    without approval
""")
_RATE = _phrases("""
    per hour
    an hour
    per day
    a day
    per run
    a run
    each
""")


def _amount(c: _Cursor) -> bool:
    """`about 12 USD`, `$5` (the sign is dropped with punctuation), `3.50 eur per hour`."""
    c.take(("about",)) or c.take(("around",)) or c.take(("roughly",))
    if not re.fullmatch(r"\d+(?:[.,]\d+)*", c.peek()):
        return False
    c.at += 1
    if c.peek() in _CURRENCIES:
        c.at += 1
    c.take_any(_RATE)
    return True


def _money(c: _Cursor, namespace: str) -> bool:
    """`Spending is capped at 5 USD unless a person approves more`, `The cost ceiling is 10
    USD`, `Each run of Job build costs about 12 USD`."""
    if c.take_any(_CEILING_LEADS) is not None or (
        c.take_any(_MONEY_SUBJECTS) is not None and c.take_any(_CAPPED) is not None
    ):
        if _amount(c):
            c.take_any(_UNLESS)
            return c.done()
        return False
    c.at = 0
    if (c.take(("each",)) or c.take(("every",)) or c.take(("one",))) and c.peek() in (
        "run",
        "resume",
        "restart",
        "rerun",
        "re-run",
        "scale",
    ):
        c.at += 1
        if c.take(("of",)) and _objects(c, namespace) and c.take(("costs",)):
            return _amount(c) and c.done()
    return False


def _goal_read(c: _Cursor, namespace: str) -> bool:
    finish = c.take(("finish",)) or c.take(("complete",)) or c.take(("wait", "for"))
    if finish and _objects(c, namespace) and c.done():
        return True
    c.at = 0
    if c.take(("stop",)) and c.take_any((*_CONDITION_WORDS, ("until",))) is not None:
        # When to stop is the goal's, never a grant: the stop rule's own reading types it.
        return True
    c.at = 0
    if _objects(c, namespace):
        c.take(("in", "this", "namespace"))
        return c.take_any(_GOAL_VERBS) is not None and c.done()
    return False


# --- the reading -------------------------------------------------------------------------------


_DOCTRINE = frozenset({Words.clusterInstructions, Words.namespaceInstructions})


@dataclass(frozen=True)
class Reading:
    """What the words give, with certainty, and what they leave to a person. `dropped`:
    grants the words also forbid, each with the prohibition that drops it; `refused`: grants
    an unclear clause may take back, which only a person's own grant gives."""

    grants: tuple[TypedGrant, ...]
    prohibitions: tuple[TypedProhibition, ...]
    unclear: tuple[UnclearWords, ...]
    dropped: tuple[tuple[TypedGrant, TypedProhibition], ...] = ()
    refused: tuple[tuple[TypedGrant, UnclearWords], ...] = ()


def same_object(a: ObjectRef, b: ObjectRef) -> bool:
    """Whether two references may name one object: the Monitor's namespace (empty) may be
    any namespace written elsewhere, so a prohibition holds across them."""
    spaces = {a.namespace, b.namespace} - {""}
    return (a.kind, a.name) == (b.kind, b.name) and len(spaces) <= 1


def meets(grant: TypedGrant, prohibition: TypedProhibition) -> bool:
    """Whether a prohibition forbids what a grant allows."""
    if grant.verb not in prohibition.forbids:
        return False
    if prohibition.object is None:
        return grant.object is None or not any(
            same_object(grant.object, o) for o in prohibition.exceptFor
        )
    return grant.object is not None and same_object(grant.object, prohibition.object)


def grant_line(grant: TypedGrant) -> str:
    """A grant in a few words: `scale Deployment web to 3, once, if job a succeeded`."""
    what = grant.object.ref if grant.object is not None else grant.scope
    if grant.namespace_written():
        what += f" in namespace {grant.object.namespace}"  # type: ignore[union-attr]
    parts = [f"{grant.verb.value} {what}".strip()]
    if grant.replicas is not None:
        parts[0] += f" to {grant.replicas}"
    if grant.minReplicas is not None:
        parts[0] += f" between {grant.minReplicas} and {grant.maxReplicas}"
    if grant.key is not None:
        parts[0] += f" key {grant.key} to {' or '.join(grant.values)}"
    if grant.times is not None:
        parts.append("once" if grant.times == 1 else f"at most {grant.times} times")
    if grant.condition is not None:
        parts.append(f"if {grant.condition}")
    if grant.gitopsAcknowledged:
        parts.append("though a GitOps controller manages it")
    return ", ".join(parts)


def prohibition_line(prohibition: TypedProhibition) -> str:
    """A prohibition in a few words: `no restart of Deployment db`, `no change to anything
    but Job a`."""
    verb = f"no {prohibition.verb.value}" if prohibition.verb else "no change"
    if not prohibition.forbids:
        verb = "no change to fields"  # fields no verb of the vocabulary writes
    elif len(prohibition.forbids) < len(GrantVerb) and prohibition.verb is None:
        verb = "no " + " or ".join(v.value for v in prohibition.forbids)
    if prohibition.object is not None:
        return f"{verb} of {prohibition.object.ref}"
    but = " but " + ", ".join(o.ref for o in prohibition.exceptFor) if prohibition.exceptFor else ""
    return f"{verb} of anything{but}"


def _mentions(words: Sequence[str], namespace: str) -> list[ObjectRef]:
    """Every object a clause names, wherever in it."""
    found: list[ObjectRef] = []
    for i in range(len(words)):
        c = _Cursor(list(words), i)
        try:
            found += _object(c, namespace)
        except _NoParse:
            continue
    return found


@dataclass
class _Unread:
    """A clause the grammar could not read whole, with its sentence and why."""

    sentence: str
    why: str
    source: Words
    words: list[str]
    grants: list[TypedGrant] = field(default_factory=list)  # of its own sentence


def _read_sentence(
    sentence: Sentence, source: Words, namespace: str
) -> tuple[list[TypedGrant], list[TypedProhibition], list[_Unread]]:
    """One sentence's grants, prohibitions and unread clauses. A grant stands only when
    every clause of its sentence is read: a clause left over may limit it."""
    header: tuple[str, ...] = ()
    heading: tuple[str, ...] = ()
    if sentence.header:
        header = heading = (*tokens(sentence.header.rstrip(":")), ":")
        if header not in _HEADERS:
            header = ("?",)  # listed under words the grammar cannot read: nothing grants
    grants: list[TypedGrant] = []
    prohibitions: list[TypedProhibition] = []
    unread: list[_Unread] = []
    before: _Clause | None = None
    named = {(o.kind, o.name): o for o in _mentions(tokens(sentence.text), namespace)}
    antecedent = next(iter(named.values())) if len(named) == 1 else None
    for words in _split_clauses(tokens(sentence.text)):
        shown = [*heading, *words]
        if not header and _ends_not_before(words[1:] if words[0] == "so" else words):
            # "; not before", "…, so not before": the grants' condition said again.
            if grants and all(g.condition is not None for g in grants):
                continue
            why = "'not before' follows a grant with no condition"
            unread.append(_Unread(sentence.text, why, source, shown))
            before = None
            continue
        cursor = _Cursor(list(words), antecedent=antecedent)
        try:
            clause = _clause(cursor, namespace, sentence.text, source, header, before)
        except _NoParse as unparsed:
            if not _goal(list(words), namespace):
                unread.append(_Unread(sentence.text, str(unparsed), source, shown))
            before = None
            continue
        if before is not None and (clause.condition is not None or clause.times is not None):
            narrowed = {
                id(g): g.model_copy(
                    update={
                        "condition": clause.condition or g.condition,
                        "times": clause.times or g.times,
                    }
                )
                for g in before.grants
            }
            grants = [narrowed.get(id(g), g) for g in grants]
            before.grants = [narrowed[id(g)] for g in before.grants]
            continue
        if clause.grants and source in _DOCTRINE and not clause.permitted:
            # The operators' rules say how things are done; only their permissions grant.
            why = "an instruction grants only in so many words"
            unread.append(_Unread(sentence.text, why, source, shown))
            continue
        if cursor.resolved is not None and clause.grants:
            # "it" read as the one object its sentence names: a person confirms that.
            why = f"'it' is read as {cursor.resolved.kind} {cursor.resolved.name}"
            unread.append(_Unread(sentence.text, why, source, ["it"]))
        grants += clause.grants
        prohibitions += clause.prohibitions
        before = clause
    if grants and len(" ".join(sentence.text.split())) > RECORD_QUOTE_MAX:
        # A person confirming must see the whole quote: nothing is granted from this one.
        why = f"a grant is quoted whole, and this sentence is over {RECORD_QUOTE_MAX} characters"
        return [], prohibitions, [_Unread(sentence.text, why, source, tokens(sentence.text))]
    for left in unread:
        left.grants = grants  # a clause left over may limit its sentence's grants
    return grants, prohibitions, unread


def read(texts: Iterable[tuple[Words, str]]) -> Reading:
    """Read every sentence of `texts` (whose words, the text) into grants, prohibitions and
    unclear clauses. An object's namespace is empty unless the words name one: the
    Monitor's.

    While any clause is unclear no act runs before a person confirms the reading. A grant
    that an unclear clause may take back is refused outright, so that only a person's own
    grant gives it: the clause has a word of negation, limit or retraction, and it is in the
    grant's own sentence, names the grant's object, or names no object at all."""
    namespace = ""
    grants: list[TypedGrant] = []
    prohibitions: list[TypedProhibition] = []
    unread: list[_Unread] = []
    for source, text in texts:
        for sentence in sentences(text):
            found = _read_sentence(sentence, source, namespace)
            grants += found[0]
            prohibitions += found[1]
            unread += found[2]
    unclear: list[UnclearWords] = []
    limiting: list[tuple[_Unread, UnclearWords, set[tuple[str, str]], frozenset[GrantVerb]]] = []
    for clause in unread:
        words = clause.words
        named = {(o.kind, o.name) for o in _mentions(words, namespace)}
        if named:
            why = f"it names {_refs(named)}, and {clause.why}"
        elif any(w in _PRONOUNS for w in words):
            why = f"it refers back to something, and {clause.why}"
        elif any(w in _RESTRICTING for w in words):
            why = f"it may restrict, and {clause.why}"
        elif any(w in _PERMITTING or w in _VERB_WORDS or w in _ANY_CHANGE for w in words):
            why = f"it may grant, and {clause.why}"
        elif clause.grants:
            why = f"it is part of a sentence that grants, and {clause.why}"
        else:
            continue
        entry = UnclearWords(
            sentence=clip(clause.sentence), why=clip(why, LIST_ENTRY_MAX), source=clause.source
        )
        if all(u.sentence != entry.sentence for u in unclear):
            unclear.append(entry)
        if _may_limit(words):
            limiting.append((clause, entry, named, _limited_verbs(words)))
    kept: list[TypedGrant] = []
    dropped: list[tuple[TypedGrant, TypedProhibition]] = []
    refused: list[tuple[TypedGrant, UnclearWords]] = []
    for grant in _dedupe(grants):
        stopping = next((p for p in prohibitions if meets(grant, p)), None)
        ref = (grant.object.kind, grant.object.name) if grant.object is not None else None
        taking_back = next(
            (
                entry
                for clause, entry, named, verbs in limiting
                if (not named and grant.verb in verbs)
                or ref in named
                or any(g is grant for g in clause.grants)
            ),
            None,
        )
        if stopping is not None:
            dropped.append((grant, stopping))
        elif taking_back is not None:
            refused.append((grant, taking_back))
        else:
            kept.append(grant)
    ided = _with_ids([*kept, *(g for g, _ in refused)])  # ids unique across both
    return Reading(
        tuple(ided[: len(kept)]),
        tuple(_dedupe(prohibitions)),
        tuple(unclear),
        tuple(dropped),
        tuple((g, u) for g, (_, u) in zip(ided[len(kept) :], refused, strict=True)),
    )


# Words that say a clause is said to the one who acts: anywhere in it, or the first word.
_ADDRESSED = _set("do please you your goalkeeper we i us")
_ADDRESSING = _ADDRESSED | _PRONOUNS | _set("let keep leave stay hold make this that which")
_CHANGE_WORDS = frozenset(_VERB_WORDS) | _ANY_CHANGE | _DELETE | _CREATE


def _stems(word: str) -> tuple[str, ...]:
    """A word and the stems its endings may hide: restarted, restarts, touches."""
    return (word, word[:-1], word[:-2], word[:-3]) if len(word) > 4 else (word,)


def _changes(word: str) -> bool:
    """A verb of change in any of its forms: restart, restarts, restarted, touches."""
    return any(stem in _CHANGE_WORDS for stem in _stems(word))


def _may_limit(words: Sequence[str]) -> bool:
    """Whether an unread clause may take a grant back: it holds a word of restriction, and
    it is said to whoever acts (it begins with a restriction, a verb or "you", or holds a
    word of permission or duty) or it speaks of a change. A statement of how things are
    ("reads it only at start", "ran a week without errors") limits nothing; it still goes
    to a person as unclear when it names a granted object or refers back."""
    if not any(w in _RESTRICTING for w in words):
        return False
    first = next((w for w in words if w not in ("and", "so", ",", "(")), "")
    addressed = first in _RESTRICTING or first in _ADDRESSING or _changes(first)
    return addressed or any(w in _PERMITTING or w in _ADDRESSED or _changes(w) for w in words)


# Words between a modal and the verb it governs: "may not be", "must never".
_MODALS = _set("may can must should shall will could would do does did")
_BEFORE_VERB = _set("not never be ever also yet")


def _limited_verbs(words: Sequence[str]) -> frozenset[GrantVerb]:
    """The verbs a limiting clause that names no object may take back: those of the verbs
    its modals govern ("no export may start", "nothing may be scaled") when each is one of
    the vocabulary's; every verb when one is any change or a word the vocabulary lacks, or
    when no modal governs a verb ("not before the review is done")."""
    verbs: set[GrantVerb] = set()
    for at, word in enumerate(words):
        if word not in _MODALS:
            continue
        rest = list(words[at + 1 :])
        while rest and rest[0] in _BEFORE_VERB:
            rest.pop(0)
        named = _verbs_named(rest[0]) if rest else None
        if named is None:
            return frozenset(GrantVerb)
        verbs |= named
    return frozenset(verbs) or frozenset(GrantVerb)


def _verbs_named(word: str) -> frozenset[GrantVerb] | None:
    """The vocabulary's verbs a verb in any of its forms names (scaled, starting); every
    one for any change; None for a word the vocabulary lacks."""
    for stem in _stems(word):
        if stem in _VERB_WORDS:
            return frozenset({_VERB_WORDS[stem]})
        if stem in _ANY_CHANGE:
            return frozenset(GrantVerb)
        if stem in _DELETE:
            return _DELETING
        if stem in _CREATE:
            return _CREATING
        if stem in _START:
            return _STARTING
    return None


def _with_ids(grants: list[TypedGrant]) -> list[TypedGrant]:
    """Each grant with an id of its verb and object's name, unique in the reading."""
    named: list[TypedGrant] = []
    taken: set[str] = set()
    for grant in grants:
        base = f"{grant.verb.value}-{grant.object.name if grant.object else 'workflow'}"
        gid, n = base[:190], 2
        while gid in taken:
            gid, n = f"{base[:190]}-{n}", n + 1
        taken.add(gid)
        named.append(grant.model_copy(update={"id": gid}))
    return named


def _refs(named: set[tuple[str, str]]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(named))


def _dedupe(items: Sequence[TypedGrant] | Sequence[TypedProhibition]) -> list:  # type: ignore[type-arg]
    seen: list = []  # type: ignore[type-arg]
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen
