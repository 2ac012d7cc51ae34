"""`goalkeeper model fetch | path | serve`."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from goalkeeper.localmodel.server import (
    ALIAS,
    STEP_SETTINGS,
    LocalServer,
    ServeError,
    ServeOptions,
    model_file,
    slot_cache_dir,
)
from goalkeeper.localmodel.weights import DEFAULT, FetchError, fetch


def _fetch(args: argparse.Namespace) -> int:
    print(fetch(DEFAULT, say=lambda line: print(line, file=sys.stderr)))
    return 0


def _path(args: argparse.Namespace) -> int:
    print(model_file(download=False))
    return 0


def _serve(args: argparse.Namespace) -> int:
    path = model_file()
    options = ServeOptions(
        context=args.context,
        threads=args.threads,
        temperature=args.temperature,
        port=args.port,
        slot_cache=None if args.no_slot_cache else slot_cache_dir(path, args.context),
    )
    print(f"loading {path}", file=sys.stderr)
    server = LocalServer(path, options)
    server.wait_ready()
    for line in server.restore_slots():
        print(f"prompt cache: {line}", file=sys.stderr)
    print(f"serving {path.name} at {server.base_url}", file=sys.stderr)
    settings = [f"GOALKEEPER_MODEL=openai:{ALIAS}", f"GOALKEEPER_MODEL_BASE_URL={server.base_url}"]
    settings += [f"{name}={value}" for name, value in STEP_SETTINGS.items()]
    print(" ".join(settings))
    sys.stdout.flush()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    for line in server.save_slots():
        print(f"prompt cache: {line}", file=sys.stderr)
    return 0


def _guarded(command: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        try:
            return int(command(args))
        except (FetchError, ServeError) as error:
            print(f"goalkeeper model: {error}", file=sys.stderr)
            return 1

    return run


def register(sub: Any) -> None:
    model = sub.add_parser("model", help="the local model: fetch its weights, serve it")
    verbs = model.add_subparsers(dest="model_command", required=True)
    fetch_cmd = verbs.add_parser(
        "fetch", help=f"download and verify {DEFAULT.name} (about 1.1 GB, cached)"
    )
    fetch_cmd.set_defaults(func=_guarded(_fetch))
    path_cmd = verbs.add_parser("path", help="print the weights file that `serve` uses")
    path_cmd.set_defaults(func=_guarded(_path))
    serve_cmd = verbs.add_parser(
        "serve", help="serve the model on 127.0.0.1 (OpenAI-compatible) until Ctrl-C"
    )
    defaults = ServeOptions()
    serve_cmd.add_argument("--port", type=int, default=defaults.port, help="0: a free port")
    serve_cmd.add_argument("--context", type=int, default=defaults.context, help="tokens")
    serve_cmd.add_argument("--threads", type=int, default=defaults.threads, help="0: all CPUs")
    serve_cmd.add_argument("--temperature", type=float, default=defaults.temperature)
    serve_cmd.add_argument(
        "--no-slot-cache",
        action="store_true",
        help="read every step kind's prompt anew: keep no prompt cache between runs",
    )
    serve_cmd.set_defaults(func=_guarded(_serve))
