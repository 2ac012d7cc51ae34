"""A corpus of stop rules and what they mean, read by goalkeeper.core.goals.read_stop_rule.

Each row: the stop rule (or the stop rule and the task, when the rule names an object
without its kind), and the rule it must read as, in `describe` lines. The expectations were
written from what the words mean. What the grammar cannot read with certainty must come out
`judged` (for a model to answer) and never as a guess: a typed leaf on the wrong object, a
count taken from a neighbour, a limit that blocks completion, or a condition dropped.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from goalkeeper.core.goals import GoalRule, LeafKind, describe, read_stop_rule

NS = "shop"
LIMITS = (LeafKind.checksAtLeast, LeafKind.unchangedFor, LeafKind.elapsedAtLeast)
TASK = (
    "Scale Deployment web to 3 and Deployment old-web to 0. Resume Job etl. "
    "CronJob nightly runs the report."
)

# (id, stop rule or (stop rule, task), describe lines)
ROWS: list[tuple[str, str | tuple[str, str], list[str]]] = [
    # --- Jobs -------------------------------------------------------------------------------
    ("succeeded", "Stop when Job build has succeeded.", ["done when: Job build succeeded"]),
    ("completed", "Stop when Job build completed.", ["done when: Job build succeeded"]),
    ("is-complete", "Stop once Job build is complete.", ["done when: Job build succeeded"]),
    (
        "finished-successfully",
        "Stop when Job build has finished successfully.",
        ["done when: Job build succeeded"],
    ),
    ("done-when", "Done when Job build succeeds.", ["done when: Job build succeeded"]),
    ("complete-when", "Complete when job build completes.", ["done when: Job build succeeded"]),
    ("the-name-kind", "Stop when the build Job has succeeded.", ["done when: Job build succeeded"]),
    ("terse", "Stop when job/build succeeded", ["done when: Job build succeeded"]),
    ("bare", "Job build has completed.", ["done when: Job build succeeded"]),
    ("must-complete", "Job build must complete.", ["done when: Job build succeeded"]),
    ("as-soon-as", "Stop as soon as Job build has finished.", ["done when: Job build succeeded"]),
    ("running", "Stop when Job etl is running.", ["done when: Job etl running"]),
    ("suspended", "Stop when Job etl is suspended.", ["done when: Job etl suspended"]),
    ("not-running", "Stop when Job etl isn't running.", ["done when: NOT Job etl running"]),
    (
        "no-longer-suspended",
        "Stop when Job etl is no longer suspended.",
        ["done when: NOT Job etl suspended"],
    ),
    ("resumed", "Stop once Job etl has been resumed.", ["done when: NOT Job etl suspended"]),
    ("has-not-failed", "Stop when Job etl hasn't failed.", ["done when: NOT Job etl failed"]),
    (
        "namespace",
        "Stop when Job build in namespace ci has succeeded.",
        ["done when: Job build in namespace ci succeeded"],
    ),
    # A failure ends the run, and meets no goal: it is a give-up leaf.
    ("fails-alone", "Stop when Job build fails.", ["give up when: Job build failed"]),
    (
        "succeeds-or-fails",
        "Stop when Job build has succeeded or failed.",
        ["done when: Job build succeeded", "give up when: Job build failed"],
    ),
    # --- lists, and, or ---------------------------------------------------------------------
    (
        "list",
        "Stop when Jobs extract, transform and load have succeeded.",
        ["done when: Job extract succeeded AND Job transform succeeded AND Job load succeeded"],
    ),
    (
        "list-or",
        "Stop when Job extract or Job load has succeeded.",
        ["done when: Job extract succeeded", "done when: Job load succeeded"],
    ),
    (
        "and",
        "Stop when Job build has succeeded and Deployment web is available.",
        ["done when: Job build succeeded AND Deployment web available"],
    ),
    (
        "both",
        "Stop when both Job build has succeeded and Job test has succeeded.",
        ["done when: Job build succeeded AND Job test succeeded"],
    ),
    (
        "either",
        "Stop when either Job build or Job test has failed.",
        ["give up when: Job build failed", "give up when: Job test failed"],
    ),
    (
        "either-subjects-and",
        "Stop when either Job build or Job test has succeeded and Deployment web is available.",
        [
            "done when: Job build succeeded AND Deployment web available",
            "done when: Job test succeeded AND Deployment web available",
        ],
    ),
    (
        "and-binds-tighter",
        "Stop when Job build has succeeded or Job test has succeeded and Deployment web is ready.",
        [
            "done when: Job build succeeded",
            "done when: Job test succeeded AND Deployment web available",
        ],
    ),
    (
        "comma-list",
        "Stop when Job build has succeeded, Job test has succeeded and Deployment web is ready.",
        ["done when: Job build succeeded AND Job test succeeded AND Deployment web available"],
    ),
    (
        "or-when",
        "Stop when Job build has succeeded or when CronJob nightly is suspended.",
        ["done when: Job build succeeded", "done when: CronJob nightly suspended"],
    ),
    (
        "two-states",
        "Stop when Deployment web is available and has 3 ready replicas.",
        ["done when: Deployment web available AND Deployment web available >= 3"],
    ),
    (
        "two-stop-sentences",
        "Stop when Job build has succeeded. Stop when Job ship has succeeded.",
        ["done when: Job build succeeded", "done when: Job ship succeeded"],
    ),
    # "deploy" is a kind word, never a name.
    (
        "kind-word-name",
        "Stop when Job deploy has succeeded.",
        ['done when: judged "Job deploy has succeeded"'],
    ),
    (
        "bare-must",
        "Stop when Job build has succeeded. Deployment web must have 2 available replicas.",
        ["done when: Job build succeeded AND Deployment web available >= 2"],
    ),
    (
        "bare-sentences",
        "Job build has succeeded. Deployment web is available.",
        ["done when: Job build succeeded AND Deployment web available"],
    ),
    (
        "trailing-stop",
        "Once Job build has succeeded, stop.",
        ["done when: Job build succeeded"],
    ),
    (
        "trailing-done",
        "When Jobs build and test have succeeded, we're done.",
        ["done when: Job build succeeded AND Job test succeeded"],
    ),
    (
        "header-list",
        "Stop when:\n- Job build has succeeded\n- Deployment web has 3 ready replicas",
        ["done when: Job build succeeded AND Deployment web available >= 3"],
    ),
    # --- workloads --------------------------------------------------------------------------
    (
        "ready-replicas",
        "Stop when Deployment web has 3 ready replicas.",
        ["done when: Deployment web available >= 3"],
    ),
    (
        "available-pods",
        "Stop when deployment web has 2 available pods.",
        ["done when: Deployment web available >= 2"],
    ),
    (
        "at-least",
        "Stop when Deployment web has at least 4 replicas.",
        ["done when: Deployment web available >= 4"],
    ),
    (
        "or-more",
        "Stop when StatefulSet db has 3 or more ready replicas.",
        ["done when: StatefulSet db available >= 3"],
    ),
    # "has 3 replicas": asked for and running, so a scale down from 5 is not done at once.
    (
        "plain-replicas",
        "Stop when Deployment web has 3 replicas.",
        ["done when: Deployment web replicas = 3 AND Deployment web available >= 3"],
    ),
    (
        "zero-replicas",
        "Stop when Deployment old-web has 0 replicas.",
        ["done when: Deployment old-web replicas = 0"],
    ),
    (
        "no-replicas",
        "Stop when Deployment old-web has no replicas.",
        ["done when: Deployment old-web replicas = 0"],
    ),
    (
        "scaled-to-zero",
        "Stop when Deployment old-web is scaled to zero.",
        ["done when: Deployment old-web replicas = 0"],
    ),
    (
        "scaled-down",
        "Stop when Deployment old-web has been scaled down to 0.",
        ["done when: Deployment old-web replicas = 0"],
    ),
    (
        "no-ready",
        "Stop when Deployment web has no ready replicas.",
        ["done when: NOT Deployment web available >= 1"],
    ),
    ("is-available", "Stop when deploy/web is available.", ["done when: Deployment web available"]),
    ("terse-available", "Stop when deploy/web available", ["done when: Deployment web available"]),
    (
        "not-available",
        "Stop when Deployment web is not available.",
        ["done when: NOT Deployment web available"],
    ),
    (
        "rollout-of",
        "Stop when the rollout of Deployment web is complete.",
        ["done when: Deployment web rolled out"],
    ),
    (
        "rollout-possessive",
        "Stop when Deployment web's rollout has finished.",
        ["done when: Deployment web rolled out"],
    ),
    (
        "fully-rolled-out",
        "Stop when StatefulSet db is fully rolled out.",
        ["done when: StatefulSet db rolled out"],
    ),
    (
        "daemonset",
        "Stop when DaemonSet log-agent is updated.",
        ["done when: DaemonSet log-agent rolled out"],
    ),
    (
        "daemonset-ready",
        "Stop when ds/log-agent is ready.",
        ["done when: DaemonSet log-agent available"],
    ),
    # The harmful example: each count belongs to its own object.
    (
        "names-from-task",
        ("Stop when web has 3 ready replicas and old-web is scaled to zero.", TASK),
        ["done when: Deployment web available >= 3 AND Deployment old-web replicas = 0"],
    ),
    (
        "names-without-kind",
        "Stop when web has 3 ready replicas and old-web is scaled to zero.",
        ['done when: judged "web has 3 ready replicas and old-web is scaled to zero"'],
    ),
    (
        "kinds-mixed",
        "Stop when Deployment web has 3 ready replicas and Deployment old-web has 0 replicas.",
        ["done when: Deployment web available >= 3 AND Deployment old-web replicas = 0"],
    ),
    # --- pods -------------------------------------------------------------------------------
    (
        "crash-loop-give-up",
        "Stop when Deployment web has 3 ready replicas, or give up if its pods crash-loop.",
        [
            "done when: Deployment web available >= 3",
            "give up when: Deployment web pods restarting",
        ],
    ),
    (
        "its-two-objects",
        "Stop when Job seed has succeeded and Deployment web is available, or give up if its "
        "pods keep crashing.",
        [
            "done when: Job seed succeeded AND Deployment web available",
            'give up when: judged "its pods keep crashing"',
        ],
    ),
    (
        "crash-loop-named",
        "Give up if the pods of Deployment web are crash-looping.",
        ["give up when: Deployment web pods restarting"],
    ),
    (
        "no-pods-crash",
        # "it" as a subject, with one object named: that object.
        "Stop when no pods of Deployment web are crash-looping and it is available.",
        ["done when: NOT Deployment web pods restarting AND Deployment web available"],
    ),
    (
        "or-when-it-failed",
        "Stop when Job quarterly-report has succeeded, or when it has failed.",
        [
            "done when: Job quarterly-report succeeded",
            "give up when: Job quarterly-report failed",
        ],
    ),
    (
        # Which object "it" is, only a model can tell: a judged give-up, the typed part stands.
        "it-with-two-objects",
        "Stop when Job a1 and Job b1 have succeeded, or when it fails.",
        ["done when: Job a1 succeeded AND Job b1 succeeded", 'give up when: judged "it fails"'],
    ),
    (
        "it-not-a-subject",
        "Stop when Job x has succeeded, or when it is clear it cannot finish.",
        ["done when: Job x succeeded", 'give up when: judged "it is clear it cannot finish"'],
    ),
    (
        # A last alternative the grammar cannot read may mean giving up: it never completes.
        "unread-alternative-gives-up",
        "Stop when Job ledger has succeeded, or when it cannot finish without a change this "
        "task does not allow.",
        [
            "done when: Job ledger succeeded",
            'give up when: judged "it cannot finish without a change this task does not allow"',
        ],
    ),
    (
        "unread-alternative-after-a-workload",
        "Stop when Deployment indexer has one available replica, or when getting there would "
        "take a change this task forbids.",
        [
            "done when: Deployment indexer available >= 1",
            'give up when: judged "getting there would take a change this task forbids"',
        ],
    ),
    (
        "unread-alternative-of-a-person",
        "Stop when Job transcode has succeeded, or when nobody approves the spending.",
        [
            "done when: Job transcode succeeded",
            'give up when: judged "nobody approves the spending"',
        ],
    ),
    (
        "unread-alternative-with-its",
        "Stop when Job export has succeeded, or when its re-run has failed too.",
        ["done when: Job export succeeded", 'give up when: judged "its re-run has failed too"'],
    ),
    (
        # "unless" may reach over every alternative before it: judged whole.
        "unread-alternative-that-reaches-back",
        "Stop when Job export has succeeded, or when Job backup has, unless it is a holiday.",
        [
            'done when: judged "Job export has succeeded, or when Job backup has, unless it is '
            'a holiday"'
        ],
    ),
    (
        # With no typed alternative, nothing anchors the rule: judged whole, as before.
        "only-unread-alternatives",
        "Stop when the dashboard is green, or when nobody needs the report any more.",
        ['done when: judged "the dashboard is green, or when nobody needs the report any more"'],
    ),
    (
        "no-pods-crash-typed",
        "Stop when Deployment web is available and no pods of Deployment web are crash-looping.",
        ["done when: Deployment web available AND NOT Deployment web pods restarting"],
    ),
    # --- CronJobs and ConfigMaps ------------------------------------------------------------
    (
        "cronjob-suspended",
        "Stop when CronJob nightly is suspended.",
        ["done when: CronJob nightly suspended"],
    ),
    (
        "cronjob-resumed",
        "Stop when cj/nightly is no longer paused.",
        ["done when: NOT CronJob nightly suspended"],
    ),
    (
        "last-run",
        "Stop when CronJob nightly's last run succeeded.",
        ["done when: CronJob nightly last run succeeded"],
    ),
    (
        "last-run-of",
        "Stop when the last run of CronJob nightly has failed.",
        ["done when: NOT CronJob nightly last run succeeded"],
    ),
    (
        "configmap-has",
        "Stop when ConfigMap app has key mode set to fast.",
        ["done when: ConfigMap app key mode = fast"],
    ),
    (
        "configmap-key-of",
        'Stop when key LOG_LEVEL of ConfigMap app is "debug".',
        ["done when: ConfigMap app key LOG_LEVEL = debug"],
    ),
    (
        "configmap-possessive-not",
        "Stop when ConfigMap app's key mode is no longer Safe.",
        ["done when: NOT ConfigMap app key mode = Safe"],
    ),
    (
        "cronjob-succeeded",
        "Stop when CronJob nightly has succeeded.",
        ['done when: judged "CronJob nightly has succeeded"'],
    ),
    # --- give up, limits --------------------------------------------------------------------
    (
        "or-stop-if",
        "Stop when Job build has succeeded, or stop if Job build fails.",
        ["done when: Job build succeeded", "give up when: Job build failed"],
    ),
    (
        "and-give-up",
        "Stop when Deployment web is available and give up if Job migrate has failed.",
        ["done when: Deployment web available", "give up when: Job migrate failed"],
    ),
    (
        "give-up-sentence",
        "Stop when Job build has succeeded. Give up if Job build or Job test fails.",
        [
            "done when: Job build succeeded",
            "give up when: Job build failed",
            "give up when: Job test failed",
        ],
    ),
    (
        "fail-if",
        "Stop when Job build has succeeded; fail if Deployment db is not available.",
        ["done when: Job build succeeded", "give up when: NOT Deployment db available"],
    ),
    (
        "stop-and-give-up",
        "Stop when Job build has succeeded, or stop and give up when CronJob nightly is suspended.",
        ["done when: Job build succeeded", "give up when: CronJob nightly suspended"],
    ),
    # The harmful example: a count of checks never blocks completion.
    (
        "checks-without-progress",
        "Stop when Deployment web has 3 ready replicas or after 10 checks without progress.",
        ["done when: Deployment web available >= 3", "give up when: unchanged checks >= 10"],
    ),
    (
        "after-checks",
        "Stop when Job build has succeeded or after 10 checks.",
        ["done when: Job build succeeded", "give up when: checks >= 10"],
    ),
    ("stop-after-checks", "Stop after 20 checks.", ["give up when: checks >= 20"]),
    (
        "whichever",
        "Stop when Job build has succeeded, or after 10 checks, whichever comes first.",
        ["done when: Job build succeeded", "give up when: checks >= 10"],
    ),
    (
        "nothing-changes",
        "Stop when Job etl has succeeded. Give up if nothing changes for 5 checks.",
        ["done when: Job etl succeeded", "give up when: unchanged checks >= 5"],
    ),
    (
        "unchanged-checks",
        "Give up after 6 unchanged checks.",
        ["give up when: unchanged checks >= 6"],
    ),
    (
        "at-most",
        "Stop when Job etl has succeeded. At most 30 checks.",
        ["done when: Job etl succeeded", "give up when: checks >= 30"],
    ),
    (
        "hours",
        "Stop when Job etl has succeeded, or stop after 2 hours.",
        ["done when: Job etl succeeded", "give up when: minutes >= 120"],
    ),
    (
        "an-hour",
        "Stop when Job etl has succeeded or after an hour.",
        ["done when: Job etl succeeded", "give up when: minutes >= 60"],
    ),
    ("days", "Give up after 2 days.", ["give up when: minutes >= 2880"]),
    # A limit joined by "and" to a goal would block completion: the words are judged.
    (
        "checks-and",
        "Stop when Job etl has succeeded and after 3 checks.",
        ['done when: judged "Job etl has succeeded and after 3 checks"'],
    ),
    # --- judged, wholly or in part ----------------------------------------------------------
    (
        "looks-right",
        "Stop when the report looks right.",
        ['done when: judged "the report looks right"'],
    ),
    (
        "logs-say",
        "Stop when the logs say 'backfill done'.",
        ["done when: judged \"the logs say 'backfill done'\""],
    ),
    (
        "partly-judged",
        "Stop when Job etl has succeeded and the dashboard is green.",
        ['done when: Job etl succeeded AND judged "the dashboard is green"'],
    ),
    (
        "judged-or-typed",
        "Stop when the dashboard is green or Job etl has failed.",
        ['done when: judged "the dashboard is green"', "give up when: Job etl failed"],
    ),
    (
        "default-rule",
        "Stop only when the user explicitly asks to stop.",
        ['done when: judged "the user explicitly asks to stop"'],
    ),
    ("pronoun", "Stop when it has succeeded.", ['done when: judged "it has succeeded"']),
    (
        "the-job",
        "Stop when the Job has succeeded.",
        ['done when: judged "the Job has succeeded"'],
    ),
    # A part that may reach over its neighbours judges the whole clause.
    (
        "unless",
        "Stop when Job etl has succeeded, unless Job load is still running.",
        ['done when: judged "Job etl has succeeded, unless Job load is still running"'],
    ),
    (
        "not-the-case",
        "Stop when it is not the case that Job a1 and Job b1 have succeeded.",
        ['done when: judged "it is not the case that Job a1 and Job b1 have succeeded"'],
    ),
    (
        "twice",
        "Stop when Job etl has succeeded twice.",
        ['done when: judged "Job etl has succeeded twice"'],
    ),
    (
        "for-checks",
        "Stop when Deployment web has been available for 3 checks in a row.",
        ['done when: judged "Deployment web has been available for 3 checks in a row"'],
    ),
    (
        "either-or-and",
        "Stop when either Job x1 has succeeded or Job y1 has succeeded and Job z1 is suspended.",
        [
            'done when: judged "either Job x1 has succeeded or Job y1 has succeeded and '
            'Job z1 is suspended"'
        ],
    ),
    (
        "failure-and-goal",
        "Stop when Jobs build and test have succeeded or failed.",
        ['done when: judged "Jobs build and test have succeeded or failed"'],
    ),
    (
        "glob",
        "Stop when jobs/etl-* have succeeded.",
        ['done when: judged "jobs/etl-* have succeeded"'],
    ),
    (
        "give-up-and",
        "Give up if Job build and Job test have failed.",
        ['give up when: judged "Job build and Job test have failed"'],
    ),
    (
        "give-up-judged",
        "Stop when Job etl has succeeded, or give up if the database is unreachable.",
        ["done when: Job etl succeeded", 'give up when: judged "the database is unreachable"'],
    ),
    (
        "relative-checks",
        "Stop after 10 more checks.",
        ['done when: judged "10 more checks"'],
    ),
    (
        "per-object-time",
        "Give up if Job etl runs longer than 2 hours.",
        ['give up when: judged "Job etl runs longer than 2 hours"'],
    ),
    (
        "healthy",
        "Stop when Deployment web is healthy.",
        ['done when: judged "Deployment web is healthy"'],
    ),
    (
        "configmap-vague",
        "Stop when ConfigMap app has the new settings.",
        ['done when: judged "ConfigMap app has the new settings"'],
    ),
    (
        "or-later",
        "Stop when Job etl has succeeded or later.",
        ['done when: judged "Job etl has succeeded or later"'],
    ),
    (
        "ellipsis",
        "Stop when Job etl has succeeded and Job load too.",
        ['done when: Job etl succeeded AND judged "Job load too"'],
    ),
    (
        "question",
        "Stop when Job etl succeeded? Not sure.",
        ['done when: judged "Job etl succeeded?"', "unclear: Not sure."],
    ),
    (
        "parentheses",
        "Stop when Job etl has succeeded (or after 10 checks).",
        ['done when: judged "Job etl has succeeded (or after 10 checks)"'],
    ),
    # A state in parentheses joins the one before it, as written without them.
    (
        "parenthesised-state",
        "done when job/etl succeeded (or failed)",
        ["done when: Job etl succeeded", "give up when: Job etl failed"],
    ),
    (
        "parenthesised-and-state",
        "Stop when Deployment web is available (and has 3 ready replicas).",
        ["done when: Deployment web available AND Deployment web available >= 3"],
    ),
    (
        "parenthesised-not-closed",
        "Stop when Job etl has succeeded (or failed.",
        ['done when: judged "Job etl has succeeded (or failed"'],
    ),
    # Objects named before, as a subject ("either of them"): which ones only a model can
    # tell; judged, and a give-up when every state said of them is a failure.
    (
        "either-of-them-failed",
        "Stop when Job etl has succeeded, or when either of them has failed.",
        ["done when: Job etl succeeded", 'give up when: judged "either of them has failed"'],
    ),
    (
        "any-of-them-crashing",
        "Stop when Deployment web is available, or give up if any of them keeps crashing.",
        [
            "done when: Deployment web available",
            'give up when: judged "any of them keeps crashing"',
        ],
    ),
    (
        "both-of-them-succeeded",
        "Stop when both of them have succeeded.",
        ['done when: judged "both of them have succeeded"'],
    ),
    (
        "one-of-them-not-failed",
        "Stop when Job etl has succeeded or one of them has not failed.",
        ["done when: Job etl succeeded", 'done when: judged "one of them has not failed"'],
    ),
    (
        "them-and-typed",
        "Stop when Job etl has succeeded and each of them is suspended.",
        ['done when: Job etl succeeded AND judged "each of them is suspended"'],
    ),
    # --- other leads ------------------------------------------------------------------------
    ("until", "Don't stop until Job etl has succeeded.", ["done when: Job etl succeeded"]),
    (
        "or-more-after",
        "Stop when Deployment web has 3 ready replicas or more.",
        ["done when: Deployment web available >= 3"],
    ),
    # After a `Stop when` sentence, `Stop if` is what else ends the run: never the goal.
    (
        "later-stop-if",
        "Stop when Job etl has succeeded. Stop if Deployment db is not available.",
        ["done when: Job etl succeeded", "give up when: NOT Deployment db available"],
    ),
    (
        "header-give-up",
        "Stop when Job etl has succeeded.\nGive up if:\n- Job etl has failed\n"
        "- 10 checks without progress",
        [
            "done when: Job etl succeeded",
            "give up when: Job etl failed",
            "give up when: unchanged checks >= 10",
        ],
    ),
    # --- pods started after a ConfigMap's write, or the run's start -------------------------
    (
        "started-after-the-fix",
        (
            "Stop when every running pod of pricing-worker started after the fix and its "
            "rollout is complete.",
            "ConfigMap pricing-config in this namespace was corrected a few minutes ago. "
            "You may restart Deployment pricing-worker so that new pods read the corrected value.",
        ),
        [
            "done when: Deployment pricing-worker pods all started after ConfigMap "
            "pricing-config was last written AND Deployment pricing-worker rolled out"
        ],
    ),
    (
        "restarted-since-a-named-write",
        "Stop when all pods of Deployment web have been restarted since ConfigMap web-config "
        "was last written.",
        ["done when: Deployment web pods all started after ConfigMap web-config was last written"],
    ),
    (
        "after-the-last-change-to",
        "Stop when every pod of Deployment web started after the last change to ConfigMap "
        "web-config.",
        ["done when: Deployment web pods all started after ConfigMap web-config was last written"],
    ),
    (
        "possessive-since-the-monitor",
        (
            "Stop when web's running pods were restarted after this Monitor started.",
            "Restart Deployment web once.",
        ),
        ["done when: Deployment web pods all started after the run started"],
    ),
    (
        "after-the-run-or-a-limit",
        "Stop when every pod of StatefulSet db started after the run started, or after 5 checks.",
        [
            "done when: StatefulSet db pods all started after the run started",
            "give up when: checks >= 5",
        ],
    ),
    (
        "the-fix-of-no-configmap",
        (
            "Stop when every pod of web started after the fix.",
            "A fix to the image was pushed. ConfigMap web-config was updated last week. "
            "You may restart Deployment web.",
        ),
        ['done when: judged "every pod of web started after the fix"'],
    ),
    (
        "the-fix-of-two-configmaps",
        (
            "Stop when every pod of Deployment web started after the fix.",
            "ConfigMap a was fixed, and ConfigMap b was fixed too.",
        ),
        ['done when: judged "every pod of Deployment web started after the fix"'],
    ),
    (
        "the-fix-said-of-a-deployment",
        (
            "Stop when every pod of Deployment web started after the fix.",
            "Deployment web was fixed yesterday; ConfigMap web-config holds its settings.",
        ),
        ['done when: judged "every pod of Deployment web started after the fix"'],
    ),
    (
        "after-a-job-is-no-write",
        "Stop when every pod of Deployment web started after Job migrate finished.",
        ['done when: judged "every pod of Deployment web started after Job migrate finished"'],
    ),
    (
        "pods-of-a-job-start-after-nothing",
        "Stop when every pod of Job etl started after this Monitor did.",
        ['done when: judged "every pod of Job etl started after this Monitor did"'],
    ),
    # --- context, authority, and nothing ----------------------------------------------------
    (
        "context",
        "Stop when Job etl has succeeded. It usually takes an hour.",
        ["done when: Job etl succeeded", "unclear: It usually takes an hour."],
    ),
    (
        "context-state",
        "Job etl is suspended now. Stop when Job etl has succeeded.",
        ["done when: Job etl succeeded", "unclear: Job etl is suspended now."],
    ),
    (
        "grant-left-to-authority",
        "Stop when Job etl has succeeded. You may resume Job etl.",
        ["done when: Job etl succeeded"],
    ),
    ("empty", "", []),
]


def _text(words: str | tuple[str, str]) -> tuple[str, str]:
    return (words, "") if isinstance(words, str) else words


@pytest.mark.parametrize(("words", "expected"), [pytest.param(w, e, id=i) for i, w, e in ROWS])
def test_corpus(words: str | tuple[str, str], expected: list[str]) -> None:
    stop_when, task = _text(words)
    rule = read_stop_rule(stop_when, NS, task)
    assert describe(rule) == expected
    # What the reading keeps, a Monitor's status can hold and give back unchanged.
    assert GoalRule.model_validate_json(rule.model_dump_json()) == rule


def test_corpus_size() -> None:
    judged = [i for i, _, lines in ROWS if any('judged "' in line for line in lines)]
    assert len(ROWS) >= 70
    assert len(judged) >= 15


def test_every_leaf_quotes_its_own_words() -> None:
    for _, words, _ in ROWS:
        stop_when, task = _text(words)
        rule = read_stop_rule(stop_when, NS, task)
        for leaf in rule.leaves():
            assert " ".join(leaf.quote.split()) in " ".join(stop_when.split())
            if leaf.kind is LeafKind.judged:
                assert leaf.question == leaf.quote


def test_leaves_are_numbered_once() -> None:
    rule = read_stop_rule(
        "Stop when either Job x1 or Job y1 has succeeded and Deployment web is ready.", NS
    )
    web = [
        leaf for group in rule.done for leaf in group if leaf.object and leaf.object.name == "web"
    ]
    assert len(web) == 2 and web[0] == web[1]
    assert [leaf.id for leaf in rule.leaves()] == ["g1", "g2", "g3"]


def test_a_rule_too_large_is_judged_whole() -> None:
    pairs = " and ".join(f"either Job p{i} or Job q{i} has succeeded" for i in range(5))
    rule = read_stop_rule(f"Stop when {pairs}.", NS)
    assert [leaf.kind for leaf in rule.leaves()] == [LeafKind.judged]


LEADS = ["Stop when", "Stop once", "Done when", "Give up if", "or stop if", "and", "or", ""]
CLAUSES = [
    "Job etl has succeeded",
    "Jobs extract and load have failed",
    "Deployment web has 3 ready replicas",
    "web is scaled to zero",
    "after 10 checks",
    "10 checks without progress",
    "after 2 hours",
    "the report looks right",
    "the pods of Deployment web are crash-looping",
    "ConfigMap app has key mode set to fast",
    "CronJob nightly is not suspended",
    "it is not the case that",
    "either",
    "both",
    ",",
    "unless",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LEADS + CLAUSES), max_size=14), st.sampled_from([". ", "\n", " "]))
def test_any_words_read_safely(words: list[str], joint: str) -> None:
    stop_when = joint.join(words)
    rule = read_stop_rule(stop_when, NS, TASK)
    assert GoalRule.model_validate_json(rule.model_dump_json()) == rule
    for group in rule.done:
        for leaf in group:
            # A limit or a failure ends a run as given up; it never holds completion back.
            ends = leaf.kind in (LeafKind.jobFailed, LeafKind.podsRestarting)
            assert leaf.kind not in LIMITS and not (ends and not leaf.negated)
    for leaf in rule.leaves():
        if len(leaf.quote) < 300:
            assert " ".join(leaf.quote.split()) in " ".join(stop_when.split())
