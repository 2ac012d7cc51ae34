"""Step settings from the environment: specific errors, never a traceback."""

from __future__ import annotations

from decimal import Decimal

import pytest

from goalkeeper.step.settings import SettingsError, load_identity, load_settings

BASE = {
    "GOALKEEPER_MODEL": "openai:qwen3",
    "GOALKEEPER_MODEL_BASE_URL": "http://127.0.0.1:8000/v1",
}


def problems(env: dict[str, str], **kw: bool) -> list[str]:
    with pytest.raises(SettingsError) as info:
        load_settings(env, **kw)
    return info.value.problems


def test_missing_model_names_the_variable_and_the_form() -> None:
    [line] = problems({"GOALKEEPER_MODEL_BASE_URL": "http://127.0.0.1:1/v1"})
    assert line.startswith("GOALKEEPER_MODEL is not set")
    assert "'openai:NAME'" in line and "'anthropic:NAME'" in line


def test_malformed_model_is_quoted_back() -> None:
    [line] = problems({**BASE, "GOALKEEPER_MODEL": "foo:bar"})
    assert "GOALKEEPER_MODEL" in line
    assert "'foo:bar'" in line
    assert "'openai:NAME'" in line


@pytest.mark.parametrize("value", ["gpt-4o", "openai:", ":x", "bedrock:claude"])
def test_other_malformed_models(value: str) -> None:
    [line] = problems({**BASE, "GOALKEEPER_MODEL": value})
    assert line.startswith("GOALKEEPER_MODEL is invalid")


def test_openai_needs_a_base_url() -> None:
    [line] = problems({"GOALKEEPER_MODEL": "openai:gpt-4o"})
    assert line.startswith("GOALKEEPER_MODEL_BASE_URL is not set")
    assert "openai:" in line


def test_anthropic_needs_a_key_but_no_base_url() -> None:
    [line] = problems({"GOALKEEPER_MODEL": "anthropic:claude-sonnet-4-5"})
    assert line.startswith("GOALKEEPER_MODEL_API_KEY is not set")
    s = load_settings(
        {"GOALKEEPER_MODEL": "anthropic:claude-sonnet-4-5", "GOALKEEPER_MODEL_API_KEY": "k"}
    )
    assert s.model is not None and s.model.provider == "anthropic"
    assert s.base_url is None


def test_malformed_numbers_and_booleans_are_each_reported() -> None:
    lines = problems(
        {
            **BASE,
            "GOALKEEPER_REQUEST_LIMIT": "lots",
            "GOALKEEPER_ALLOW_COMMANDS": "maybe",
            "GOALKEEPER_MODEL_BASE_URL": "127.0.0.1:8000",
        }
    )
    text = "\n".join(lines)
    assert "GOALKEEPER_REQUEST_LIMIT is invalid" in text and "'lots'" in text
    assert "GOALKEEPER_ALLOW_COMMANDS is invalid" in text and "true or false" in text
    assert "GOALKEEPER_MODEL_BASE_URL is invalid" in text
    assert len(lines) == 3


def test_prices_come_in_pairs() -> None:
    [line] = problems({**BASE, "GOALKEEPER_PRICE_INPUT_PER_MTOK": "1.5"})
    assert "GOALKEEPER_PRICE_OUTPUT_PER_MTOK" in line and "together" in line


def test_defaults_and_parsing() -> None:
    s = load_settings(
        {
            **BASE,
            "GOALKEEPER_PRICE_INPUT_PER_MTOK": "0.5",
            "GOALKEEPER_PRICE_OUTPUT_PER_MTOK": "2",
            "GOALKEEPER_ALLOW_COMMANDS": "true",
            "GOALKEEPER_REPAIR_COMMAND": "repair-flow --repo 'my repo'",
            "GOALKEEPER_FILE_ROOTS": "/data:/mnt/out/",
            "GOALKEEPER_COST_LIMIT_USD": "",  # empty counts as unset
            "UNRELATED": "x",
        }
    )
    assert str(s.model) == "openai:qwen3"
    assert s.request_limit == 30 and s.provider_retries == 3
    assert s.configured_prices == (Decimal("0.5"), Decimal("2"))
    assert s.allow_commands is True
    assert s.repair_argv == ["repair-flow", "--repo", "my repo"]
    assert s.file_roots == ("/data", "/mnt/out")
    assert s.cost_limit_usd is None


def test_api_key_stays_out_of_repr() -> None:
    s = load_settings({**BASE, "GOALKEEPER_MODEL_API_KEY": "sk-very-secret"})
    assert s.api_key == "sk-very-secret"
    assert "sk-very-secret" not in repr(s)


def test_commands_are_off_by_default() -> None:
    assert load_settings(BASE).allow_commands is False


def test_repair_step_does_not_need_a_model() -> None:
    s = load_settings({"GOALKEEPER_REPAIR_COMMAND": "true"}, require_model=False)
    assert s.model is None
    assert s.repair_argv == ["true"]


def test_unsplittable_repair_command() -> None:
    [line] = problems({**BASE, "GOALKEEPER_REPAIR_COMMAND": "repair 'unterminated"})
    assert line.startswith("GOALKEEPER_REPAIR_COMMAND is invalid")


def test_identity_is_required() -> None:
    with pytest.raises(SettingsError) as info:
        load_identity({"GOALKEEPER_STEP_NAME": "s1"})
    assert info.value.problems == [
        "GOALKEEPER_STEP_NAMESPACE is not set; expected the namespace of the MonitorStep "
        "this step runs"
    ]
    ident = load_identity({"GOALKEEPER_STEP_NAME": "s1", "GOALKEEPER_STEP_NAMESPACE": "ns"})
    assert (ident.name, ident.namespace) == ("s1", "ns")


def test_http_allowed_hosts_default_to_none_and_parse() -> None:
    assert load_settings(BASE).http_allowed_hosts == ()
    hosts = load_settings({**BASE, "GOALKEEPER_HTTP_ALLOWED_HOSTS": "a.svc:8080, [fd00::1] ,b"})
    assert hosts.http_allowed_hosts == ("a.svc:8080", "[fd00::1]", "b")
    [line] = problems({**BASE, "GOALKEEPER_HTTP_ALLOWED_HOSTS": "http://a.svc"})
    assert line.startswith("GOALKEEPER_HTTP_ALLOWED_HOSTS is invalid")
    assert "'http://a.svc'" in line


def test_pod_identity_is_optional() -> None:
    step = {"GOALKEEPER_STEP_NAME": "m-1", "GOALKEEPER_STEP_NAMESPACE": "shop"}
    bare = load_identity(step)
    assert (bare.pod_name, bare.pod_uid) == (None, None)
    named = load_identity({**step, "GOALKEEPER_POD_NAME": "m-1-x", "GOALKEEPER_POD_UID": "u-1"})
    assert (named.pod_name, named.pod_uid) == ("m-1-x", "u-1")
