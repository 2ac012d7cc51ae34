"""A typed act done by code: the grant's one API call, then the field read back. No model.

The engine names the grant the action uses (`StepInput.grant`); its verb, object and
bounds say the whole write, so nothing here reads the action's words. Each write goes
through the act tools, so the mutation set and the actor's own rights still bound it. An
object a GitOps controller keeps in sync would have the change reverted at its next sync:
the act is refused before any write unless the grant's words say the person knows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from goalkeeper.core.authority import by_code, unsynced_refusal
from goalkeeper.core.facts import synced_by
from goalkeeper.core.models import ActionResult, GrantVerb, Outcome, StepUsage, TypedGrant
from goalkeeper.core.reading import grant_line as line
from goalkeeper.step.agent import StepOutcome
from goalkeeper.step.fence import unfence
from goalkeeper.step.tools import REFUSED, RESTARTED_AT, StepTools

_API = {
    "Job": "batch/v1",
    "CronJob": "batch/v1",
    "Deployment": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "ConfigMap": "v1",
}


def run_typed(grant: TypedGrant, tools: StepTools) -> StepOutcome:
    """Do the grant's action as one call and verify it by reading the object back."""
    ref = grant.object
    assert ref is not None and by_code(grant)
    api = _API[ref.kind]
    namespace = ref.namespace or tools.config.namespace

    kube = tools.kube
    if kube is None:
        return _result(Outcome.failed, "the act step has no Kubernetes client")

    def get() -> dict[str, Any]:
        found = kube.get(api, ref.kind, ref.name, namespace)
        return found if isinstance(found, dict) else {}

    try:
        before = get()
    except Exception as error:
        return _result(Outcome.failed, f"{ref.ref} could not be read before the act: {error}")
    # The engine refused this before launch on the observe step's facts; the object may
    # have come under a GitOps controller since.
    synced = unsynced_refusal(grant, synced_by(before))
    if synced is not None:
        return _result(Outcome.blocked, f"{synced} Nothing was changed.")
    write, check = _write_and_check(grant, tools, namespace, before)
    said = write()
    refused = _refusal(said)
    if refused is not None:
        return _result(Outcome.failed, f"{ref.ref}: {refused}")
    done = f"{line(grant)}: one API call"
    try:
        after = get()
    except Exception as error:
        return _result(Outcome.failed, f"{done}; reading {ref.ref} back failed: {error}")
    failed = check(after)
    if failed is not None:
        return _result(Outcome.failed, f"{done}; read back: {failed}")
    return _result(Outcome.succeeded, f"{done}; read back: it holds.", changed=[ref.ref])


Check = Callable[[dict[str, Any]], str | None]


def _refusal(said: str) -> str | None:
    """The error or refusal a tool answered (an API error comes fenced as the target's
    data); None when it did the write."""
    body = unfence(said)
    return body if body.startswith(("ERROR", REFUSED)) else None


def _write_and_check(
    grant: TypedGrant, tools: StepTools, namespace: str, before: dict[str, Any]
) -> tuple[Callable[[], str], Check]:
    ref = grant.object
    assert ref is not None

    def spec(obj: dict[str, Any]) -> dict[str, Any]:
        return obj.get("spec") or {}

    match grant.verb:
        case GrantVerb.resume | GrantVerb.suspend:
            wanted = grant.verb is GrantVerb.suspend
            return (
                lambda: tools.k8s_patch(
                    ref.kind, ref.name, {"spec": {"suspend": wanted}}, namespace
                ),
                lambda obj: (
                    None
                    if bool(spec(obj).get("suspend")) is wanted
                    else f"spec.suspend is {spec(obj).get('suspend')}"
                ),
            )
        case GrantVerb.scale:
            count = grant.replicas
            assert count is not None
            return (
                lambda: tools.k8s_scale(ref.kind, ref.name, count, namespace),
                lambda obj: (
                    None
                    if spec(obj).get("replicas") == count
                    else f"spec.replicas is {spec(obj).get('replicas')}"
                ),
            )
        case GrantVerb.restart:

            def stamped(obj: dict[str, Any]) -> str | None:
                template = (spec(obj).get("template") or {}).get("metadata") or {}
                stamp = (template.get("annotations") or {}).get(RESTARTED_AT)
                old = ((spec(before).get("template") or {}).get("metadata") or {}).get(
                    "annotations"
                ) or {}
                return None if stamp and stamp != old.get(RESTARTED_AT) else "no new restart stamp"

            return lambda: tools.k8s_rollout_restart(ref.kind, ref.name, namespace), stamped
        case GrantVerb.rerun:
            uid = (before.get("metadata") or {}).get("uid")

            def again(obj: dict[str, Any]) -> str | None:
                now = (obj.get("metadata") or {}).get("uid")
                return None if now != uid else "the Job was not created again"

            return lambda: tools.k8s_rerun_job(ref.name, namespace), again
        case GrantVerb.deleteFailedPods:
            return _failed_pods(tools, ref.name, namespace)
        case GrantVerb.setKey:
            key, value = grant.key, grant.values[0]
            assert key is not None
            return (
                lambda: tools.k8s_patch("ConfigMap", ref.name, {"data": {key: value}}, namespace),
                lambda obj: (
                    None
                    if (obj.get("data") or {}).get(key) == value
                    else f"data.{key} is {(obj.get('data') or {}).get(key)!r}"
                ),
            )
    raise AssertionError(f"no typed act for {grant.verb}")


def _failed_pods(tools: StepTools, job: str, namespace: str) -> tuple[Callable[[], str], Check]:
    def failed() -> list[str]:
        assert tools.kube is not None  # run_typed checked it
        pods = tools.kube.list("v1", "Pod", namespace, label_selector=f"job-name={job}")
        items = pods.get("items", []) if isinstance(pods, dict) else []
        return [
            p["metadata"]["name"] for p in items if (p.get("status") or {}).get("phase") == "Failed"
        ]

    def delete() -> str:
        names = failed()
        said = [tools.k8s_delete("Pod", name, namespace) for name in names]
        errors = [e for e in map(_refusal, said) if e is not None]
        if errors:
            return errors[0]
        return f"deleted {len(names)} failed pod(s) of Job {job}: {', '.join(names) or 'none'}"

    def none_left(_: dict[str, Any]) -> str | None:
        left = failed()
        return None if not left else f"failed pods left: {', '.join(left)}"

    return delete, none_left


def _result(outcome: Outcome, evidence: str, changed: list[str] | None = None) -> StepOutcome:
    result = ActionResult(outcome=outcome, evidence=evidence[:4000], changed=changed or [])
    return StepOutcome(result.model_dump(mode="json"), StepUsage(), None, None)
