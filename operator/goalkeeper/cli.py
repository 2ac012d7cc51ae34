"""The `goalkeeper` command line: a thin dispatcher over the subcommand modules."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from goalkeeper.controller.settings import OperatorSettings


# The cluster CA a pod sees; the console mounts it without the service account token.
IN_CLUSTER_CA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
NAMESPACE_HELP = "the Monitor's namespace (default: the current kubeconfig context's)"


def _crds(args: argparse.Namespace) -> int:
    from goalkeeper import crds

    if args.check:
        stale = crds.stale_files(args.out)
        for path in stale:
            print(f"{path} differs from the generated CRD; run `goalkeeper crds`", file=sys.stderr)
        return 1 if stale else 0
    if args.stdout:
        sys.stdout.write(crds.render_all())
        return 0
    for path in crds.write_all(args.out):
        print(path)
    return 0


def _settings() -> OperatorSettings | None:
    from goalkeeper.controller import settings

    try:
        return settings.load()
    except settings.SettingsError as error:
        print(f"goalkeeper: invalid settings: {error}", file=sys.stderr)
        return None


GC_YOUNG_THRESHOLD = 100_000


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # kopf logs every handler call at INFO; goalkeeper's own lines say what matters.
        for noisy in ("kopf", "urllib3", "httpx"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import gc

    from goalkeeper.controller.run import run_operator

    # What is loaded by now lives as long as the process: kept out of every collection.
    # A list page of Monitors allocates some 100,000 objects, and at the default young
    # threshold (700) each page cost three times its decoding in collections.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, 50, 100)

    _logging(args.verbose)
    loaded = _settings()
    if loaded is None:
        return 2
    if args.namespace:
        loaded = loaded.model_copy(update={"namespaces": args.namespace})
    asyncio.run(run_operator(loaded))
    return 0


def _dev(args: argparse.Namespace) -> int:
    try:
        from goalkeeper.dev import run_dev
    except ImportError as missing:
        print(f"goalkeeper dev needs a development install ({missing})", file=sys.stderr)
        return 2

    _logging(args.verbose)
    loaded = _settings()
    return 2 if loaded is None else run_dev(loaded, namespace=args.namespace, verbose=args.verbose)


def _logs(args: argparse.Namespace) -> int:
    from goalkeeper.logs import show_logs

    return show_logs(args.monitor, args.namespace)


def _history(args: argparse.Namespace) -> int:
    from goalkeeper.history import show_history

    return show_history(args.monitor, args.namespace)


def _show(args: argparse.Namespace) -> int:
    from goalkeeper.monitors import show_monitor

    return show_monitor(args.monitor, args.namespace)


def _mcp(args: argparse.Namespace) -> int:
    try:
        from goalkeeper.mcpserver import serve
    except ModuleNotFoundError as missing:
        if missing.name is None or not missing.name.startswith("mcp"):
            raise
        print("goalkeeper mcp needs the MCP SDK: pip install 'goalkeeper[mcp]'", file=sys.stderr)
        return 2

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return serve(
        namespace=args.namespace, http=args.http, port=args.port, token_file=args.token_file
    )


def _answer(args: argparse.Namespace) -> int:
    from goalkeeper.approvals import answer
    from goalkeeper.core.models import ApprovalDecision

    decision = ApprovalDecision.approve if args.command == "approve" else ApprovalDecision.reject
    amount = getattr(args, "amount", None)
    return answer(args.monitor, args.namespace, decision, amount=amount, reason=args.reason)


def _authority(args: argparse.Namespace) -> int:
    from goalkeeper.authorityctl import run

    return run(
        args.monitor,
        args.namespace,
        confirm=args.confirm,
        grants=args.grant or [],
        denied=args.deny or [],
        reason=args.reason,
    )


def _control(args: argparse.Namespace) -> int:
    from goalkeeper.control import Control, run_control

    return run_control(Control(args.command), args.monitor, args.namespace)


def _console(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    import ipaddress

    from goalkeeper.console.server import Settings, serve

    server, ca_file = args.server, args.certificate_authority
    if args.in_cluster:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if not host:
            print(
                "goalkeeper console --in-cluster: KUBERNETES_SERVICE_HOST is not set",
                file=sys.stderr,
            )
            return 2
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        server = f"https://{host}:{port}"
        ca_file = ca_file or IN_CLUSTER_CA
    try:
        loopback = args.address == "localhost" or ipaddress.ip_address(args.address).is_loopback
    except ValueError:
        print(
            f"goalkeeper console: --address {args.address!r} is not an IP address "
            "(127.0.0.1, ::1, or with --server or --in-cluster any address such as 0.0.0.0)",
            file=sys.stderr,
        )
        return 2
    if server is None and not loopback:
        print(
            "goalkeeper console: --address must be a loopback address when the console uses "
            "your kubeconfig (another address needs --server or --in-cluster, where each "
            "person brings their own token)",
            file=sys.stderr,
        )
        return 2
    kubeconfig_client = None
    namespaces = tuple(args.namespace or ())
    if server is None:
        from kubernetes import config

        from goalkeeper.kubeclient import context_namespace

        try:
            kubeconfig_client = config.new_client_from_config()  # type: ignore[no-untyped-call]
            namespaces = (*namespaces, context_namespace())
        except config.ConfigException as error:
            print(f"goalkeeper: no kubeconfig: {error}", file=sys.stderr)
            return 2
    settings = Settings(
        server=server,
        ca_file=ca_file,
        namespaces=namespaces,
        secure_cookies=args.secure_cookies,
    )

    def announce(url: str) -> None:
        print(f"goalkeeper console: open {url}", flush=True)
        if server is None:
            print("(the link works once: it signs one browser in)", flush=True)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            serve(
                settings,
                host=args.address,
                port=args.port,
                kubeconfig_client=kubeconfig_client,
                announce=announce,
            )
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goalkeeper", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    crds_cmd = sub.add_parser("crds", help="write the CRDs generated from the models")
    crds_cmd.add_argument("--out", default="crds", help="folder to write into (default: crds)")
    crds_cmd.add_argument("--check", action="store_true", help="fail when the files differ")
    crds_cmd.add_argument("--stdout", action="store_true", help="print instead of writing")
    crds_cmd.set_defaults(func=_crds)
    try:
        from goalkeeper.devcluster.cli import register as register_cluster
    except ImportError:
        pass  # the operator image ships without the development cluster
    else:
        register_cluster(sub)

    try:
        from goalkeeper.localmodel.cli import register as register_model
    except ImportError:
        pass  # nor the local model
    else:
        register_model(sub)

    run_cmd = sub.add_parser("run", help="run the operator against the current kubeconfig")
    run_cmd.add_argument(
        "--namespace", action="append", help="watch only this namespace (repeatable)"
    )
    run_cmd.add_argument("-v", "--verbose", action="store_true")
    run_cmd.set_defaults(func=_run)

    dev_cmd = sub.add_parser(
        "dev", help="local control plane, step accounts, pod runner and operator; Ctrl-C stops"
    )
    dev_cmd.add_argument("--namespace", default="default", help="where the step accounts go")
    dev_cmd.add_argument("-v", "--verbose", action="store_true")
    dev_cmd.set_defaults(func=_dev)

    logs_cmd = sub.add_parser("logs", help="print the log of a monitor's latest step")
    logs_cmd.add_argument("monitor", help="the Monitor's name")
    logs_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
    logs_cmd.set_defaults(func=_logs)

    history_cmd = sub.add_parser(
        "history", help="print every kept check's report, with its time and step, oldest first"
    )
    history_cmd.add_argument("monitor", help="the Monitor's name")
    history_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
    history_cmd.set_defaults(func=_history)

    show_cmd = sub.add_parser(
        "show",
        help="print a monitor's state, progress, health, next check, authority and latest report",
    )
    show_cmd.add_argument("monitor", help="the Monitor's name")
    show_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
    show_cmd.set_defaults(func=_show)

    mcp_cmd = sub.add_parser(
        "mcp",
        help="an MCP server for agent hosts, acting as you through your kubeconfig "
        "(stdio; --http: streamable HTTP on 127.0.0.1)",
    )
    mcp_cmd.add_argument(
        "-n", "--namespace", help="the default namespace (default: the kubeconfig context's)"
    )
    mcp_cmd.add_argument(
        "--http", action="store_true", help="serve streamable HTTP on 127.0.0.1, not stdio"
    )
    mcp_cmd.add_argument("--port", type=int, default=8765, help="the HTTP port (default 8765)")
    mcp_cmd.add_argument(
        "--token-file",
        type=Path,
        help="the bearer token HTTP requests must carry, made when missing "
        "(default: ~/.cache/goalkeeper/mcp-token)",
    )
    mcp_cmd.set_defaults(func=_mcp)

    console_cmd = sub.add_parser(
        "console",
        help="a web console acting as you: Monitors, reports, progress, steps, approvals "
        "(on 127.0.0.1 with your kubeconfig; in a cluster with each person's token)",
    )
    console_cmd.add_argument(
        "-n",
        "--namespace",
        action="append",
        help="a namespace to show when you may not list all of them (repeatable)",
    )
    console_cmd.add_argument("--address", default="127.0.0.1", help="the address to bind")
    console_cmd.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    console_cmd.add_argument(
        "--server",
        help="serve people with their own tokens against this API server URL, not your kubeconfig",
    )
    console_cmd.add_argument(
        "--certificate-authority", help="the API server's CA bundle (with --server)"
    )
    console_cmd.add_argument(
        "--in-cluster",
        action="store_true",
        help="as --server, for the API server a pod sees (its own token is never used)",
    )
    console_cmd.add_argument(
        "--secure-cookies",
        action="store_true",
        help="mark cookies Secure (behind TLS)",
    )
    console_cmd.set_defaults(func=_console)

    for verb, what in (("approve", "approve"), ("reject", "reject")):
        answer_cmd = sub.add_parser(
            verb, help=f"{what} the paid action a monitor awaits approval for, as yourself"
        )
        answer_cmd.add_argument("monitor", help="the Monitor's name")
        answer_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
        answer_cmd.add_argument("--reason", default="", help="why, for the record")
        if verb == "approve":
            answer_cmd.add_argument(
                "--amount",
                type=float,
                help="what to add to the cost ceiling for this action (default: what it asks)",
            )
        answer_cmd.set_defaults(func=_answer)

    authority_cmd = sub.add_parser(
        "authority",
        help="show what goalkeeper read from a monitor's task; confirm or correct it as yourself",
    )
    authority_cmd.add_argument("monitor", help="the Monitor's name")
    authority_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
    authority_cmd.add_argument(
        "--confirm", action="store_true", help="confirm the reading as shown (with any changes)"
    )
    authority_cmd.add_argument(
        "--grant",
        action="append",
        metavar="WORDS",
        help="add a grant, in words the reading parses whole ('resume Job etl once'); repeatable",
    )
    authority_cmd.add_argument(
        "--deny", action="append", metavar="ID", help="remove the grant with this id; repeatable"
    )
    authority_cmd.add_argument("--reason", default="", help="why, for the record")
    authority_cmd.set_defaults(func=_authority)

    for verb, what in (
        ("pause", "pause a monitor: its running step finishes, then nothing launches"),
        ("resume", "resume a paused monitor: it checks at once"),
        ("check", "make a waiting monitor check now"),
    ):
        control_cmd = sub.add_parser(verb, help=what)
        control_cmd.add_argument("monitor", help="the Monitor's name")
        control_cmd.add_argument("-n", "--namespace", help=NAMESPACE_HELP)
        control_cmd.set_defaults(func=_control)

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
