"""A corpus of task phrasings and what they mean, read by goalkeeper.core.reading.

Each row: the words (a task, or several (Words, text) pairs), the grants they give (as
`grant_line` strings), the prohibitions they make (as `prohibition_line` strings, or None to
leave them unchecked), and whether a person must confirm something (`bool(r.unclear)`).

The expectations were written from what the words mean. Where several readings are
acceptable, the row expects the safer one (unclear, no grant) and says so in a comment. The
one thing the reading must never do is over-grant: accept a grant that nobody gave, a grant on
the wrong object, or a grant whose condition or limit the words set and the reading dropped.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest

from goalkeeper.core.models import GrantVerb, TypedGrant, Words
from goalkeeper.core.reading import Reading, grant_line, prohibition_line, read

Texts = str | Sequence[tuple[Words, str]]
E: frozenset[str] = frozenset()  # no grants / no prohibitions

# (id, words, grants, prohibitions or None, unclear)
ROWS: list[tuple[str, Texts, set[str] | frozenset[str], set[str] | frozenset[str] | None, bool]] = [
    # --- plain permissions ------------------------------------------------------------------
    ("you-may", "You may resume Job etl.", {"resume Job etl"}, E, False),
    ("you-can", "You can suspend CronJob nightly.", {"suspend CronJob nightly"}, E, False),
    (
        "youre-allowed",
        "You're allowed to restart Deployment web.",
        {"restart Deployment web"},
        E,
        False,
    ),
    (
        "you-are-allowed",
        "You are allowed to restart StatefulSet db.",
        {"restart StatefulSet db"},
        E,
        False,
    ),
    ("feel-free", "Feel free to rerun Job etl.", {"rerun Job etl"}, E, False),
    ("imperative-resume", "Resume Job etl.", {"resume Job etl"}, E, False),
    ("imperative-restart", "Restart Deployment web.", {"restart Deployment web"}, E, False),
    ("imperative-bang", "Resume Job etl!", {"resume Job etl"}, E, False),
    (
        "please",
        "Please restart DaemonSet log-agent.",
        {"restart DaemonSet log-agent"},
        E,
        False,
    ),
    ("it-is-ok", "It is OK to resume Job load.", {"resume Job load"}, E, False),
    ("its-fine", "It's fine to suspend CronJob report.", {"suspend CronJob report"}, E, False),
    (
        "have-permission",
        "You have permission to restart Deployment api.",
        {"restart Deployment api"},
        E,
        False,
    ),
    ("permitted", "You are permitted to rerun Job etl.", {"rerun Job etl"}, E, False),
    ("authorised", "You are authorised to resume Job etl.", {"resume Job etl"}, E, False),
    ("goalkeeper-may", "Goalkeeper may resume Job etl.", {"resume Job etl"}, E, False),
    ("may-also", "You may also restart Deployment web.", {"restart Deployment web"}, E, False),
    (
        "two-names-one-kind",
        "You may resume Jobs etl and load.",
        {"resume Job etl", "resume Job load"},
        E,
        False,
    ),
    (
        "two-objects",
        "You may resume Job etl and Job load.",
        {"resume Job etl", "resume Job load"},
        E,
        False,
    ),
    (
        "three-objects",
        "You may resume Job etl, Job load and CronJob nightly.",
        {"resume Job etl", "resume Job load", "resume CronJob nightly"},
        E,
        False,
    ),
    (
        "two-verbs",
        "You may resume Job etl and restart Deployment web.",
        {"resume Job etl", "restart Deployment web"},
        E,
        False,
    ),
    (
        "two-verbs-comma-and",
        "You may resume Job etl, and restart Deployment web.",
        {"resume Job etl", "restart Deployment web"},
        E,
        False,
    ),
    (
        "two-clauses-semicolon",
        "You may resume Job etl; you may also rerun Job load once.",
        {"resume Job etl", "rerun Job load, once"},
        E,
        False,
    ),
    ("name-before-kind", "You may resume the etl Job.", {"resume Job etl"}, E, False),
    ("named", "You may resume the Job named etl.", {"resume Job etl"}, E, False),
    ("called", "You may restart the Deployment called web.", {"restart Deployment web"}, E, False),
    ("unsuspend", "You may unsuspend Job etl.", {"resume Job etl"}, E, False),
    ("pause", "You may pause CronJob nightly.", {"suspend CronJob nightly"}, E, False),
    ("unpause", "You may unpause CronJob nightly.", {"resume CronJob nightly"}, E, False),
    (
        "rollout-restart",
        "You may rollout restart Deployment web.",
        {"restart Deployment web"},
        E,
        False,
    ),
    (
        "restart-pods-of",
        "You may restart the pods of Deployment web.",
        {"restart Deployment web"},
        E,
        False,
    ),
    (
        "do-a-rolling-restart",
        "You may do a rolling restart of Deployment web.",
        {"restart Deployment web"},
        E,
        False,
    ),
    ("redeploy", "You may redeploy Deployment web.", {"restart Deployment web"}, E, False),
    ("if-needed", "You may resume Job etl if needed.", {"resume Job etl"}, E, False),
    ("as-needed", "Resume Job etl as needed.", {"resume Job etl"}, E, False),
    # "If necessary" only says the engine does it when it is needed, as it does anyway.
    ("leading-if-necessary", "If necessary, resume Job etl.", {"resume Job etl"}, E, False),
    (
        "spec-suspend",
        "You may resume Job etl (spec.suspend=false).",
        {"resume Job etl"},
        E,
        False,
    ),
    # --- lowercase kinds, slash forms ---------------------------------------------------------
    ("lowercase", "you may resume job etl.", {"resume Job etl"}, E, False),
    ("slash-job", "You may resume job/etl.", {"resume Job etl"}, E, False),
    ("slash-jobs", "You may resume jobs/etl.", {"resume Job etl"}, E, False),
    ("slash-deploy", "You may restart deploy/web.", {"restart Deployment web"}, E, False),
    ("slash-sts", "You may restart sts/db.", {"restart StatefulSet db"}, E, False),
    ("slash-cj", "You may suspend cj/nightly.", {"suspend CronJob nightly"}, E, False),
    ("slash-ds", "Restart ds/node-exporter.", {"restart DaemonSet node-exporter"}, E, False),
    ("backticks", "You may resume `job/etl`.", {"resume Job etl"}, E, False),
    (
        "lowercase-deployment",
        "You may restart deployment web.",
        {"restart Deployment web"},
        E,
        False,
    ),
    ("lowercase-cronjob", "you can resume cronjob nightly", {"resume CronJob nightly"}, E, False),
    (
        "the-job-and-the-job",
        "You may resume the Job etl and the Job load.",
        {"resume Job etl", "resume Job load"},
        E,
        False,
    ),
    # Kubernetes names are lower case: "ETL" can only be Job etl.
    ("uppercase-name", "You may resume Job ETL.", {"resume Job etl"}, E, False),
    ("dotted-name", "You may resume Job etl.backfill.", {"resume Job etl.backfill"}, E, False),
    # --- namespaces ---------------------------------------------------------------------------
    (
        "in-namespace",
        "You may resume Job etl in namespace batch.",
        {"resume Job etl in namespace batch"},
        E,
        False,
    ),
    (
        "deployment-in-namespace",
        "You may restart Deployment web in namespace prod.",
        {"restart Deployment web in namespace prod"},
        E,
        False,
    ),
    (
        "ns-slash-kind-slash-name",
        "You may resume batch/jobs/etl.",
        {"resume Job etl in namespace batch"},
        E,
        False,
    ),
    (
        "ns-slash-deployments",
        "You may restart prod/deployments/web.",
        {"restart Deployment web in namespace prod"},
        E,
        False,
    ),
    (
        "in-this-namespace",
        "You may resume Job etl in this namespace.",
        {"resume Job etl"},
        E,
        False,
    ),
    (
        # Reading it as the Monitor's namespace would grant on the wrong object.
        "in-the-batch-namespace",
        "You may resume Job etl in the batch namespace.",
        {"resume Job etl in namespace batch"},
        E,
        False,
    ),
    ("in-any-namespace", "You may resume Job etl in any namespace.", E, None, True),
    # Safer: two namespaces in one phrase go to a person.
    ("in-namespaces-two", "You may resume Job etl in namespaces batch and etl.", E, None, True),
    (
        # Job etl (the Monitor's namespace) may be the same object as batch's Job etl: safer
        # to keep no grant and ask.
        "namespace-vs-own-namespace",
        "You may resume Job etl in namespace batch. Do not resume Job etl.",
        E,
        None,
        True,
    ),
    # --- Allowed: headers, bullet lists, YAML-ish lines ----------------------------------------
    (
        "allowed-header-bullets",
        "Allowed:\n- resume Job etl\n- restart Deployment web",
        {"resume Job etl", "restart Deployment web"},
        E,
        False,
    ),
    (
        "allowed-actions-header",
        "Allowed actions:\n- rerun Job etl\n- suspend CronJob nightly",
        {"rerun Job etl", "suspend CronJob nightly"},
        E,
        False,
    ),
    ("allowed-inline", "Allowed: resume Job etl", {"resume Job etl"}, E, False),
    (
        "you-may-header-numbered",
        "You may:\n1. resume Job etl\n2. rerun Job load",
        {"resume Job etl", "rerun Job load"},
        E,
        False,
    ),
    (
        "yaml-allowed-list",
        "allowed: [resume job/etl, restart deploy/web]",
        {"resume Job etl", "restart Deployment web"},
        E,
        False,
    ),
    ("yaml-allowed-one", "allowed: [resume job/etl]", {"resume Job etl"}, E, False),
    (
        "yaml-forbidden-list",
        "forbidden: [restart deploy/db, scale deploy/db]",
        E,
        {"no restart of Deployment db", "no scale of Deployment db"},
        False,
    ),
    (
        "yaml-allowed-and-forbidden",
        "allowed: [resume job/etl]\nforbidden: [resume job/etl-backfill]",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "yaml-indented-bullets",
        "allowed:\n  - resume job/etl\n  - rerun job/load",
        {"resume Job etl", "rerun Job load"},
        E,
        False,
    ),
    (
        "yaml-nested",
        "permissions:\n  allowed: [resume job/etl]",
        {"resume Job etl"},
        E,
        False,
    ),
    # An empty list allows nothing: clear, no grant.
    ("yaml-allowed-empty", "allowed: []", E, E, False),
    ("grants-header", "grants:\n- resume Job etl", {"resume Job etl"}, E, False),
    ("may-bullet", "- may: resume job/x", {"resume Job x"}, E, False),
    ("must-not-bullet", "- must not: restart deploy/db", E, {"no restart of Deployment db"}, False),
    (
        "may-and-must-not-bullets",
        "- may: resume job/x\n- must not: resume job/x-dryrun",
        {"resume Job x"},
        {"no resume of Job x-dryrun"},
        False,
    ),
    (
        "must-not-header",
        "Must not:\n- restart Deployment db\n- scale Deployment db",
        E,
        {"no restart of Deployment db", "no scale of Deployment db"},
        False,
    ),
    (
        "never-header-delete",
        "Never:\n- delete Job audit-log",
        E,
        {"no delete-failed-pods or rerun of Job audit-log"},
        False,
    ),
    (
        "allowed-and-not-allowed-headers",
        "Allowed:\n- resume Job etl\n\nNot allowed:\n- resume Job etl-backfill",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "allowed-forbidden-anything-else",
        "Allowed:\n- resume Job etl\nForbidden:\n- anything else",
        {"resume Job etl"},
        None,
        False,
    ),
    (
        "allowed-bullet-pronoun",
        "Allowed:\n- resume Job etl\n- rerun it if it fails",
        {"resume Job etl"},
        None,
        True,
    ),
    ("allowed-bullet-only-pronoun", "Allowed:\n- restart it", E, None, True),
    ("allowed-everything", "Allowed:\n- everything", E, None, True),
    ("allowed-anything-except", "Allowed:\n- anything except Deployment db", E, None, True),
    # --- scale bounds ----------------------------------------------------------------------
    ("scale-to", "You may scale Deployment web to 3.", {"scale Deployment web to 3"}, E, False),
    (
        "scale-to-replicas",
        "You may scale Deployment web to 3 replicas.",
        {"scale Deployment web to 3"},
        E,
        False,
    ),
    (
        "scale-to-word",
        "You may scale Deployment web to three replicas.",
        {"scale Deployment web to 3"},
        E,
        False,
    ),
    (
        "scale-between",
        "You may scale Deployment web between 2 and 5 replicas.",
        {"scale Deployment web between 2 and 5"},
        E,
        False,
    ),
    (
        "scale-down-to-zero",
        "You may scale StatefulSet db down to 0.",
        {"scale StatefulSet db to 0"},
        E,
        False,
    ),
    ("scale-imperative", "Scale Deployment web to 0.", {"scale Deployment web to 0"}, E, False),
    # "up to 5 replicas": the narrowest reading, to 5, gives no more than the words.
    (
        "scale-up-to",
        "You may scale Deployment web up to 5 replicas.",
        {"scale Deployment web to 5"},
        E,
        False,
    ),
    ("scale-no-count", "You may scale Deployment web.", E, E, True),
    ("scale-up-no-count", "You may scale Deployment web up.", E, E, True),
    ("scale-reversed-range", "You may scale Deployment web between 5 and 2.", E, E, True),
    # Safer: "3 or 4" is no bound the grant carries; ask.
    ("scale-to-3-or-4", "You may scale Deployment web to 3 or 4 replicas.", E, E, True),
    ("scale-a-job", "You may scale Job etl to 3.", E, E, True),
    ("scale-as-needed", "Scale Deployment web as needed.", E, E, True),
    (
        "scale-at-most-twice",
        "You may scale Deployment web to 3 at most twice.",
        {"scale Deployment web to 3, at most 2 times"},
        E,
        False,
    ),
    (
        "scale-between-at-most-twice",
        "You may scale Deployment web between 2 and 5, at most twice.",
        {"scale Deployment web between 2 and 5, at most 2 times"},
        E,
        False,
    ),
    (
        "scale-if-available",
        "You may scale Deployment web to 3 if Deployment db is available.",
        {"scale Deployment web to 3, if deployment db available"},
        E,
        False,
    ),
    (
        "scale-sts-between",
        "Scale StatefulSet cache between 1 and 3 replicas.",
        {"scale StatefulSet cache between 1 and 3"},
        E,
        False,
    ),
    # --- counts ---------------------------------------------------------------------------
    ("once", "You may rerun Job etl once.", {"rerun Job etl, once"}, E, False),
    (
        "at-most-twice",
        "You may rerun Job etl at most twice.",
        {"rerun Job etl, at most 2 times"},
        E,
        False,
    ),
    (
        "at-most-3-times",
        "You may restart Deployment web at most 3 times.",
        {"restart Deployment web, at most 3 times"},
        E,
        False,
    ),
    (
        "no-more-than",
        "You may rerun Job etl no more than 2 times.",
        {"rerun Job etl, at most 2 times"},
        E,
        False,
    ),
    (
        "up-to-times",
        "You may restart Deployment web up to 3 times.",
        {"restart Deployment web, at most 3 times"},
        E,
        False,
    ),
    (
        "twice",
        "You may restart Deployment web twice.",
        {"restart Deployment web, at most 2 times"},
        E,
        False,
    ),
    ("a-single-time", "Rerun Job etl a single time.", {"rerun Job etl, once"}, E, False),
    ("one-time-only", "Rerun Job etl one time only.", {"rerun Job etl, once"}, E, False),
    ("comma-once", "You may rerun Job etl, once.", {"rerun Job etl, once"}, E, False),
    # The limit is in a second clause: dropping it would over-grant.
    ("but-only-once", "You may rerun Job etl, but only once.", {"rerun Job etl, once"}, E, False),
    (
        "three-times-bare",
        "You may rerun Job etl 3 times.",
        {"rerun Job etl, at most 3 times"},
        E,
        False,
    ),
    (
        "as-many-times",
        "You may rerun Job etl as many times as needed.",
        {"rerun Job etl"},
        E,
        False,
    ),
    ("run-again", "Run Job etl again.", {"rerun Job etl"}, E, False),
    ("re-run", "You may re-run Job etl.", {"rerun Job etl"}, E, False),
    # Safer: "run" a Job may mean resume (it is suspended) or rerun (it finished).
    ("run-ambiguous", "You may run Job etl.", E, None, True),
    # --- conditions -------------------------------------------------------------------------
    (
        "only-after-succeeded",
        "You may resume Job load only after Job extract has succeeded.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "leading-once",
        "Once Job extract has succeeded, you may resume Job load.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "leading-after-imperative",
        "After Job extract completes, resume Job load.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "when-done",
        "You may resume Job load when Job extract is done.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "if-succeeded",
        "You may resume Job load if Job extract succeeded.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "leading-if-fails",
        "If Job extract fails, you may rerun Job extract.",
        {"rerun Job extract, if job extract failed"},
        E,
        False,
    ),
    (
        # "once" here is the condition, not a count.
        "once-as-condition",
        "You may restart Deployment web once Deployment db is available.",
        {"restart Deployment web, if deployment db available"},
        E,
        False,
    ),
    (
        "condition-and-once",
        "You may resume Job load after Job extract has succeeded, once.",
        {"resume Job load, once, if job extract succeeded"},
        E,
        False,
    ),
    (
        "condition-deployment-available",
        "Resume Job load only after Deployment db is available.",
        {"resume Job load, if deployment db available"},
        E,
        False,
    ),
    (
        "suspend-if-failed",
        "You may suspend CronJob nightly if Job etl failed.",
        {"suspend CronJob nightly, if job etl failed"},
        E,
        False,
    ),
    # The condition sits in a second clause: the grant without it would over-grant.
    (
        "but-only-after",
        "You may resume Job etl, but only after Job extract has succeeded.",
        {"resume Job etl, if job extract succeeded"},
        E,
        False,
    ),
    # The condition said again after it: nothing more to read.
    (
        "comma-not-before",
        "You may scale Deployment old-api to 0 once Job migrate has succeeded, not before.",
        {"scale Deployment old-api to 0, if job migrate succeeded"},
        E,
        False,
    ),
    (
        "and-not-earlier",
        "You may resume Job load after Job extract has succeeded and not earlier.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    (
        "semicolon-not-before",
        "Resume Job load once Job extract has succeeded; not before.",
        {"resume Job load, if job extract succeeded"},
        E,
        False,
    ),
    # The reason after it is not read: a person confirms, the grant stands.
    (
        "not-before-with-reason",
        "You may scale Deployment old-api to 0 once Job migrate has succeeded; not before, "
        "it still serves the old schema.",
        {"scale Deployment old-api to 0, if job migrate succeeded"},
        E,
        True,
    ),
    (
        "reason-so-not-before",
        "You may resume Job load once Job extract has succeeded; it reads what extract "
        "writes, so not before.",
        {"resume Job load, if job extract succeeded"},
        E,
        True,
    ),
    (
        "comma-so-not-before",
        "You may restart Deployment api after Deployment db is available, so not before.",
        {"restart Deployment api, if deployment db available"},
        E,
        False,
    ),
    # A reason that may limit takes the grant back until a person gives it.
    (
        "not-before-with-limit",
        "You may resume Job load once Job extract has succeeded; not earlier, it is not safe.",
        E,
        None,
        True,
    ),
    # "Not before" what? The grant has no condition to say again.
    ("not-before-no-condition", "You may resume Job load; not before.", E, None, True),
    (
        "but-only-after-leading-grant-two",
        "You may resume Job load and Job report, but only after Job extract has succeeded.",
        {
            "resume Job load, if job extract succeeded",
            "resume Job report, if job extract succeeded",
        },
        E,
        False,
    ),
    # Two conditions for one grant: a person reads it.
    (
        "two-conditions-but-only",
        "You may resume Job load once Job a has succeeded, but only after Job b has succeeded.",
        E,
        None,
        True,
    ),
    (
        "condition-unreadable",
        "You may resume Job load only if the upstream data is ready.",
        E,
        None,
        True,
    ),
    ("after-data-lands", "You may resume Job load after the data lands.", E, None, True),
    ("when-safe", "Resume Job load when it is safe.", E, None, True),
    ("deployment-succeeded", "Resume Job load after Deployment db has succeeded.", E, None, True),
    ("unless", "You may resume Job load unless Job extract failed.", E, None, True),
    ("before", "You may resume Job load before Job extract starts.", E, None, True),
    ("until", "Suspend CronJob nightly until Job etl succeeds.", E, None, True),
    # "otherwise do nothing" is not read; the conditional grant stands, a person looks.
    # Read whole: "otherwise" only says what no grant names stays as it is.
    (
        "if-otherwise-nothing",
        "If Job extract has succeeded, resume Job load; otherwise do nothing.",
        {"resume Job load, if job extract succeeded"},
        None,
        False,
    ),
    ("if-it-hangs", "Restart Deployment web if it hangs.", E, None, True),
    ("whenever-crashes", "Restart Deployment web whenever it crashes.", E, None, True),
    ("only-on-weekdays", "You may resume Job etl, but only on weekdays.", E, None, True),
    ("ask-first", "You may restart Deployment web, but ask first.", E, None, True),
    (
        "not-during-business-hours",
        "You may restart Deployment web, but not during business hours.",
        E,
        None,
        True,
    ),
    (
        "not-on-weekends-sentence",
        "You may resume Job etl. You may not resume Job etl on weekends.",
        E,
        None,
        True,
    ),
    # --- exceptions -------------------------------------------------------------------------
    (
        "but-not",
        "You may resume Job etl but not Job etl-backfill.",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "comma-not",
        "Resume Job etl, not Job etl-backfill.",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "but-not-listed",
        "You may suspend CronJobs nightly and weekly but not CronJob weekly.",
        {"suspend CronJob nightly"},
        {"no suspend of CronJob weekly"},
        False,
    ),
    (
        "but-never",
        "You may resume Job etl-backfill but never Job etl.",
        {"resume Job etl-backfill"},
        {"no resume of Job etl"},
        False,
    ),
    (
        "but-not-other-kind",
        "You may restart Deployment web but not StatefulSet web.",
        {"restart Deployment web"},
        {"no restart of StatefulSet web"},
        False,
    ),
    ("any-except", "You may restart any Deployment except Deployment db.", E, None, True),
    (
        "change-anything-except",
        "Do not change anything except Job c.",
        E,
        {"no change of anything but Job c"},
        False,
    ),
    (
        "touch-anything-but",
        "Do not touch anything but Job render-part-2.",
        E,
        {"no change of anything but Job render-part-2"},
        False,
    ),
    (
        "grant-then-nothing-else",
        "You may resume Job etl. Do not touch anything else.",
        {"resume Job etl"},
        None,
        False,
    ),
    ("anything-else-alone", "Do not change anything else.", E, None, False),
    (
        "except-then-grant-inside",
        "Do not change anything except Job render-part-2. You may resume Job render-part-2.",
        {"resume Job render-part-2"},
        {"no change of anything but Job render-part-2"},
        False,
    ),
    (
        "except-then-grant-outside",
        "Do not change anything but Job a. You may resume Job b.",
        E,
        {"no change of anything but Job a"},
        False,
    ),
    (
        "except-then-grant-outside-long-names",
        "Do not change anything but Job alpha. You may resume Job beta.",
        E,
        {"no change of anything but Job alpha"},
        False,
    ),
    # Safer: a parenthesised exception without a kind goes to a person, with no grant.
    ("paren-not", "You may resume Job x (not x-dryrun).", E, None, True),
    # --- prohibitions -----------------------------------------------------------------------
    ("never", "Never restart Deployment db.", E, {"no restart of Deployment db"}, False),
    ("do-not", "Do not restart Deployment db.", E, {"no restart of Deployment db"}, False),
    ("dont", "Don't restart Deployment db.", E, {"no restart of Deployment db"}, False),
    ("dont-curly", "Don\u2019t restart Deployment db.", E, {"no restart of Deployment db"}, False),
    (
        "under-no-circumstances",
        "Under no circumstances restart Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    (
        "under-no-circumstances-should-you",
        "Under no circumstances should you scale Deployment db.",
        E,
        {"no scale of Deployment db"},
        False,
    ),
    ("avoid-scaling", "Avoid scaling Deployment web.", E, {"no scale of Deployment web"}, False),
    (
        "refrain-from-deleting",
        "Refrain from deleting Job audit-log.",
        E,
        {"no delete-failed-pods or rerun of Job audit-log"},
        False,
    ),
    (
        "never-delete",
        "Never delete Job audit-log.",
        E,
        {"no delete-failed-pods or rerun of Job audit-log"},
        False,
    ),
    (
        "off-limits-this-week",
        "Deployment payments is off-limits this week.",
        E,
        {"no change of Deployment payments"},
        False,
    ),
    (
        "off-limits-spaced",
        "Deployment payments is off limits.",
        E,
        {"no change of Deployment payments"},
        False,
    ),
    ("read-only-object", "StatefulSet db is read-only.", E, {"no change of StatefulSet db"}, False),
    (
        "are-protected",
        "Deployments web and api are protected.",
        E,
        {"no change of Deployment web", "no change of Deployment api"},
        False,
    ),
    (
        "must-not-be-touched",
        "Job etl-backfill must not be touched.",
        E,
        {"no change of Job etl-backfill"},
        False,
    ),
    (
        "must-not",
        "You must not resume Job etl-backfill.",
        E,
        {"no resume of Job etl-backfill"},
        False,
    ),
    ("may-not", "You may not restart Deployment db.", E, {"no restart of Deployment db"}, False),
    ("cannot", "You cannot suspend CronJob billing.", E, {"no suspend of CronJob billing"}, False),
    (
        "not-allowed-to",
        "You are not allowed to suspend CronJob billing.",
        E,
        {"no suspend of CronJob billing"},
        False,
    ),
    (
        "it-is-not-ok",
        "It's not OK to restart Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    (
        "may-never",
        "You may never restart Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    (
        "two-verbs-forbidden",
        "Do not restart or scale Deployment db.",
        E,
        {"no restart of Deployment db", "no scale of Deployment db"},
        False,
    ),
    (
        "two-objects-forbidden",
        "Do not restart Deployment db or Deployment cache.",
        E,
        {"no restart of Deployment db", "no restart of Deployment cache"},
        False,
    ),
    ("never-touch", "Never touch Job x-dryrun.", E, {"no change of Job x-dryrun"}, False),
    ("do-not-modify", "Do not modify ConfigMap app.", E, {"no change of ConfigMap app"}, False),
    ("leave-alone", "Leave Deployment db alone.", E, {"no change of Deployment db"}, False),
    ("hands-off", "Hands off Deployment db.", E, {"no change of Deployment db"}, False),
    (
        "no-restarts-noun",
        "No restarts of Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    (
        "do-not-comma-under-any",
        "Do not, under any circumstances, restart Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    (
        "nobody-may",
        "Nobody may restart Deployment db.",
        E,
        {"no restart of Deployment db"},
        False,
    ),
    # Safer: a limit the grammar cannot carry ("more than once") goes to a person.
    ("not-more-than-once", "Do not rerun Job etl more than once.", E, None, True),
    # Not a prohibition, not a grant: a person reads it.
    ("need-not", "You need not restart Deployment web.", E, None, True),
    ("dont-need-to", "You don't need to restart Deployment web.", E, None, True),
    ("no-need", "There is no need to restart Deployment web.", E, None, True),
    # Means "go ahead", but in words outside the grammar: safer to ask than to guess.
    ("do-not-hesitate", "Do not hesitate to restart Deployment web.", E, None, True),
    ("do-not-worry", "Do not worry about Deployment web.", E, None, True),
    # --- only observe -----------------------------------------------------------------------
    ("only-observe", "Only observe.", E, {"no change of anything"}, False),
    ("just-watch", "Just watch.", E, {"no change of anything"}, False),
    ("observe-only", "Observe only.", E, {"no change of anything"}, False),
    ("monitor-read-only", "This monitor is read-only.", E, {"no change of anything"}, False),
    ("make-no-changes", "Make no changes.", E, {"no change of anything"}, False),
    ("change-nothing", "Change nothing.", E, {"no change of anything"}, False),
    ("do-not-change-anything", "Do not change anything.", E, {"no change of anything"}, False),
    ("do-not-touch-anything", "Do not touch anything.", E, {"no change of anything"}, False),
    ("nothing-but-observe", "Do nothing but observe.", E, {"no change of anything"}, False),
    (
        "only-observe-and-do-not-change",
        "Only observe; do not change anything.",
        E,
        {"no change of anything"},
        False,
    ),
    (
        "observe-then-grant",
        "Only observe. You may resume Job etl.",
        E,
        {"no change of anything"},
        False,
    ),
    # Read whole: "otherwise" only says what no grant names stays as it is.
    (
        "grant-then-otherwise-observe",
        "You may resume Job etl. Otherwise only observe.",
        {"resume Job etl"},
        None,
        False,
    ),
    # --- retractions ------------------------------------------------------------------------
    (
        "retraction",
        "You may restart Deployment web. Do not restart Deployment web.",
        E,
        {"no restart of Deployment web"},
        False,
    ),
    (
        "retraction-actually",
        "You may restart Deployment web. Actually, do not restart Deployment web.",
        E,
        None,
        True,
    ),
    (
        "retraction-second-thought",
        "You may restart Deployment web. On second thought, don't.",
        E,
        None,
        True,
    ),
    (
        "retraction-scratch-that",
        "You may resume Job etl. Scratch that: leave Job etl suspended.",
        E,
        None,
        True,
    ),
    (
        "retraction-imperative-never",
        "Restart Deployment web. Never restart Deployment web.",
        E,
        {"no restart of Deployment web"},
        False,
    ),
    (
        "retraction-touch",
        "You may resume Job etl. Never touch Job etl.",
        E,
        {"no change of Job etl"},
        False,
    ),
    (
        "retraction-off-limits",
        "You may restart Deployment web. Deployment web is off-limits.",
        E,
        {"no change of Deployment web"},
        False,
    ),
    # --- pronouns ---------------------------------------------------------------------------
    (
        "pronoun-after-grant",
        "You may restart Deployment web. If it hangs, restart it.",
        {"restart Deployment web"},
        None,
        True,
    ),
    ("pronoun-alone", "Restart it.", E, None, True),
    ("pronoun-them", "Resume them.", E, None, True),
    # "it" is the one object its sentence names: read so, and a person confirms it.
    ("pronoun-same-sentence", "Job etl is stuck; resume it.", {"resume Job etl"}, E, True),
    (
        "pronoun-in-grant-clause",
        "You may resume Job etl and rerun it once.",
        {"resume Job etl", "rerun Job etl, once"},
        E,
        True,
    ),
    (
        "pronoun-suspended-setting",
        "Job backfill is suspended; you may resume it by setting spec.suspend to false.",
        {"resume Job backfill"},
        E,
        True,
    ),
    (
        "pronoun-condition",
        "You may resume Job mail if it is suspended.",
        {"resume Job mail, if job mail suspended"},
        E,
        True,
    ),
    # Two objects in the sentence: "it" may be either.
    ("pronoun-two-objects", "Job load waits for Job extract; resume it.", E, None, True),
    # What "it" stands for in a prohibition is not read: every object, the safer.
    (
        "pronoun-prohibition",
        "You may resume Job etl. Deployment web is fragile; do not restart it.",
        {"resume Job etl"},
        {"no restart of anything"},
        True,
    ),
    (
        "pronoun-prohibition-drops",
        "You may restart Deployment api. Deployment web is fragile; do not restart it.",
        E,
        {"no restart of anything"},
        True,
    ),
    ("pronoun-repair", "You may fix it through the repair workflow.", E, None, True),
    # --- an object's fields -----------------------------------------------------------------
    # A field no verb of the vocabulary writes forbids none: the grant stands.
    (
        "fields-its-command-image",
        "Job etl is suspended; you may resume it. Do not change its command or image.",
        {"resume Job etl"},
        {"no change to fields of anything"},
        True,
    ),
    (
        "fields-pod-template-forbids-restart",
        "You may restart Deployment web. Do not change its pod template.",
        E,
        {"no restart of anything"},
        False,
    ),
    (
        "fields-replica-count-of",
        "You may scale Deployment web to 3. Do not change the replica count of Deployment web.",
        E,
        {"no scale of Deployment web"},
        False,
    ),
    (
        "fields-and-any-other",
        "You may scale Deployment web back to 2 replicas. Do not change its pod template or "
        "any other workload.",
        {"scale Deployment web to 2"},
        {"no restart of anything"},
        False,
    ),
    (
        "fields-then-other-objects",
        "You may scale StatefulSet mq from 1 to 3 replicas. Do not change its pod template or "
        "its volume settings, and do not touch any other workload.",
        {"scale StatefulSet mq to 3"},
        {"no restart of anything"},
        False,
    ),
    (
        "fields-the-spec",
        "You may resume Job etl. Do not change the spec of Job etl.",
        E,
        {"no change of Job etl"},
        False,
    ),
    # --- what stays as it is ------------------------------------------------------------------
    (
        "keep-fields-of-unchanged",
        "You may restart Deployment worker. Keep the image, command, environment and replica "
        "count of Deployment worker unchanged.",
        {"restart Deployment worker"},
        {"no scale of Deployment worker"},
        False,
    ),
    (
        "keep-object-as-it-is",
        "You may resume Job etl. Keep Deployment db as it is.",
        {"resume Job etl"},
        {"no change of Deployment db"},
        False,
    ),
    (
        "leave-its-keys",
        "You may set key mode of ConfigMap flags to live. Leave its other keys as they are.",
        {"set-key ConfigMap flags key mode to live"},
        {"no change to fields of anything"},
        False,
    ),
    (
        "keep-object-and-its-spec",
        "You may resume Job etl. Keep Job load and its spec as they are.",
        {"resume Job etl"},
        {"no change of Job load"},
        False,
    ),
    (
        "leave-the-granted-object-alone",
        "You may resume Job etl. Leave Job etl alone.",
        E,
        {"no change of Job etl"},
        False,
    ),
    # "Keep it running" says what should hold, not what stays unchanged: a person reads it.
    ("keep-running", "Keep Deployment web running.", E, None, True),
    # --- several verbs forbidden, creation ----------------------------------------------------
    (
        "two-verbs-or",
        "You may resume Job alpha. Do not change or delete Deployment relay or ConfigMap settings.",
        {"resume Job alpha"},
        {"no change of Deployment relay", "no change of ConfigMap settings"},
        False,
    ),
    (
        "create-or-delete-anything",
        "You may rerun Job etl once. Do not create or delete anything.",
        E,
        {"no delete-failed-pods or rerun of anything"},
        False,
    ),
    (
        "resume-or-change",
        "You may resume Job alpha. Job beta waits for a review: do not resume or change Job beta.",
        {"resume Job alpha"},
        {"no change of Job beta"},
        True,
    ),
    # --- how a grant is done, and why -------------------------------------------------------
    (
        "restart-with-rollout",
        "You may restart Deployment web with a rollout restart.",
        {"restart Deployment web"},
        E,
        False,
    ),
    (
        "so-that-purpose",
        "You may restart Deployment web once so that new pods load today's prices.",
        {"restart Deployment web, once"},
        E,
        True,
    ),
    # A purpose that may limit goes to a person and holds the grant back.
    (
        "so-that-limit",
        "You may restart Deployment web so that nothing else restarts.",
        E,
        None,
        True,
    ),
    (
        "and-let-it-finish",
        "You may resume Job etl and let it finish.",
        {"resume Job etl"},
        E,
        False,
    ),
    # --- statements of how things are -------------------------------------------------------
    # A word of restriction in a statement about the cluster limits nothing; a person reads it.
    (
        "statement-without",
        "The checkout ran in shadow mode for a week without errors. You may set key mode of "
        "ConfigMap flags to live.",
        {"set-key ConfigMap flags key mode to live"},
        E,
        True,
    ),
    (
        "statement-only-when",
        "Deployment worker reads that ConfigMap only when a pod starts. You may restart "
        "Deployment worker.",
        {"restart Deployment worker"},
        E,
        True,
    ),
    (
        "statement-instead",
        "ConfigMap prices was corrected: currency is now EUR instead of USD. You may restart "
        "Deployment worker.",
        {"restart Deployment worker"},
        E,
        True,
    ),
    # A statement that speaks of a change, or refers back, may limit: held back.
    (
        "statement-of-change",
        "You may restart Deployment db. The team does not want Deployment db restarted.",
        E,
        None,
        True,
    ),
    # A limiting clause that names no object takes back the grants of the verbs its modals
    # govern, when the vocabulary has each; any other verb, or none, takes back every grant.
    (
        "no-start-keeps-a-suspend",
        "The bucket moves tonight, so no export may start until the move is done. You may "
        "suspend CronJob nightly-export.",
        {"suspend CronJob nightly-export"},
        E,
        True,
    ),
    (
        "no-start-takes-back-a-resume",
        "No export may start until noon. You may resume Job etl.",
        E,
        None,
        True,
    ),
    (
        "nothing-scaled-keeps-a-suspend",
        "You may suspend CronJob report. Nothing may be scaled before noon.",
        {"suspend CronJob report"},
        E,
        True,
    ),
    (
        "nothing-scaled-takes-back-a-scale",
        "You may scale Deployment web to 3. Nothing may be scaled before noon.",
        E,
        None,
        True,
    ),
    (
        "starting-as-a-state-takes-back-all",
        "You may suspend CronJob report. Not while anything is starting.",
        E,
        None,
        True,
    ),
    (
        "unknown-verb-takes-back-all",
        "You may suspend CronJob report. No export may be moved before noon.",
        E,
        None,
        True,
    ),
    (
        "do-not-start",
        "You may resume Job etl. Do not start Job etl-backfill.",
        {"resume Job etl"},
        {"no repair or rerun or restart or resume or scale of Job etl-backfill"},
        False,
    ),
    (
        "statement-pronoun-not-safe",
        "You may restart Deployment web. It is not safe during peak hours.",
        E,
        None,
        True,
    ),
    (
        "statement-no-one-approved",
        "You may scale Deployment web to 3. Nobody has approved the cost yet.",
        E,
        None,
        True,
    ),
    # --- other languages --------------------------------------------------------------------
    ("de-duerfen", "Du darfst Job etl fortsetzen.", E, None, True),
    ("de-sie", "Sie d\u00fcrfen Deployment web neu starten.", E, None, True),
    ("de-imperative", "Starte Deployment web neu.", E, None, True),
    ("de-bitte-english-verb", "Bitte restart Deployment web.", E, None, True),
    ("de-nicht", "Deployment db bitte nicht anfassen.", E, None, True),
    ("fr-pouvez", "Vous pouvez reprendre le Job etl.", E, None, True),
    ("fr-ne-pas", "Ne red\u00e9marrez pas Deployment db.", E, None, True),
    ("fr-reprenez-slash", "Reprenez job/etl.", E, None, True),
    ("fr-mixed", "Vous pouvez restart Deployment web.", E, None, True),
    ("es-puedes", "Puedes reanudar el Job etl.", E, None, True),
    ("es-no-reinicies", "No reinicies Deployment db.", E, None, True),
    ("es-escalar", "Puedes escalar Deployment web a 3 r\u00e9plicas.", E, None, True),
    # --- goal-only tasks --------------------------------------------------------------------
    ("goal-must-complete", "Job build must complete.", E, E, False),
    ("goal-must-be-available", "Deployment web must be available.", E, E, False),
    ("goal-finish", "Finish Job build.", E, E, False),
    ("goal-stop-when", "Stop when Job build has succeeded.", E, E, False),
    ("goal-no-object", "Get the nightly pipeline green again.", E, E, False),
    ("goal-watch-until", "Watch the batch pipeline until morning.", E, E, False),
    # Names an object in words the grammar does not read: by the rule, a person looks.
    ("goal-should-finish-by", "Job etl should finish by 6am.", E, None, True),
    # --- questions ----------------------------------------------------------------------------
    # A question grants nothing.
    ("question-you-may", "You may resume Job etl?", E, None, True),
    ("question-may-i", "May I resume Job etl?", E, None, True),
    ("question-can-you", "Can you resume Job etl?", E, None, True),
    # --- set-key --------------------------------------------------------------------------
    (
        "set-key",
        "You may set ConfigMap app key mode to fast.",
        {"set-key ConfigMap app key mode to fast"},
        E,
        False,
    ),
    (
        "set-key-of",
        "You may set key mode of ConfigMap app to fast or safe.",
        {"set-key ConfigMap app key mode to fast or safe"},
        E,
        False,
    ),
    (
        "set-key-three-values",
        "Set ConfigMap app key mode to fast, medium or safe.",
        {"set-key ConfigMap app key mode to fast or medium or safe"},
        E,
        False,
    ),
    (
        "set-key-number",
        "You may set key replicas of ConfigMap app to 3.",
        {"set-key ConfigMap app key replicas to 3"},
        E,
        False,
    ),
    ("set-key-anything", "You may set ConfigMap app key mode to anything.", E, None, True),
    ("change-configmap-no-key", "You may change ConfigMap app.", E, None, True),
    ("set-key-deployment", "You may set Deployment web key mode to fast.", E, None, True),
    (
        "set-key-but-never",
        "You may set key mode of ConfigMap app to fast, but never to unsafe.",
        {"set-key ConfigMap app key mode to fast"},
        None,
        True,
    ),
    # --- delete-failed-pods, rerun ---------------------------------------------------------
    (
        "delete-failed-pods",
        "You may delete the failed pods of Job etl.",
        {"delete-failed-pods Job etl"},
        E,
        False,
    ),
    (
        "clean-up-failed-pods",
        "Clean up failed pods of Job etl.",
        {"delete-failed-pods Job etl"},
        E,
        False,
    ),
    (
        "remove-failed-pods-from",
        "You may remove the failed pods from Job etl.",
        {"delete-failed-pods Job etl"},
        E,
        False,
    ),
    ("delete-job", "You may delete Job etl.", E, None, True),
    ("delete-pods", "You may delete pods.", E, None, True),
    (
        "delete-failed-pods-deployment",
        "You may delete the failed pods of Deployment web.",
        E,
        None,
        True,
    ),
    (
        "delete-then-rerun",
        "Delete the failed pods of Job etl, then rerun Job etl.",
        {"delete-failed-pods Job etl", "rerun Job etl"},
        E,
        False,
    ),
    (
        # Rerunning a Job deletes it: "never delete anything" forbids the rerun.
        "rerun-vs-never-delete",
        "You may rerun Job etl. Never delete anything.",
        E,
        {"no delete-failed-pods or rerun of anything"},
        False,
    ),
    # --- restart, GitOps --------------------------------------------------------------------
    (
        "gitops-argo",
        "You may restart Deployment web, even though Argo CD manages it.",
        {"restart Deployment web, though a GitOps controller manages it"},
        E,
        False,
    ),
    (
        "gitops-flux",
        "You may restart Deployment web even though it is managed by Flux.",
        {"restart Deployment web, though a GitOps controller manages it"},
        E,
        False,
    ),
    # Safer: the GitOps words sit in their own clause, with a pronoun; a person looks.
    (
        "gitops-separate-clause",
        "You may restart Deployment web; Argo CD manages it.",
        {"restart Deployment web"},
        None,
        True,
    ),
    ("restart-a-job", "You may restart Job etl.", E, None, True),
    ("restart-configmap", "You may restart ConfigMap app.", E, None, True),
    ("suspend-a-deployment", "You may suspend Deployment web.", E, None, True),
    ("resume-a-pod", "You may resume Pod etl-abc.", E, None, True),
    ("restart-a-service", "You may restart Service web.", E, None, True),
    ("scale-an-hpa", "You may scale HPA web to 3.", E, None, True),
    ("resume-no-kind", "You may resume etl.", E, None, True),
    # --- repair -----------------------------------------------------------------------------
    (
        "repair-through-workflow",
        "You may fix the build configuration through the repair workflow.",
        {"repair the build configuration"},
        E,
        False,
    ),
    (
        "repair-via-flow",
        "Repair the build configuration via the repair flow.",
        {"repair the build configuration"},
        E,
        False,
    ),
    (
        "use-repair-workflow",
        "You may use the repair workflow.",
        {"repair the repair workflow"},
        E,
        False,
    ),
    (
        "use-repair-and-restart",
        "Use the repair workflow and restart Deployment web.",
        {"repair the repair workflow", "restart Deployment web"},
        E,
        False,
    ),
    # Safer: restart through the repair workflow, or the repair workflow and a restart? Ask.
    ("repair-header", "Use the repair workflow:\n- restart Deployment web", E, None, True),
    ("fix-no-workflow", "You may fix the build.", E, None, True),
    ("fix-whatever", "Fix whatever is broken.", E, None, True),
    # --- over-grant traps -------------------------------------------------------------------
    (
        "x-and-x-dryrun",
        "You may resume Job x. Never touch Job x-dryrun.",
        {"resume Job x"},
        {"no change of Job x-dryrun"},
        False,
    ),
    (
        "x-dryrun-and-x",
        "You may resume Job x-dryrun. Never touch Job x.",
        {"resume Job x-dryrun"},
        {"no change of Job x"},
        False,
    ),
    (
        "etl-and-backfill",
        "You may resume Job etl. Do not resume Job etl-backfill.",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "backfill-first",
        "Do not resume Job etl-backfill. You may resume Job etl.",
        {"resume Job etl"},
        {"no resume of Job etl-backfill"},
        False,
    ),
    (
        "web-canary",
        "You may restart Deployment web-canary. Do not restart Deployment web.",
        {"restart Deployment web-canary"},
        {"no restart of Deployment web"},
        False,
    ),
    (
        "prohibit-db-grant-web",
        "Do not restart Deployment db, but you may restart Deployment web.",
        {"restart Deployment web"},
        {"no restart of Deployment db"},
        False,
    ),
    (
        "grant-web-not-db",
        "You may not restart Deployment db but you may restart Deployment web.",
        {"restart Deployment web"},
        {"no restart of Deployment db"},
        False,
    ),
    (
        "instead",
        "Never restart Deployment db; restart Deployment web instead.",
        {"restart Deployment web"},
        {"no restart of Deployment db"},
        False,
    ),
    ("glob-slash", "You may resume jobs/etl-*.", E, None, True),
    ("glob-kind-name", "You may resume Job etl-*.", E, None, True),
    ("glob-star-alone", "You may resume job/*.", E, None, True),
    ("glob-matching", "You may resume all jobs matching etl-*.", E, None, True),
    ("every-job", "You may resume every Job.", E, None, True),
    ("any-suspended-job", "You may resume any suspended Job.", E, None, True),
    ("all-deployments", "You may restart all Deployments.", E, None, True),
    ("whatever-needed", "Do whatever is needed to get Job etl done.", E, None, True),
    # A word after a comma is no object's name: no grant on Job too, Deployment please, Job now.
    ("comma-too", "You may resume Job etl, too.", {"resume Job etl"}, E, False),
    ("comma-please", "Restart Deployment web, please.", {"restart Deployment web"}, E, False),
    ("comma-now", "Resume Job etl, now.", {"resume Job etl"}, E, False),
    ("comma-quickly", "You may resume Job etl, quickly.", {"resume Job etl"}, E, False),
    (
        "names-then-verb",
        "You may resume Jobs etl and suspend CronJob nightly.",
        {"resume Job etl", "suspend CronJob nightly"},
        E,
        False,
    ),
    # A wrapped negation must not leave its second line to read as an imperative.
    (
        "wrapped-negation",
        "You may not\nrestart Deployment web.",
        E,
        {"no restart of Deployment web"},
        False,
    ),
    (
        "wrapped-permission",
        "You may resume Job etl and\nrestart Deployment web.",
        {"resume Job etl", "restart Deployment web"},
        E,
        False,
    ),
    # A quotation of the stop rule is no permission.
    ("quoted-stop-rule", 'The stop rule says: "Resume Job etl."', E, None, True),
    ("reported-speech", "Someone said you may restart Deployment web.", E, None, True),
    (
        "stop-rule-resumed",
        [
            (Words.task, "Job etl must complete."),
            (Words.stopWhen, "Stop when Job etl has been resumed."),
        ],
        E,
        None,
        # A stop rule grants nothing; a "Stop when ..." sentence is the goal's (clear).
        False,
    ),
    (
        "stop-rule-imperative-then-stop",
        [(Words.stopWhen, "Resume Job etl, then stop.")],
        E,
        None,
        True,
    ),
    (
        "stop-rule-stop-when-succeeded",
        [
            (Words.task, "You may resume Job etl."),
            (Words.stopWhen, "Stop when Job etl has succeeded."),
        ],
        {"resume Job etl"},
        E,
        False,
    ),
    (
        "namespace-instructions-forbid",
        [
            (Words.task, "You may restart Deployment web."),
            (Words.namespaceInstructions, "Never restart Deployment web."),
        ],
        E,
        {"no restart of Deployment web"},
        False,
    ),
    (
        "cluster-instructions-read-only",
        [(Words.task, "You may resume Job etl."), (Words.clusterInstructions, "Only observe.")],
        E,
        {"no change of anything"},
        False,
    ),
    # --- whole tasks ------------------------------------------------------------------------
    (
        "task-etl-pipeline",
        "The nightly pipeline is stuck because Job extract failed. You may rerun Job extract "
        "once. After Job extract has succeeded, you may resume Job load. Do not touch CronJob "
        "billing.",
        {"rerun Job extract, once", "resume Job load, if job extract succeeded"},
        {"no change of CronJob billing"},
        # The first sentence names Job extract in words the grammar does not read.
        True,
    ),
    (
        "task-web-rollout",
        "Deployment web must be available. You may restart Deployment web at most twice. You "
        "may scale Deployment web between 2 and 4 replicas. Never restart Deployment db.",
        {
            "restart Deployment web, at most 2 times",
            "scale Deployment web between 2 and 4",
        },
        {"no restart of Deployment db"},
        False,
    ),
    (
        "task-allowed-and-never",
        "Job report must complete.\nAllowed:\n- resume Job report\n- rerun Job report once\n"
        "Never:\n- touch CronJob billing",
        {"resume Job report", "rerun Job report, once"},
        {"no change of CronJob billing"},
        False,
    ),
    (
        "task-render-parts",
        "Job render-part-1 must complete. You may resume Job render-part-1. Do not change "
        "anything but Job render-part-1.",
        {"resume Job render-part-1"},
        {"no change of anything but Job render-part-1"},
        False,
    ),
    (
        "task-gitops",
        "Deployment api must be available. You may restart Deployment api once, even though "
        "Argo CD manages it.",
        {"restart Deployment api, once, though a GitOps controller manages it"},
        E,
        False,
    ),
    (
        "task-narrative-then-pronoun",
        "Job etl has been suspended since Monday. Please resume it.",
        E,
        None,
        True,
    ),
    (
        "task-configmap-and-restart",
        "You may set key mode of ConfigMap app to safe. After that, restart Deployment web.",
        {"set-key ConfigMap app key mode to safe"},
        None,
        # "After that" is a condition the grammar cannot read.
        True,
    ),
    (
        "task-mixed-x",
        "- may: resume job/x\n- may: rerun job/x once\n- must not: touch job/x-dryrun",
        {"resume Job x", "rerun Job x, once"},
        {"no change of Job x-dryrun"},
        False,
    ),
]

# Forms of each verb's words, to check that a grant's quote says its verb.
VERB_WORDS: dict[GrantVerb, tuple[str, ...]] = {
    GrantVerb.resume: ("resume", "unsuspend", "unpause"),
    GrantVerb.suspend: ("suspend", "pause"),
    GrantVerb.scale: ("scale",),
    GrantVerb.restart: ("restart", "redeploy"),
    GrantVerb.deleteFailedPods: ("delete", "clean", "remove"),
    GrantVerb.rerun: ("rerun", "re-run", "run"),
    GrantVerb.setKey: ("set", "change"),
    GrantVerb.repair: ("fix", "repair"),
}
_WORD = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]|[a-z0-9]")


def words_of(text: str) -> set[str]:
    """The words of a text, lower case, a slash or any punctuation but . _ - between them."""
    found = set(_WORD.findall(text.casefold()))
    return found | {w.rstrip(".") for w in found}


def grant_invariant(grant: TypedGrant) -> str | None:
    """What is wrong with a grant: its object's name or its verb missing from its quote."""
    words = words_of(grant.quote)
    if grant.object is not None and grant.object.name not in words:
        return f"the name {grant.object.name!r} is not a word of {grant.quote!r}"
    if grant.verb is GrantVerb.repair:
        if not any(w.startswith(("fix", "repair")) for w in words):
            return f"no word of repair in {grant.quote!r}"
    elif not any(w.startswith(f) for w in words for f in VERB_WORDS[grant.verb]):
        return f"no word of {grant.verb.value} in {grant.quote!r}"
    return None


def reading_of(texts: Texts) -> Reading:
    if isinstance(texts, str):
        return read([(Words.task, texts)])
    return read(list(texts))


def granted(r: Reading) -> set[str]:
    """Every grant the reading makes (while a clause is unclear, a person confirms them)."""
    return {grant_line(g) for g in r.grants}


def summary(r: Reading) -> str:
    return (
        f"grants={sorted(grant_line(g) for g in r.grants)} "
        f"refused={sorted(grant_line(g) for g, _ in r.refused)} "
        f"prohibitions={sorted(prohibition_line(p) for p in r.prohibitions)} "
        f"unclear={[u.sentence for u in r.unclear]}"
    )


# Rows the grammar reads otherwise than the words mean, from a run against reading.py; each
# reason says what the grammar does; none of them grants what the words did not give.
GRAMMAR_GAPS: dict[str, str] = {
    "set-key-but-never": "grammar: ', but never to unsafe' is not read, and 'never' may take "
    "the grant back, so it is refused until a person grants it (safe, not what is meant)",
    "do-a-rolling-restart": "grammar: no 'do a rolling restart of'",
    "leading-if-necessary": "grammar: a leading filler ('If necessary,') is not read",
    "namespace-vs-own-namespace": "grammar: the prohibition on Job etl (any namespace) drops "
    "the grant on Job etl in namespace batch; the row wants it unclear (safe: no grant)",
    "you-may-header-numbered": "grammar: 'You may:' is no header ('you may :' not in _HEADERS)",
    "yaml-allowed-empty": "grammar: an empty 'allowed: []' is unclear, not read as nothing",
    "one-time-only": "grammar: 'one time only' is not read",
    "three-times-bare": "grammar: '3 times' without 'at most' is not read",
    "as-many-times": "grammar: 'as many times as needed' is not read",
    "comma-not": "grammar: ', not Job etl-backfill' (an exception without 'but') is not read",
    "but-never": "grammar: 'but never Job etl' (elliptical 'never') is not read",
    "except-then-grant-outside": "grammar: 'Job a' is unread ('a' is reserved): the "
    "prohibition is unclear, and it refuses the grant on Job b (safe)",
    "may-never": "grammar: 'You may never' is no negation",
    "two-verbs-forbidden": "grammar: 'Do not restart or scale X' (two verbs, one object) is "
    "not read",
    "hands-off": "grammar: 'Hands off X' is not read",
    "no-restarts-noun": "grammar: 'No restarts of X' (a noun) is not read",
    "do-not-comma-under-any": "grammar: 'Do not, under any circumstances, ...' is not read",
    "delete-then-rerun": "grammar: ', then rerun Job etl' is not read",
    "use-repair-and-restart": "grammar: 'use the repair workflow and restart ...' (two "
    "grants joined by 'and') is unclear (safe: no grant)",
    "instead": "grammar: a trailing 'instead' is not read",
    "comma-too": "grammar: a trailing ', too' is not read: unclear (safe: no grant)",
    "comma-please": "grammar: a trailing ', please' is not read: unclear (safe: no grant)",
    "comma-now": "grammar: a trailing ', now' is not read: unclear (safe: no grant)",
    "comma-quickly": "grammar: a trailing ', quickly' is not read: unclear (safe: no grant)",
}


def _params() -> list[object]:
    return [
        pytest.param(
            texts,
            frozenset(grants),
            None if prohibitions is None else frozenset(prohibitions),
            unclear,
            id=row_id,
            marks=(
                [pytest.mark.xfail(strict=True, reason=GRAMMAR_GAPS[row_id])]
                if row_id in GRAMMAR_GAPS
                else []
            ),
        )
        for row_id, texts, grants, prohibitions, unclear in ROWS
    ]


def test_rows_are_many_and_distinct() -> None:
    ids = [row[0] for row in ROWS]
    assert len(ids) >= 160
    assert len(set(ids)) == len(ids)
    assert set(GRAMMAR_GAPS) <= set(ids)


@pytest.mark.parametrize(("texts", "grants", "prohibitions", "unclear"), _params())
def test_phrasing(
    texts: Texts,
    grants: frozenset[str],
    prohibitions: frozenset[str] | None,
    unclear: bool,
) -> None:
    r = reading_of(texts)
    for g in r.grants:
        assert grant_invariant(g) is None, grant_invariant(g)
    got_grants = granted(r)
    got_prohibitions = {prohibition_line(p) for p in r.prohibitions}
    assert got_grants - grants == set(), f"over-grant: {summary(r)}"
    assert got_grants == grants, summary(r)
    if prohibitions is not None:
        assert got_prohibitions == prohibitions, summary(r)
    assert bool(r.unclear) == unclear, summary(r)


def corpus_counts() -> tuple[int, int, list[str], list[str]]:
    """Over the whole corpus: rows read right, rows with unclear words, each over-grant (an
    accepted grant not in the row's expected set) as `row: grant line`, and the rows with a
    grant that breaks `grant_invariant`."""
    right = unclear_rows = 0
    over: list[str] = []
    broken: list[str] = []
    for row_id, texts, grants, prohibitions, unclear in ROWS:
        r = reading_of(texts)
        got = granted(r)
        over += [f"{row_id}: {line}" for line in sorted(got - set(grants))]
        broken += [row_id for g in r.grants if grant_invariant(g) is not None]
        unclear_rows += bool(r.unclear)
        got_prohibitions = {prohibition_line(p) for p in r.prohibitions}
        right += (
            got == set(grants)
            and (prohibitions is None or got_prohibitions == set(prohibitions))
            and bool(r.unclear) == unclear
        )
    return right, unclear_rows, over, broken


def test_no_over_grants_over_the_corpus() -> None:
    right, unclear_rows, over, broken = corpus_counts()
    print(
        f"corpus: {len(ROWS)} phrasings, {right} right, {unclear_rows} unclear, "
        f"{len(over)} over-grants"
    )
    assert over == [], "\n".join(over)
    assert broken == []
