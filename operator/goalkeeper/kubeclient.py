"""The person's kubeconfig, as every command that talks to the cluster uses it."""

from __future__ import annotations

from typing import Any, TextIO


def context_namespace(config_file: str | None = None) -> str:
    """The current kubeconfig context's namespace, else `default`."""
    from kubernetes import config

    _, active = config.list_kube_config_contexts(config_file)  # type: ignore[no-untyped-call]
    namespace = ((active or {}).get("context") or {}).get("namespace")
    return str(namespace) if namespace else "default"


def connect(namespace: str | None, api_client: Any, err: TextIO) -> tuple[Any, str] | None:
    """A client of the current kubeconfig (or `api_client`) and the namespace to use:
    `namespace`, else the current context's, as kubectl does; None, said on `err`, when
    there is no kubeconfig to read."""
    from kubernetes import config

    try:
        namespace = namespace or context_namespace()
        if api_client is None:
            api_client = config.new_client_from_config()  # type: ignore[no-untyped-call]
    except config.ConfigException as error:
        print(f"goalkeeper: no kubeconfig: {error}", file=err)
        return None
    return api_client, namespace
