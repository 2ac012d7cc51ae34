"""Properties of goalkeeper.core.reading.read over texts pieced together from fragments.

Whatever the words, a grant the reading accepts names its object and its verb in its own
quote, is forbidden by no prohibition of the same reading, quotes one sentence of the text as
written, and read() never raises.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goalkeeper.core.models import GrantVerb, TypedGrant, Words
from goalkeeper.core.reading import grant_line, meets, prohibition_line, read

PERMISSIONS = [
    "You may",
    "You can",
    "you may also",
    "Feel free to",
    "You're allowed to",
    "It is OK to",
    "Please",
    "Allowed:",
    "may:",
    "",
    "",
]
NEGATIONS = [
    "Never",
    "Do not",
    "Don't",
    "You must not",
    "Under no circumstances",
    "Avoid",
    "Refrain from",
    "You may not",
    "not",
    "no",
    "Must not:",
]
VERBS = [
    "resume",
    "suspend",
    "scale",
    "restart",
    "rerun",
    "re-run",
    "run",
    "pause",
    "unpause",
    "redeploy",
    "rollout restart",
    "delete the failed pods of",
    "clean up failed pods of",
    "set",
    "set key mode of",
    "fix",
    "repair",
    "use the repair workflow",
    "touch",
    "change",
    "delete",
    "scaling",
    "deleting",
]
KINDS = [
    "Job",
    "job",
    "Jobs",
    "CronJob",
    "cj",
    "Deployment",
    "deploy",
    "deployments",
    "StatefulSet",
    "sts",
    "DaemonSet",
    "ConfigMap",
    "Pod",
]
NAMES = ["etl", "etl-backfill", "web", "db", "x", "x-dryrun", "etl-*", "*", "a", "extract"]
TRAILERS = [
    "to 3",
    "to 3 replicas",
    "up to 5",
    "between 2 and 5",
    "between 5 and 2",
    "once",
    "at most twice",
    "at most 3 times",
    "if needed",
    "again",
    "in namespace batch",
    "only after Job extract has succeeded",
    "once Job extract has succeeded",
    "when Deployment db is available",
    "if it hangs",
    "even though Argo CD manages it",
    "key mode to fast or safe",
    "key mode to anything",
    "through the repair workflow",
    "but not Job etl-backfill",
    "but not x-dryrun",
    "except Job x",
    "is off-limits",
    "this week",
    "on weekends",
    "too",
    "please",
    "instead",
]
LEADS = [
    "Once Job extract has succeeded,",
    "If Job etl fails,",
    "After Deployment db is available,",
    "When it hangs,",
    "If necessary,",
    "Actually,",
    "On second thought,",
    "",
]
FILLER = [
    "the",
    "and",
    "or",
    "then",
    "also",
    "quickly",
    "maybe",
    "too",
    "it",
    "them",
    "its",
    "anything",
    "else",
    "everything",
    "but",
    "not",
    "only",
    "except",
    "observe",
    "nothing",
    "all",
    "any",
]
OTHER_LANGUAGE = [
    "bitte",
    "nicht",
    "darfst",
    "fortsetzen",
    "neu",
    "starten",
    "vous",
    "pouvez",
    "reprendre",
    "ne",
    "pas",
    "puedes",
    "reanudar",
    "el",
    "und",
    "jamais",
]
PUNCTUATION = [".", ",", ";", ":", "!", "?", " -", "(", ")", '"', "`", "'", "*", "/"]
ENDS = [".", ".", "!", "?", "", ";", ","]
SEPARATORS = [" ", " ", "\n", "\n- ", "\n* ", "\n1. ", "\n\n", ":\n- ", "; ", ", but ", " but not "]
WHOLE = [
    "Only observe.",
    "Do not change anything else.",
    "Do not touch anything but Job etl.",
    "Job build must complete.",
    "Deployment web is off-limits.",
    "Restart it.",
    "Du darfst Job etl fortsetzen.",
    "Allowed:",
    "Forbidden:",
    "allowed: [resume job/etl, restart deploy/web]",
]

Pick = Callable[[Sequence[str]], str]
Number = Callable[[int, int], int]


def _object(pick: Pick, number: Number) -> str:
    kind, name = pick(KINDS), pick(NAMES)
    form = number(0, 6)
    if form == 0:
        return f"{kind} {name}"
    if form == 1:
        return f"{kind.lower()}/{name}"
    if form == 2:
        return f"the {name} {kind}"
    if form == 3:
        return f"{kind} named {name}"
    if form == 4:
        return f"batch/{kind.lower()}/{name}"
    if form == 5:
        return f"{kind} {name} and {pick(NAMES)}"
    return f"{kind} {name}, {pick(KINDS)} {pick(NAMES)}"


def _sentence(pick: Pick, number: Number) -> str:
    if number(0, 9) == 0:
        return pick(WHOLE)
    words: list[str] = []
    words.append(pick(LEADS))
    words.append(pick(NEGATIONS) if number(0, 2) == 0 else pick(PERMISSIONS))
    words.append(pick(VERBS))
    words.append(_object(pick, number))
    for _ in range(number(0, 2)):
        if number(0, 1):
            words.append(pick(["and", ",", "and", "or"]))
            words.append(pick(VERBS) if number(0, 1) else "")
            words.append(_object(pick, number))
        else:
            words.append(pick(TRAILERS))
    # Noise: filler, pronouns, other-language words and punctuation at random places.
    for _ in range(number(0, 3) if number(0, 1) else 0):
        noise = pick([*FILLER, *OTHER_LANGUAGE, *PUNCTUATION])
        words.insert(number(0, len(words)), noise)
    text = " ".join(w for w in words if w)
    if number(0, 3) == 0:
        text = text.capitalize()
    return text + pick(ENDS)


def compose(pick: Pick, number: Number) -> str:
    """A task text: one to four sentences with random separators."""
    text = _sentence(pick, number)
    for _ in range(number(0, 3)):
        text += pick(SEPARATORS) + _sentence(pick, number)
    return text


@st.composite
def task_texts(draw: st.DrawFn) -> str:
    return compose(
        lambda seq: draw(st.sampled_from(list(seq))),
        lambda lo, hi: draw(st.integers(lo, hi)),
    )


# --- the properties ------------------------------------------------------------------------------

VERB_WORDS: dict[GrantVerb, tuple[str, ...]] = {
    GrantVerb.resume: ("resum", "unsuspend", "unpaus"),
    GrantVerb.suspend: ("suspend", "paus"),
    GrantVerb.scale: ("scal",),
    GrantVerb.restart: ("restart", "redeploy", "rollout", "rolling"),
    GrantVerb.deleteFailedPods: ("delet", "clean", "remov"),
    GrantVerb.rerun: ("rerun", "re-run", "run"),
    GrantVerb.setKey: ("set", "chang"),
    GrantVerb.repair: ("fix", "repair"),
}
_WORD = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]|[a-z0-9]")
_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+")


def words_of(text: str) -> set[str]:
    found = set(_WORD.findall(text.casefold()))
    return found | {w.rstrip(".") for w in found}


def names_object_and_verb(grant: TypedGrant) -> bool:
    """(a) The grant's object's name is a word of its quote, and so is a word of its verb."""
    words = words_of(grant.quote)
    if grant.object is not None and grant.object.name not in words:
        return False
    if grant.verb is GrantVerb.repair:
        return any(w.startswith(("fix", "repair")) for w in words) or (
            "repair workflow" in " ".join(grant.quote.casefold().split())
        )
    return any(w.startswith(VERB_WORDS[grant.verb]) for w in words)


def is_a_sentence_of(quote: str, text: str) -> bool:
    """(c) The quote is a run of the text as written (whitespace collapsed, list markers
    left out): a sentence, or lines that wrap one sentence."""
    q = " ".join(quote.split())
    flat = " ".join(_ITEM.sub("", line).strip() for line in text.splitlines())
    return bool(q) and q in " ".join(flat.split())


def problems(text: str) -> list[str]:
    """What breaks a property for one text; (d) read() raising is one."""
    try:
        r = read([(Words.task, text)])
    except Exception as error:  # (d) read() never raises
        return [f"(d) read() raised {type(error).__name__}: {str(error)[:200]}"]
    found: list[str] = []
    for g in r.grants:
        line = grant_line(g)
        if not names_object_and_verb(g):
            found.append(f"(a) {line!r} is not named in its quote {g.quote!r}")
        for p in r.prohibitions:
            if meets(g, p):
                found.append(f"(b) {line!r} is forbidden by {prohibition_line(p)!r}")
        if not is_a_sentence_of(g.quote, text):
            found.append(f"(c) {line!r} quotes {g.quote!r}, no sentence of the text")
    return found


@settings(max_examples=300, deadline=None, derandomize=True)
@given(task_texts())
def test_reading_properties(text: str) -> None:
    """(a) to (d) over generated texts."""
    found = problems(text)
    assert found == [], f"text={text!r}\n" + "\n".join(found)


def test_properties_over_many_more_texts() -> None:
    """(a) to (d) over 3000 texts of a fixed random sequence; and the generator is not
    vacuous: its texts give grants, prohibitions, unclear words."""
    rng = random.Random(20240611)  # noqa: S311 - a test's fixed sequence
    grants = prohibitions = unclear = 0
    failures: list[str] = []
    for _ in range(3000):
        text = compose(rng.choice, rng.randint)
        failures += [f"{text!r}: {p}" for p in problems(text)]
        try:
            r = read([(Words.task, text)])
        except Exception:  # noqa: S112 - a raise is in failures already
            continue
        grants += bool(r.grants)
        prohibitions += bool(r.prohibitions)
        unclear += bool(r.unclear)
    print(f"3000 texts: {grants} with grants, {prohibitions} with prohibitions, {unclear} unclear")
    assert failures == [], "\n".join(failures[:20])
    assert grants > 40
    assert prohibitions > 150
    assert unclear > 1000


HYPOTHESIS_COUNTEREXAMPLE = (
    "Once job extract has succeeded, never resume job etl The the once job extract has "
    "succeeded, never resume job named etl to 3 replicas Once job extract has succeeded, never "
    "rollout restart job etl-backfill Once job extract has succeeded, never delete the failed "
    "pods of job etl-backfill between 2 and 5."
)


# --- counterexamples -------------------------------------------------------------------------

RAISES = [
    pytest.param("Finish job/a.", id="goal-slash-reserved-name"),
    pytest.param(
        "If job etl fails, avoid change bitte job db , deployments db and extract , deleting : "
        "batch/configmap/a;",
        id="generated-slash-reserved-name",
    ),
]


@pytest.mark.parametrize("text", RAISES)
def test_read_never_raises_known_counterexamples(text: str) -> None:
    read([(Words.task, text)])


LONG = [
    # What hypothesis found first (shrunk): read() raised ValidationError on UnclearWords.
    pytest.param(HYPOTHESIS_COUNTEREXAMPLE, id="hypothesis-long-sentence"),
    pytest.param("You may not " + "very " * 70 + "restart Deployment web.", id="long-unclear"),
    pytest.param(
        "You may resume " + "Job etl, " * 40 + "Job x.",
        id="long-grant-name-cut-off",
    ),
    pytest.param("Resume Job etl" + " if needed" * 40 + ".", id="long-grant-fillers"),
    pytest.param(
        "Do not touch " + ", ".join(f"Job n{i}" for i in range(60)) + ".", id="long-prohibition"
    ),
]


@pytest.mark.parametrize("text", LONG)
def test_read_never_raises_on_a_long_sentence(text: str) -> None:
    """A sentence longer than a record's quote (300 characters) is read, not raised on."""
    assert problems(text) == []


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("Use the repair workflow:\n- restart Deployment web", id="repair-header"),
        pytest.param(
            "Once Job extract has succeeded, use the repair workflow job etl, Job db or restart "
            "configmap/etl-*:\n- Once job extract has succeeded, may: rollout restart job * "
            "but not job etl-backfill,:",
            id="generated-repair-header",
        ),
    ],
)
def test_a_grant_names_its_verb_known_counterexamples(text: str) -> None:
    assert problems(text) == []
