"""Redaction of what the step reads: objects, and credentials in any text."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from tests.support.step_fakes import FakeKube, config_map, deployment

from goalkeeper.step.redact import LAST_APPLIED, REDACTED, looks_secret, redact, redact_text, scrub
from goalkeeper.step.tools import StepTools, ToolConfig

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJidWlsZCJ9.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAx1\nAbCdEf==\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASSWORD",
        "passwd",
        "apiKey",
        "API_KEY",
        "github-token",
        "client_secret",
        "aws_credentials",
        "PRIVATE_PEM",
        "Token",
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize("name", ["LOG_LEVEL", "replicas", "done", "total", "url"])
def test_plain_names(name: str) -> None:
    assert not looks_secret(name)


def test_container_env_values_with_secret_names_are_redacted_at_any_depth() -> None:
    env = [
        {"name": "DB_PASSWORD", "value": "hunter2"},
        {"name": "api_key", "value": "k-123"},
        {"name": "LOG_LEVEL", "value": "debug"},
        {"name": "TOKEN_FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "db", "key": "t"}}},
    ]
    cronjob = {
        "kind": "CronJob",
        "spec": {
            "jobTemplate": {
                "spec": {"template": {"spec": {"initContainers": [{"name": "i", "env": env}]}}}
            }
        },
    }
    out = redact(cronjob)
    seen = out["spec"]["jobTemplate"]["spec"]["template"]["spec"]["initContainers"][0]["env"]
    assert [e.get("value") for e in seen] == [REDACTED, REDACTED, "debug", None]
    assert seen[3]["valueFrom"] == env[3]["valueFrom"]
    assert env[0]["value"] == "hunter2"  # the input is not changed
    pods = {"kind": "PodList", "items": [{"spec": {"containers": [{"env": env}]}}]}
    assert redact(pods)["items"][0]["spec"]["containers"][0]["env"][0]["value"] == REDACTED


def test_config_map_keys_that_look_secret_are_redacted() -> None:
    cm = config_map("app", {"db_password": "hunter2", "mode": "fast", "done": "21"})
    cm["binaryData"] = {"tls.key": "LS0tLS1=", "logo.png": "iVBOR"}
    out = redact(cm)
    assert out["data"] == {"db_password": REDACTED, "mode": "fast", "done": "21"}
    assert out["binaryData"] == {"tls.key": REDACTED, "logo.png": "iVBOR"}
    listed = redact({"kind": "ConfigMapList", "items": [{"data": {"apiKey": "abc"}}]})
    assert listed["items"][0]["data"] == {"apiKey": REDACTED}


def test_config_map_values_are_redacted_as_text() -> None:
    cm = config_map("app", {"app.properties": "user=build\ndb.password=hunter2\nmode=fast\n"})
    out = redact(cm)["data"]["app.properties"]
    assert out == f"user=build\ndb.password={REDACTED}\nmode=fast\n"


def test_last_applied_of_a_config_map_is_redacted_like_the_object() -> None:
    applied = {"kind": "ConfigMap", "data": {"token": "t-1", "done": "3"}}
    cm = config_map("app", {"token": "t-1", "done": "3"})
    cm["metadata"]["annotations"] = {LAST_APPLIED: json.dumps(applied), "note": "password=x"}
    out = redact(cm)
    assert json.loads(out["metadata"]["annotations"][LAST_APPLIED])["data"] == {
        "token": REDACTED,
        "done": "3",
    }
    assert out["metadata"]["annotations"]["note"] == f"password={REDACTED}"
    cm["metadata"]["annotations"][LAST_APPLIED] = "{not json"
    assert redact(cm)["metadata"]["annotations"][LAST_APPLIED] == REDACTED


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("curl -H 'Authorization: Bearer abc.def' x", f"curl -H 'Authorization: {REDACTED}' x"),
        ("Authorization: Basic dXNlcjpwYXNz\nnext", f"Authorization: {REDACTED}\nnext"),
        ('{"authorization": "Bearer abc", "a": 1}', f'{{"authorization": "{REDACTED}", "a": 1}}'),
        ("sent bearer s3cr3t-tok_en== to api", f"sent bearer {REDACTED} to api"),
        (f"cookie {JWT} end", f"cookie {REDACTED} end"),
        (
            f"before\n{PEM}\nafter",
            f"before\n-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----\nafter",
        ),
        (
            "-----BEGIN PRIVATE KEY-----\nMIIE cut",
            f"-----BEGIN PRIVATE KEY----- {REDACTED} -----END PRIVATE KEY-----",
        ),
        ("export API_KEY=abc123 done", f"export API_KEY={REDACTED} done"),
        ("GET /x?token=abc&page=2", f"GET /x?token={REDACTED}&page=2"),
        ('{"password": "hunter 2", "user": "b"}', f'{{"password": "{REDACTED}", "user": "b"}}'),
        ("{'client_secret': 'xyz'}", f"{{'client_secret': '{REDACTED}'}}"),
        ("db_passwd: hunter2", f"db_passwd: {REDACTED}"),
        ("progress done=21 total=27", "progress done=21 total=27"),
        ("image: quay.io/keycloak/keycloak:24.0", "image: quay.io/keycloak/keycloak:24.0"),
        ("db at postgres://build:s3cret@db:5432/x", f"db at postgres://build:{REDACTED}@db:5432/x"),
        ("token:abc stays when unspaced", "token:abc stays when unspaced"),
    ],
)
def test_credentials_in_text_are_redacted(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected  # redacting again changes nothing


def test_text_redaction_stays_fast_on_large_unbroken_input() -> None:
    blob = ("A1b2_" * 60_000) + " token=x"
    started = time.monotonic()
    out = redact_text(blob)
    assert time.monotonic() - started < 2
    assert out.endswith(f"token={REDACTED}")


def test_scrub_replaces_known_values_in_nested_data() -> None:
    doc = {"error": "bad key sk-live-123 used", "list": ["sk-live-123"], "n": 1}
    assert scrub(doc, ["sk-live-123", ""]) == {
        "error": f"bad key {REDACTED} used",
        "list": [REDACTED],
        "n": 1,
    }


# --- every read path of the tools redacts ------------------------------------------------


def test_every_read_path_redacts(tmp_path: Path) -> None:
    leak = f"Authorization: Bearer {JWT}\npassword=hunter2\n{PEM}\n"
    kube = FakeKube(
        [
            deployment(),
            config_map("progress", {"note": leak, "api_token": "cm-tok-9q"}),
        ]
    )
    web = kube.objects[("Deployment", "shop", "web")]
    web["spec"]["template"]["spec"] = {
        "containers": [{"name": "web", "env": [{"name": "DB_PASSWORD", "value": "hunter2"}]}]
    }
    kube.logs_text[("shop", "web-1")] = leak
    kube.events_items.append({"involvedObject": {"name": "web"}, "message": leak, "reason": "X"})
    (tmp_path / "log.txt").write_text(leak)
    tools = StepTools(
        kube,
        ToolConfig(
            fence_id="1234123412341234",
            namespace="shop",
            file_roots=(str(tmp_path),),
            allow_commands=True,
            mutation_set=("command:cat",),
        ),
        runner=lambda argv, timeout: (0, leak),
    )
    outputs = {
        "get": tools.k8s_get("Deployment", "web"),
        "configmap": tools.k8s_get("ConfigMap", "progress"),
        "list": tools.k8s_list("ConfigMap"),
        "logs": tools.pod_logs("web-1"),
        "events": tools.k8s_events("web"),
        "file": tools.read_file(str(tmp_path / "log.txt")),
        "command": tools.run_command(["cat", "log.txt"]),
    }
    for name, out in outputs.items():
        for secret in ("hunter2", JWT, "MIIEowIBAAKCAQEAx1", "cm-tok-9q"):
            assert secret not in out, (name, secret, out)
    assert REDACTED in outputs["logs"] and REDACTED in outputs["get"]
