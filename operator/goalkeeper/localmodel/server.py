"""The local model's OpenAI-compatible server: llama.cpp's own C++ HTTP server through
xllamacpp, on 127.0.0.1 only, with the settings under which a small model answers
goalkeeper's steps (see docs/local-model.md).

One slot per step kind (the proxy sends each request to its kind's slot) keeps each kind's
prompt prefix cached: the next step of a kind does not read its identical system prompt and
tools again, even after a step of another kind ran in between. The steps reach it through
the tool-call proxy (toolcalls.py), under which every tool call the model makes parses.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from goalkeeper.localmodel.toolcalls import SLOTS, ToolCallProxy
from goalkeeper.localmodel.weights import DEFAULT, Weights, cached, fetch, models_dir

HOST = "127.0.0.1"
ALIAS = "local"
READY_TIMEOUT_SECONDS = 300
# Qwen2.5's own template with its tool-call instruction fixed: the original shows the call
# inside doubled braces (a Jinja escape printed as it stands), which the coder model copies
# before writing newlines until its token limit (docs/local-model.md).
CHAT_TEMPLATE = resources.files(__package__).joinpath("chat_template.jinja").read_text()


# What the steps need to answer well on this model: its grammar holds the observation to
# the route's rules (step/routed.py), and a worked example shows a sound answer.
STEP_SETTINGS = {"GOALKEEPER_ROUTED_OUTPUT": "true", "GOALKEEPER_WORKED_EXAMPLES": "true"}


class ServeError(Exception):
    """The local model could not be served; the message says what to do."""


@dataclass(frozen=True)
class ServeOptions:
    context: int = 8192  # tokens: one observe step's prompt, tools and answers
    threads: int = 0  # 0: every CPU this process may use
    # Low: the grammar keeps every answer well-formed; a little randomness still lets a
    # retry differ from the answer it retries.
    temperature: float = 0.2
    port: int = 0  # 0: a free port
    # Where each slot's prompt cache is kept between runs; None: not kept.
    slot_cache: Path | None = None

    def __post_init__(self) -> None:
        if not 2048 <= self.context <= 32768:
            raise ServeError(f"context must be 2048 to 32768 tokens, not {self.context}")
        if not 0 <= self.threads <= 256:
            raise ServeError(f"threads must be 0 (all CPUs) to 256, not {self.threads}")
        if not 0.0 <= self.temperature <= 2.0:
            raise ServeError(f"temperature must be 0 to 2, not {self.temperature}")
        if not 0 <= self.port <= 65535:
            raise ServeError(f"port must be 0 (a free one) to 65535, not {self.port}")


def model_file(weights: Weights = DEFAULT, *, download: bool = True) -> Path:
    """GOALKEEPER_LOCAL_MODEL when set (any GGUF file), else the default weights, fetched
    when `download` and not cached yet."""
    configured = os.environ.get("GOALKEEPER_LOCAL_MODEL")
    if configured:
        path = Path(configured).expanduser()
        if not path.is_file():
            raise ServeError(f"GOALKEEPER_LOCAL_MODEL={configured} is not a file.")
        return path
    found = cached(weights)
    if found is not None:
        return found
    if not download:
        raise ServeError(
            f"{weights.name} is not downloaded yet: run `goalkeeper model fetch` "
            "(about 1.1 GB), or set GOALKEEPER_LOCAL_MODEL to a GGUF file."
        )
    return fetch(weights)


def slot_cache_dir(path: Path, context: int) -> Path:
    """Where the slots' prompt caches of this weights file and context size are kept: a
    cache is only ever restored into the model and cache size it was saved from."""
    size = path.stat().st_size
    return models_dir() / "slots" / f"{path.name}-{size}-ctx{context}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LocalServer:
    """The server, in this process, behind its tool-call proxy; `base_url` (the proxy's,
    on `options.port`) is what steps use as GOALKEEPER_MODEL_BASE_URL, with
    GOALKEEPER_MODEL=openai:local."""

    def __init__(self, path: Path, options: ServeOptions) -> None:
        try:
            import xllamacpp
        except ImportError:
            raise ServeError(
                "The local model runtime is not installed: pip install 'goalkeeper[local]'."
            ) from None
        upstream = free_port()
        threads = options.threads or _cpus()
        params: Any = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.model_alias = ALIAS
        params.hostnames = [HOST]
        params.port = upstream
        # One slot per step kind, each with a cache of its own of `context` tokens: steps of
        # different monitors run side by side, and no step may attend to another's tokens
        # (with one shared cache, a step once wrote another monitor's answer into its own).
        params.n_ctx = options.context * SLOTS
        params.n_parallel = SLOTS
        params.kv_unified = False
        # Kept in place: moved out to the RAM cache, an idle slot's prefix was read again.
        params.cache_idle_slots = False
        # No prompt states swapped in and out of a shared host-memory pool either: a slot
        # holds its own step kind's last prompt and nothing else.
        params.cache_ram_mib = 0
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.sampling.temp = options.temperature
        params.use_jinja = True
        params.chat_template = CHAT_TEMPLATE
        params.ui = False
        params.offline = True
        params.warmup = False
        self.slot_cache = options.slot_cache
        if self.slot_cache is not None:
            # The caches hold the steps' prompts (target data) as tokens: this user's only.
            self.slot_cache.mkdir(parents=True, exist_ok=True)
            self.slot_cache.chmod(0o700)
            # llama.cpp joins it to a file name as it stands: it must end with a separator.
            params.slot_save_path = f"{self.slot_cache}{os.sep}"
        self._server = xllamacpp.Server(params)  # loads the weights, then listens
        self._upstream = f"http://{HOST}:{upstream}"
        self.proxy = ToolCallProxy(f"{self._upstream}/v1", options.port).start()
        self.port = self.proxy.port
        self.base_url = self.proxy.base_url

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        wait_ready(self.base_url, timeout)

    def restore_slots(self) -> list[str]:
        """Each slot's prompt cache as an earlier run left it: the first step of each kind
        then finds its system prompt and tools already read. One line per slot restored."""
        if self.slot_cache is None:
            return []
        lines = []
        for slot in range(SLOTS):
            name = f"slot-{slot}.bin"
            if not (self.slot_cache / name).is_file():
                continue
            try:
                tokens = self._slot_action(slot, "restore", name).get("n_restored", "?")
                lines.append(f"slot {slot}: restored {tokens} tokens")
            except (OSError, urllib.error.URLError, ValueError) as error:
                # A cache this server cannot take is read again from the prompt.
                lines.append(f"slot {slot}: not restored: {error}")
        return lines

    def save_slots(self) -> list[str]:
        """Keep each slot's prompt cache for the next run; a slot that holds nothing leaves
        the cache an earlier run kept. One line per slot saved."""
        if self.slot_cache is None:
            return []
        lines = []
        for slot in range(SLOTS):
            name, fresh = f"slot-{slot}.bin", f"slot-{slot}.new.bin"
            try:
                tokens = self._slot_action(slot, "save", fresh).get("n_saved", 0)
            except (OSError, urllib.error.URLError, ValueError) as error:
                lines.append(f"slot {slot}: not saved: {error}")
                continue
            if tokens:
                (self.slot_cache / fresh).replace(self.slot_cache / name)
                lines.append(f"slot {slot}: saved {tokens} tokens")
            else:
                (self.slot_cache / fresh).unlink(missing_ok=True)
        return lines

    def _slot_action(self, slot: int, action: str, filename: str) -> dict[str, Any]:
        url = f"{self._upstream}/slots/{slot}?action={action}"
        body = json.dumps({"filename": filename}).encode()
        headers = {"Content-Type": "application/json"}
        request = urllib.request.Request(url, body, headers)  # noqa: S310 - loopback
        with urllib.request.urlopen(request, timeout=120) as answer:  # noqa: S310
            done: dict[str, Any] = json.loads(answer.read() or b"{}")
        return done


def wait_ready(
    base_url: str,
    timeout: float = READY_TIMEOUT_SECONDS,
    alive: Callable[[], bool] = lambda: True,
) -> None:
    """Until the server answers /health with ok (loading the weights takes seconds)."""
    health = base_url.removesuffix("/v1") + "/health"
    deadline = time.monotonic() + timeout
    while True:
        if not alive():
            raise ServeError(f"the local model server for {base_url} exited while loading")
        try:
            with urllib.request.urlopen(health, timeout=5) as answer:  # noqa: S310 - loopback
                if json.loads(answer.read() or b"{}").get("status") == "ok":
                    return
        except (OSError, urllib.error.URLError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise ServeError(f"the local model at {base_url} was not ready after {timeout:.0f} s")
        time.sleep(0.5)
