"""Building the model from settings, and the wrapper that retries and prices each request.

`StepModel` wraps any pydantic-ai model:
- it retries provider failures that may pass (5xx, overload, rate limits, connection
  problems, timeouts) a bounded number of times with exponential backoff; the SDK's own
  retries are turned off so attempts are counted in one place;
- it prices every response on its own: genai-prices first, then the configured
  per-million-token prices, else unknown. A response's cost is set before pydantic-ai's
  usage limits see it, so a `cost_limit` also holds for configured prices.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import httpx2
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestTimeout,
    ModelServerError,
    ModelUnavailableError,
)
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from goalkeeper.core.models import CostSource
from goalkeeper.step.settings import StepSettings

RETRYABLE: tuple[type[Exception], ...] = (
    ModelServerError,
    ModelUnavailableError,
    ModelRateLimitError,
    ModelConnectionError,
    ModelRequestTimeout,
)

MILLION = Decimal(1_000_000)


def retryable(exc: BaseException) -> bool:
    """A provider failure that may pass: 5xx, 408, 429, overload, connection or timeout."""
    if isinstance(exc, RETRYABLE):
        return True
    return isinstance(exc, ModelHTTPError) and (
        exc.status_code >= 500 or exc.status_code in (408, 429)
    )


@dataclass
class PricedRequest:
    source: CostSource
    cost: Decimal | None


@dataclass
class RequestLedger:
    """What each answered request cost, and the provider errors that were retried."""

    priced: list[PricedRequest] = field(default_factory=list)
    retried_errors: list[str] = field(default_factory=list)

    def total(self) -> tuple[Decimal | None, CostSource]:
        if not self.priced:
            return Decimal(0), CostSource.genaiPrices
        if any(p.cost is None for p in self.priced):
            return None, CostSource.unknown
        total = sum((p.cost for p in self.priced if p.cost is not None), Decimal(0))
        if any(p.source is CostSource.configured for p in self.priced):
            return total, CostSource.configured
        return total, CostSource.genaiPrices


def genai_price(response: ModelResponse) -> Decimal | None:
    """The genai-prices price of one response, or None when the model is not priced."""
    from genai_prices import calc_price

    if not response.model_name:
        return None
    refs: list[dict[str, Any]] = []
    if response.provider_url:
        refs.append({"provider_api_url": response.provider_url})
    if response.provider_name:
        refs.append({"provider_id": response.provider_name})
    for ref in refs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                price = calc_price(
                    response.usage,
                    response.model_name,
                    genai_request_timestamp=response.timestamp,
                    **ref,
                )
        except (LookupError, ValueError):
            continue
        return Decimal(str(price.total_price))
    return None


def configured_price(response: ModelResponse, prices: tuple[Decimal, Decimal]) -> Decimal:
    per_in, per_out = prices
    usage = response.usage
    return (Decimal(usage.input_tokens) * per_in + Decimal(usage.output_tokens) * per_out) / MILLION


class StepModel(WrapperModel):
    """See the module docstring."""

    def __init__(
        self,
        wrapped: Model,
        *,
        retries: int = 3,
        backoff_seconds: float = 1.0,
        prices: tuple[Decimal, Decimal] | None = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        super().__init__(wrapped)
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.prices = prices
        self.sleep = sleep
        self.ledger = RequestLedger()
        self.last_attempts = 0  # attempts of the latest request, retries included
        # Told of each retry (attempt number, error, delay) as it happens, e.g. to log it.
        self.on_retry: Callable[[int, ModelAPIError, float], None] | None = None

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        attempt = 0
        while True:
            self.last_attempts = attempt + 1
            try:
                response = await self.wrapped.request(
                    messages, model_settings, model_request_parameters
                )
                break
            except ModelAPIError as exc:
                if attempt >= self.retries or not retryable(exc):
                    raise
                self.ledger.retried_errors.append(f"{type(exc).__name__}: {exc}"[:500])
                delay = self.backoff_seconds * (2**attempt)
                if self.on_retry is not None:
                    self.on_retry(attempt + 1, exc, delay)
                await self.sleep(delay)
                attempt += 1
        self._price(response)
        return response

    def _price(self, response: ModelResponse) -> None:
        cost = response.usage.cost
        if cost is not None:  # e.g. a gateway-reported cost
            self.ledger.priced.append(PricedRequest(CostSource.genaiPrices, Decimal(str(cost))))
            return
        price = genai_price(response)
        if price is not None:
            response.usage.cost = price
            self.ledger.priced.append(PricedRequest(CostSource.genaiPrices, price))
        elif self.prices is not None:
            price = configured_price(response, self.prices)
            response.usage.cost = price
            self.ledger.priced.append(PricedRequest(CostSource.configured, price))
        else:
            self.ledger.priced.append(PricedRequest(CostSource.unknown, None))


def model_settings(settings: StepSettings) -> ModelSettings:
    return ModelSettings(
        max_tokens=settings.max_output_tokens,
        timeout=settings.http_timeout_seconds,
        max_retries=0,  # StepModel owns retrying
        framing_announcement="never",  # the system prompt must not change within a monitor
    )


def http_client(settings: StepSettings) -> httpx2.AsyncClient:
    timeout = settings.http_timeout_seconds
    return httpx2.AsyncClient(timeout=httpx2.Timeout(timeout, connect=min(timeout, 15.0)))


def build_model(settings: StepSettings, *, client: httpx2.AsyncClient | None = None) -> StepModel:
    """The model the settings name, built explicitly (never from a bare string)."""
    ref = settings.model
    if ref is None:
        raise ValueError("GOALKEEPER_MODEL is not set")
    client = client or http_client(settings)
    inner: Model
    if ref.provider == "openai":
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        inner = OpenAIChatModel(
            ref.name,
            provider=OpenAIProvider(
                base_url=settings.base_url,
                # A self-hosted server may need no key; the SDK insists on one.
                api_key=settings.api_key or "not-set",
                http_client=client,
            ),
        )
    else:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        inner = AnthropicModel(
            ref.name,
            provider=AnthropicProvider(
                api_key=settings.api_key, base_url=settings.base_url, http_client=client
            ),
        )
    return StepModel(
        inner,
        retries=settings.provider_retries,
        backoff_seconds=settings.retry_backoff_seconds,
        prices=settings.configured_prices,
    )
