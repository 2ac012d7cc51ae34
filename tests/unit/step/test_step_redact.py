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
        "DB_PASS",
        "PASSPHRASE",
        "Pwd",
        "dbPassword",
        "example.com/api-token",
        "x-api-key",
        "tls.key",
        "accessToken",
        "--password",
    ],
)
def test_secret_looking_names(name: str) -> None:
    assert looks_secret(name)


@pytest.mark.parametrize(
    "name",
    [
        "LOG_LEVEL",
        "replicas",
        "done",
        "total",
        "url",
        "keycloak",
        "tokens_processed",
        "max_tokens",
        "passwordless",
        "PASSWORD_FILE",
        "secretName",
        "secretKeyRef",
        "token_count",
        "public_key",
        "key",
        "--password-stdin",
    ],
)
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


# --- redaction by value shape, through the real tools ------------------------------------

# Each text, and the parts of it that must never reach the model.
SHAPES = [
    ("example.com/api-token: annoTOKEN1", ["annoTOKEN1"]),
    ("--password hunter2pw --user bob", ["hunter2pw"]),
    ("DB_PASS=hunter2pw", ["hunter2pw"]),
    ("PASSPHRASE=correct-horse-staple", ["correct-horse-staple"]),
    ("Server=db;User Id=sa;Pwd=hunter2pw;", ["hunter2pw"]),
    ("mysql -uroot -phunter2pw shop", ["hunter2pw"]),
    ("sh -c 'mysqldump -u root -phunter2pw db > out.sql'", ["hunter2pw"]),
    ("sshpass -p hunter2pw ssh build@host", ["hunter2pw"]),
    ("curl -u bob:hunter2pw https://api.example.com", ["hunter2pw"]),
    ("db at postgres://build:hunter2pw@db:5432/shop", ["hunter2pw"]),
    ("cache at redis://:hunter2pw@cache:6379/0", ["hunter2pw"]),
    ("dsn root:hunter2pw@tcp(db:3306)/shop", ["hunter2pw"]),
    ("notify https://hooks.slack.com/services/T0001/B0001/hookSECRET1", ["hookSECRET1"]),
    ("notify https://discord.com/api/webhooks/123/hookSECRET2", ["hookSECRET2"]),
    ("blob https://a.blob.core.windows.net/c/f?sv=2022&sig=sigSECRET3&se=1", ["sigSECRET3"]),
    ("callback https://api.example.com/v1/cb?token=tokSECRET4&page=2", ["tokSECRET4"]),
    ("maps https://maps.example.com/api?key=keySECRET5&q=x", ["keySECRET5"]),
    (
        "auth:\n  password: |\n    blockSECRET6\n    blockSECRET7\n  user: bob",
        ["blockSECRET6", "blockSECRET7"],
    ),
    ("<settings><password>xmlSECRET8</password></settings>", ["xmlSECRET8"]),
    ("using sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv0123", ["AbCdEfGhIjKlMnOpQrStUv0123"]),
    (
        "clone with ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        ["abcdefghijklmnopqrstuvwxyz0123456789"],
    ),
    ("Cookie: session=cookieSECRET9", ["cookieSECRET9"]),
]
# Text that holds no credential and must reach the model unchanged.
PLAIN_TEXTS = [
    "image: quay.io/keycloak/keycloak:24.0",
    "tokens_processed: 12",
    "passwordless: true",
    "max_tokens=512",
    "docs at https://example.com/docs/page?section=2#top",
    "--password-file /run/secrets/db-password",
    "secretName: tls-cert",
    "docker run -p 8080:80 nginx",
    "git@github.com:org/repo.git",
    "image nginx:1.25@sha256:0123456789abcdef",
]


def shape_tools(text: str, tmp_path: Path) -> tuple[StepTools, dict[str, str]]:
    kube = FakeKube([deployment(), config_map("notes", {"notes": text})])
    kube.logs_text[("shop", "web-1")] = text
    (tmp_path / "notes.txt").write_text(text)
    tools = StepTools(
        kube,
        ToolConfig(
            fence_id="1234123412341234",
            namespace="shop",
            file_roots=(str(tmp_path),),
            allow_commands=True,
            mutation_set=("command:cat",),
        ),
        runner=lambda argv, timeout: (0, text),
    )
    outputs = {
        "configmap": tools.k8s_get("ConfigMap", "notes"),
        "logs": tools.pod_logs("web-1"),
        "file": tools.read_file(str(tmp_path / "notes.txt")),
        "command": tools.run_command(["cat", "notes.txt"]),
    }
    return tools, outputs


@pytest.mark.parametrize(("text", "secrets"), SHAPES)
def test_credentials_are_redacted_by_their_shape_on_every_read_path(
    text: str, secrets: list[str], tmp_path: Path
) -> None:
    assert all(secret not in redact_text(text) for secret in secrets)
    assert redact_text(redact_text(text)) == redact_text(text)
    _, outputs = shape_tools(text, tmp_path)
    for path, out in outputs.items():
        for secret in secrets:
            assert secret not in out, (path, out)
        assert REDACTED in out, (path, out)


@pytest.mark.parametrize("text", PLAIN_TEXTS)
def test_text_without_credentials_is_left_as_it_is(text: str, tmp_path: Path) -> None:
    assert redact_text(text) == text
    _, outputs = shape_tools(text, tmp_path)
    for path in ("logs", "file", "command"):
        assert text in outputs[path], (path, outputs[path])
        assert REDACTED not in outputs[path]


def test_objects_of_any_kind_lose_secret_fields_args_and_annotations() -> None:
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {
            "name": "w",
            "namespace": "shop",
            "annotations": {"example.com/api-token": "annoTOKEN1", "note": "plain"},
        },
        "spec": {
            "auth": {"password": "crPASSWORD1", "passwordless": True, "pin": 1234},
            "dbPassword": 123456,
            "maxTokens": 512,
            "tokensProcessed": 12,
            "image": "quay.io/keycloak/keycloak:24.0",
            "params": [{"name": "db-password", "value": "paramPW1"}, {"name": "m", "value": "x"}],
            "containers": [
                {
                    "name": "c",
                    "args": ["--password", "argPW1", "--db-pass=argPW2", "--verbose"],
                    "command": ["mysql", "-uroot", "-pcmdPW1"],
                    "env": [{"name": "DB_PASS", "value": "envPW1"}],
                }
            ],
            "dsn": "postgres://u:dsnPW1@db/x",
            "secretKeyRef": {"name": "db", "key": "password"},
        },
    }
    out = StepTools(
        FakeKube([widget]), ToolConfig(fence_id="1234123412341234", namespace="shop")
    ).k8s_get("Widget", "w", api_version="example.com/v1")
    for secret in ("annoTOKEN1", "crPASSWORD1", "123456", "paramPW1", "argPW1", "argPW2"):
        assert secret not in out, secret
    for secret in ("cmdPW1", "envPW1", "dsnPW1"):
        assert secret not in out, secret
    for kept in ("passwordless: true", "maxTokens: 512", "tokensProcessed: 12", "keycloak:24.0"):
        assert kept in out, kept
    assert "- --verbose" in out and "note: plain" in out and "key: password" in out
    assert "pin: 1234" in out  # a name that says nothing secret keeps its value
