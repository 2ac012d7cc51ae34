"""Run errors in plain words, naming the GOALKEEPER_... setting to change."""

from __future__ import annotations

from decimal import Decimal

import pytest
from pydantic_ai.exceptions import (
    ContentFilterError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRequestTimeout,
    ModelTimeoutError,
    OutputTokenLimitExceeded,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.settings import ModelSettings
from tests.support.step_fakes import FakeKube, deployment, step_input

from goalkeeper.core.models import StepErrorKind
from goalkeeper.step.agent import RunLimits, run_observe
from goalkeeper.step.errors import ERROR_MAX, RunFacts, explain, limit_hit
from goalkeeper.step.tools import StepTools, ToolConfig

URL = "http://127.0.0.1:8000/v1"
FACTS = RunFacts(
    request_limit=30,
    tool_calls_limit=60,
    total_tokens_limit=500_000,
    cost_limit_usd=Decimal("0.50"),
    output_retries=3,
    max_output_tokens=4096,
    http_timeout_seconds=120.0,
    provider_retries=3,
    attempts=4,
    model="openai:qwen3",
    base_url=URL,
    total_tokens=512_345,
)
ONE_TRY = RunFacts(**{**FACTS.__dict__, "attempts": 1})


@pytest.mark.parametrize(
    ("exc", "kind", "expected"),
    [
        (
            UsageLimitExceeded("The next request would exceed the request_limit of 30"),
            StepErrorKind.limits,
            "The step made the 30 model requests it may make (GOALKEEPER_REQUEST_LIMIT=30) "
            "without a final answer. Raise GOALKEEPER_REQUEST_LIMIT, or make the task quicker "
            "to check.",
        ),
        (
            UsageLimitExceeded(
                "The next tool call(s) would exceed the tool_calls_limit of 60 (tool_calls=61)."
            ),
            StepErrorKind.limits,
            "The model asked for more tool calls than the 60 a step may make "
            "(GOALKEEPER_TOOL_CALLS_LIMIT=60). Raise GOALKEEPER_TOOL_CALLS_LIMIT, or make the "
            "task quicker to check.",
        ),
        (
            UsageLimitExceeded("Exceeded the total_tokens_limit of 500000 (total_tokens=512345)"),
            StepErrorKind.limits,
            "The step used 512345 tokens, past its limit of 500000 "
            "(GOALKEEPER_TOTAL_TOKENS_LIMIT=500000). Raise GOALKEEPER_TOTAL_TOKENS_LIMIT, or "
            "make the task quicker to check.",
        ),
        (
            UsageLimitExceeded("The next request would exceed the `cost_limit` of 0.50"),
            StepErrorKind.limits,
            "The step's model cost reached its ceiling of 0.50 US dollars "
            "(GOALKEEPER_COST_LIMIT_USD=0.50). Raise GOALKEEPER_COST_LIMIT_USD.",
        ),
        (
            OutputTokenLimitExceeded(
                "Model token limit (4096) exceeded before any response was generated. Increase "
                "the `max_tokens` model setting"
            ),
            StepErrorKind.limits,
            "The model's answer was cut off at the output token limit "
            "(GOALKEEPER_MAX_OUTPUT_TOKENS=4096) before it was complete. Raise "
            "GOALKEEPER_MAX_OUTPUT_TOKENS.",
        ),
        (
            ModelHTTPError(500, "qwen3", {"message": "boom"}),
            StepErrorKind.provider,
            f"The model server at GOALKEEPER_MODEL_BASE_URL={URL} failed with HTTP 500 on all "
            "4 attempts: boom. Raise GOALKEEPER_PROVIDER_RETRIES (now 3) to try longer.",
        ),
        (
            ModelHTTPError(429, "qwen3", {"message": "slow down"}),
            StepErrorKind.provider,
            "The model provider kept limiting the request rate (HTTP 429) on all 4 attempts: "
            "slow down. Raise GOALKEEPER_PROVIDER_RETRIES (now 3) to try longer.",
        ),
        (
            ModelHTTPError(401, "qwen3", {"message": "bad key"}),
            StepErrorKind.configuration,
            f"The model provider at GOALKEEPER_MODEL_BASE_URL={URL} refused the API key "
            "(HTTP 401: bad key). Check the key in the Secret named by "
            "GOALKEEPER_MODEL_API_KEY_SECRET (the step reads it from the file "
            "GOALKEEPER_MODEL_API_KEY_FILE), and that it may use GOALKEEPER_MODEL=openai:qwen3.",
        ),
        (
            ModelHTTPError(404, "qwen3", {"message": "no such model"}),
            StepErrorKind.configuration,
            f"The model server at GOALKEEPER_MODEL_BASE_URL={URL} does not know the model "
            "GOALKEEPER_MODEL=openai:qwen3 (HTTP 404: no such model). Check GOALKEEPER_MODEL "
            "and GOALKEEPER_MODEL_BASE_URL.",
        ),
        (
            ModelHTTPError(400, "qwen3", {"message": "tools are not supported"}),
            StepErrorKind.provider,
            f"The model server at GOALKEEPER_MODEL_BASE_URL={URL} rejected the request "
            "(HTTP 400: tools are not supported). Check that GOALKEEPER_MODEL=openai:qwen3 "
            "names a model that supports tool calls.",
        ),
        (
            ModelContextWindowExceededError("qwen3", "prompt too long"),
            StepErrorKind.provider,
            "The conversation grew past the context window of openai:qwen3 "
            "(ModelContextWindowExceededError: prompt too long). Use a model with a larger "
            "window (GOALKEEPER_MODEL), or lower GOALKEEPER_MAX_OUTPUT_TOKENS.",
        ),
        (
            ModelTimeoutError("qwen3", "Request timed out."),
            StepErrorKind.provider,
            f"The model at GOALKEEPER_MODEL_BASE_URL={URL} did not answer within "
            "GOALKEEPER_HTTP_TIMEOUT_SECONDS=120.0 seconds on all 4 attempts. Raise "
            "GOALKEEPER_HTTP_TIMEOUT_SECONDS, or lower GOALKEEPER_MAX_OUTPUT_TOKENS. Raise "
            "GOALKEEPER_PROVIDER_RETRIES (now 3) to try longer.",
        ),
        (
            ModelRequestTimeout("qwen3", 120.0),
            StepErrorKind.provider,
            f"The model at GOALKEEPER_MODEL_BASE_URL={URL} did not answer within "
            "GOALKEEPER_HTTP_TIMEOUT_SECONDS=120.0 seconds on all 4 attempts.",
        ),
        (
            ModelConnectionError("qwen3", "Connection error."),
            StepErrorKind.provider,
            f"Could not reach the model server at GOALKEEPER_MODEL_BASE_URL={URL} on all 4 "
            "attempts: Connection error. Check GOALKEEPER_MODEL_BASE_URL and that the server "
            "is up. Raise GOALKEEPER_PROVIDER_RETRIES (now 3) to try longer.",
        ),
        (
            UnexpectedModelBehavior("Exceeded maximum output retries (3)"),
            StepErrorKind.invalidOutput,
            "The model did not give a valid answer in 4 tries (GOALKEEPER_OUTPUT_RETRIES=3). "
            "Raise GOALKEEPER_OUTPUT_RETRIES, or use a model that is better at structured "
            "answers (GOALKEEPER_MODEL, now openai:qwen3).",
        ),
        (
            UnexpectedModelBehavior(
                "Tool 'k8s_get' exceeded max retries count of 2. Consider raising the retry limit"
            ),
            StepErrorKind.invalidOutput,
            "The model called the tool k8s_get with invalid arguments 3 times in a row. A "
            "model that is better at tool calls (GOALKEEPER_MODEL, now openai:qwen3) may help.",
        ),
        (
            ContentFilterError("blocked"),
            StepErrorKind.provider,
            "The model provider's content filter blocked the answer of openai:qwen3. Try "
            "another model (GOALKEEPER_MODEL).",
        ),
    ],
)
def test_each_error_says_what_happened_and_names_the_setting(
    exc: BaseException, kind: StepErrorKind, expected: str
) -> None:
    got_kind, message = explain(exc, FACTS)
    assert got_kind is kind
    assert message.startswith(expected)
    assert "max_tokens" not in message and "retry budget" not in message


def test_attempts_are_counted_only_when_there_were_several() -> None:
    _, once = explain(ModelHTTPError(503, "qwen3", {"message": "down"}), ONE_TRY)
    assert "attempts" not in once
    assert (
        once == f"The model server at GOALKEEPER_MODEL_BASE_URL={URL} failed with HTTP 503: down."
    )
    _, none = explain(
        ModelHTTPError(503, "qwen3", {"message": "down"}),
        RunFacts(**{**ONE_TRY.__dict__, "provider_retries": 0}),
    )
    assert none.endswith("Raise GOALKEEPER_PROVIDER_RETRIES (now 0) to try longer.")
    _, single = explain(
        UnexpectedModelBehavior("Exceeded maximum output retries (0)"),
        RunFacts(output_retries=0, model="openai:qwen3"),
    )
    assert single.startswith("The model did not give a valid answer in its only try")


def test_messages_are_bounded_and_limits_name_their_setting() -> None:
    _, long = explain(ModelHTTPError(400, "qwen3", {"message": "x" * 10_000}), FACTS)
    assert len(long) <= ERROR_MAX
    assert limit_hit(UsageLimitExceeded("the request_limit of 30"), FACTS) == (
        "GOALKEEPER_REQUEST_LIMIT",
        30,
    )
    assert limit_hit(OutputTokenLimitExceeded("cut"), FACTS) == (
        "GOALKEEPER_MAX_OUTPUT_TOKENS",
        4096,
    )
    assert limit_hit(ModelHTTPError(500, "qwen3"), FACTS) is None


async def test_a_cut_off_answer_names_goalkeeper_max_output_tokens() -> None:
    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("")], finish_reason="length")

    outcome = await run_observe(
        step_input(),
        FunctionModel(fn),
        StepTools(FakeKube([deployment()]), ToolConfig(fence_id="f" * 16, namespace="shop")),
        limits=RunLimits(),
        model_settings=ModelSettings(max_tokens=64),
    )
    assert outcome.error_kind is StepErrorKind.limits
    assert outcome.error == (
        "The model's answer was cut off at the output token limit "
        "(GOALKEEPER_MAX_OUTPUT_TOKENS=64) before it was complete. Raise "
        "GOALKEEPER_MAX_OUTPUT_TOKENS."
    )


async def test_answers_that_stay_invalid_count_the_tries() -> None:
    from pydantic_ai.messages import ToolCallPart

    def fn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("final_result", {"route": "sideways"})])

    outcome = await run_observe(
        step_input(),
        FunctionModel(fn),
        StepTools(FakeKube(), ToolConfig(fence_id="f" * 16, namespace="shop")),
        limits=RunLimits(output_retries=2),
    )
    assert outcome.error_kind is StepErrorKind.invalidOutput
    assert (outcome.error or "").startswith(
        "The model did not give a valid answer in 3 tries (GOALKEEPER_OUTPUT_RETRIES=2)."
    )


def test_a_refused_key_from_a_model_config_names_its_secret_and_config() -> None:
    source = "key api-key of Secret team-key, named by ModelConfig default"
    facts = RunFacts(**{**ONE_TRY.__dict__, "key_source": source})
    kind, message = explain(ModelHTTPError(401, "qwen3", {"message": "bad key"}), facts)
    assert kind is StepErrorKind.configuration
    assert message.endswith(f"Check the key, {source}, and that it may use model openai:qwen3.")
    assert "GOALKEEPER_MODEL_API_KEY_SECRET" not in message
