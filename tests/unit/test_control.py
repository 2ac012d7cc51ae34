"""`goalkeeper pause|resume|check`: the patch each sends, the line each prints, and the
errors a missing Monitor or a refused patch give."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from goalkeeper.cli import build_parser
from goalkeeper.control import (
    MERGE_PATCH,
    Control,
    annotations_patch,
    check_now_value,
    needs_patch,
    outcome,
    refusal,
    refused_check,
    run_control,
)
from goalkeeper.core.controls import CHECK_NOW, PAUSED, controls_of
from goalkeeper.kubeclient import context_namespace

NOW = datetime(2026, 12, 1, 19, 40, 0, 299889, tzinfo=UTC)


def monitor(annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "build", "namespace": "team-a", "annotations": annotations or {}},
        "status": {"monitor": "active", **status},
    }


def test_a_check_value_is_rfc3339_utc_with_microseconds_and_new() -> None:
    value = check_now_value(NOW)
    assert value == "2026-12-01T19:40:00.299889Z"
    assert datetime.fromisoformat(value) == NOW
    # Another zone reads as the same instant in UTC.
    east = NOW.astimezone(timezone(timedelta(hours=2)))
    assert check_now_value(east) == value
    # A value already set or honoured is never sent again.
    again = check_now_value(NOW, {value, "2026-12-01T19:40:00.299890Z"})
    assert again == "2026-12-01T19:40:00.299891Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", again)
    # The value fits what the operator keeps, unchanged.
    assert controls_of({CHECK_NOW: value}).check_now == value


def test_each_control_is_one_merge_patch_of_one_annotation() -> None:
    assert annotations_patch(Control.pause) == {"metadata": {"annotations": {PAUSED: "true"}}}
    assert annotations_patch(Control.resume) == {"metadata": {"annotations": {PAUSED: None}}}
    assert annotations_patch(Control.check, "v1") == {
        "metadata": {"annotations": {CHECK_NOW: "v1"}}
    }
    assert controls_of(annotations_patch(Control.pause)["metadata"]["annotations"]).paused
    # Only resume can have nothing to change.
    assert needs_patch(Control.pause, monitor({PAUSED: "true"}))
    assert needs_patch(Control.resume, monitor({PAUSED: "true"}))
    assert needs_patch(Control.resume, monitor({PAUSED: "false"}))
    assert not needs_patch(Control.resume, monitor())
    assert needs_patch(Control.check, monitor())


def test_pause_says_the_running_step_finishes_then_nothing_launches() -> None:
    running = monitor(step={"kind": "observe", "seq": 2, "check": 1})
    assert outcome(Control.pause, running) == (
        "paused monitor team-a/build: the running observe step finishes and its result is "
        "taken, then nothing launches until `goalkeeper resume build` (Step column: paused)"
    )
    assert outcome(Control.pause, monitor()) == (
        "paused monitor team-a/build: nothing launches until `goalkeeper resume build` "
        "(Step column: paused)"
    )
    assert "already paused" in outcome(Control.pause, monitor({PAUSED: "True "}))
    assert "it is stopped" in outcome(Control.pause, monitor(monitor="stopped"))


def test_resume_says_a_check_starts_now_unless_something_else_holds_the_monitor() -> None:
    paused = {PAUSED: "true"}
    line = outcome(Control.resume, monitor(paused))
    assert line.startswith("resumed monitor team-a/build: an observe step starts now")
    assert "kubectl get monitorsteps -l goalkeeper.dev/monitor=build" in line
    assert outcome(Control.resume, monitor()) == (
        "monitor team-a/build is not paused: nothing changed"
    )
    assert "until a spec edit begins a new run" in outcome(
        Control.resume, monitor(paused, monitor="stopped")
    )
    assert "approval request req-2" in outcome(
        Control.resume, monitor(paused, approval={"id": "req-2"})
    )
    assert "its act step runs on" in outcome(Control.resume, monitor(paused, step={"kind": "act"}))


def test_check_names_its_value_and_when_the_check_starts() -> None:
    value = check_now_value(NOW)
    requested = f"requested a check of monitor team-a/build ({CHECK_NOW}={value})"
    assert outcome(Control.check, monitor(), value).startswith(
        f"{requested}: an observe step starts now"
    )
    assert outcome(Control.check, monitor({PAUSED: "true"}), value) == (
        f"{requested}, but it is paused: nothing launches until `goalkeeper resume build`, "
        "which checks at once"
    )
    assert outcome(Control.check, monitor(step={"kind": "observe"}), value) == (
        f"{requested}: an observe step runs now, and its result is that check"
    )
    assert outcome(Control.check, monitor(step={"kind": "act"}), value) == (
        f"{requested}: its act step runs now, and an observe step follows it at once"
    )
    assert refused_check(monitor()) is None
    stopped = refused_check(monitor(monitor="stopped", stop={"reason": "goalComplete"}))
    assert stopped is not None and "(goalComplete): a check starts nothing" in stopped


def test_refusals_name_the_missing_monitor_or_the_rbac_verb() -> None:
    missing = refusal(Control.pause, "build", "team-a", 404, "Not Found", "gone", writing=False)
    assert missing == (
        "goalkeeper: no Monitor build in namespace team-a "
        "(`kubectl get monitors -n team-a` lists them)"
    )
    denied = refusal(
        Control.check, "build", "team-a", 403, "Forbidden", "user bob cannot patch", writing=True
    )
    assert "refused to patch Monitor team-a/build" in denied
    assert "`goalkeeper check` needs the RBAC verb patch on monitors (goalkeeper.dev)" in denied
    assert denied.endswith("The API server said: user bob cannot patch")
    unread = refusal(Control.pause, "build", "team-a", 403, "Forbidden", "", writing=False)
    assert "refused to get" in unread and "verbs get and patch on monitors" in unread
    other = refusal(Control.resume, "build", "team-a", 422, "Invalid", "bad", writing=True)
    assert other == "goalkeeper: 422 Invalid: bad"


def test_the_namespace_defaults_to_the_current_context(tmp_path: Path) -> None:
    def kubeconfig(namespace: str | None) -> str:
        context: dict[str, Any] = {"cluster": "c", "user": "u"}
        if namespace:
            context["namespace"] = namespace
        path = tmp_path / f"config-{namespace}"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "here", "context": context}],
                    "current-context": "here",
                }
            )
        )
        return str(path)

    assert context_namespace(kubeconfig("team-a")) == "team-a"
    assert context_namespace(kubeconfig(None)) == "default"


def test_the_commands_parse_with_an_optional_namespace() -> None:
    parser = build_parser()
    for verb in ("pause", "resume", "check"):
        args = parser.parse_args([verb, "build"])
        assert (args.monitor, args.namespace, Control(args.command)) == (
            "build",
            None,
            Control(verb),
        )
        assert parser.parse_args([verb, "build", "-n", "team-a"]).namespace == "team-a"


# --- run_control against a fake API -------------------------------------------------------


class FakeCustom:
    def __init__(self, found: dict[str, Any] | None, refuse_patch: int | None = None) -> None:
        self.found = found
        self.refuse_patch = refuse_patch
        self.patches: list[tuple[str, str, dict[str, Any], str | None]] = []

    def get_namespaced_custom_object(self, *args: Any) -> dict[str, Any]:
        if self.found is None:
            raise _api_error(404, "Not Found", 'monitors.goalkeeper.dev "build" not found')
        return self.found

    def patch_namespaced_custom_object(
        self, group: str, version: str, ns: str, plural: str, name: str, body: Any, **kw: Any
    ) -> dict[str, Any]:
        if self.refuse_patch:
            raise _api_error(self.refuse_patch, "Forbidden", "cannot patch resource monitors")
        assert (group, version, plural) == ("goalkeeper.dev", "v1alpha1", "monitors")
        self.patches.append((ns, name, body, kw.get("_content_type")))
        return {}


def _api_error(status: int, reason: str, message: str) -> ApiException:
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"message": message})
    return error


def run(fake: FakeCustom, what: Control, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str, str]:
    import kubernetes.client

    monkeypatch.setattr(kubernetes.client, "CustomObjectsApi", lambda _: fake)
    out, err = io.StringIO(), io.StringIO()
    code = run_control(what, "build", "team-a", api_client=object(), now=NOW, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_pause_and_check_send_their_merge_patch_and_print_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeCustom(monitor())
    code, out, err = run(fake, Control.pause, monkeypatch)
    assert (code, err) == (0, "")
    assert fake.patches == [("team-a", "build", annotations_patch(Control.pause), MERGE_PATCH)]
    assert out.count("\n") == 1 and out.startswith("paused monitor team-a/build")

    code, out, _ = run(fake, Control.check, monkeypatch)
    assert code == 0
    assert fake.patches[-1][2] == annotations_patch(Control.check, check_now_value(NOW))
    assert check_now_value(NOW) in out


def test_check_never_resends_the_value_the_monitor_honoured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    honoured = check_now_value(NOW)
    fake = FakeCustom(monitor({CHECK_NOW: honoured}, checkNowHandled=honoured))
    assert run(fake, Control.check, monkeypatch)[0] == 0
    sent = fake.patches[-1][2]["metadata"]["annotations"][CHECK_NOW]
    assert sent != honoured and datetime.fromisoformat(sent) > NOW


def test_resume_of_a_monitor_that_is_not_paused_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeCustom(monitor())
    code, out, _ = run(fake, Control.resume, monkeypatch)
    assert code == 0 and fake.patches == [] and "is not paused" in out


def test_a_stopped_monitor_takes_no_check(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCustom(monitor(monitor="stopped", stop={"reason": "safetyLimit"}))
    code, out, err = run(fake, Control.check, monkeypatch)
    assert (code, out, fake.patches) == (1, "", [])
    assert "is stopped (safetyLimit)" in err


def test_a_missing_monitor_or_a_refused_patch_fails_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, err = run(FakeCustom(None), Control.pause, monkeypatch)
    assert (code, out) == (1, "")
    assert err.startswith("goalkeeper: no Monitor build in namespace team-a")

    code, out, err = run(FakeCustom(monitor(), refuse_patch=403), Control.pause, monkeypatch)
    assert (code, out) == (1, "")
    assert "needs the RBAC verb patch on monitors" in err
    assert "cannot patch resource monitors" in err


def test_no_kubeconfig_is_exit_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    err = io.StringIO()
    assert run_control(Control.pause, "build", err=err) == 2
    assert "no kubeconfig" in err.getvalue()
