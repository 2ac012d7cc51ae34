"""The mutation-set entry syntax, on its own."""

from __future__ import annotations

from goalkeeper.step.mutations import Command, HttpCall, KubeObject, MutationSet


def obj(name: str | None, kind: str = "Job", plural: str = "jobs", **kw: object) -> KubeObject:
    fields: dict[str, object] = {"group": "batch", "namespace": "shop", **kw}
    return KubeObject(kind=kind, plural=plural, name=name, **fields)  # type: ignore[arg-type]


def test_plural_or_kind_in_any_case_with_globs() -> None:
    for entry in ("jobs/build", "Job/build", "JOBS/build", "job.batch/build", "jobs/bui*"):
        assert MutationSet([entry], "shop").covers(obj("build")), entry
    ms = MutationSet(["pods/build-*"], "shop")
    pod = {"kind": "Pod", "plural": "pods", "group": ""}
    assert ms.covers(obj("build-x1", **pod))
    assert not ms.covers(obj("builder", **pod))
    assert not ms.covers(obj(None, **pod))  # a whole collection needs `pods/*`
    assert MutationSet(["pods/*"], "shop").covers(obj(None, **pod))


def test_namespaces_and_cluster_scoped_objects() -> None:
    ms = MutationSet(["jobs/build", "prod/jobs/nightly", "nodes/n1"], "shop")
    assert ms.covers(obj("build"))
    assert not ms.covers(obj("build", namespace="prod"))
    assert ms.covers(obj("nightly", namespace="prod"))
    assert not ms.covers(obj("nightly"))
    node = obj("n1", kind="Node", plural="nodes", group="", namespace=None)
    assert ms.covers(node)
    assert ms.label(obj("x", namespace="prod", subresource="status")) == "prod/jobs/x (status)"


def test_urls_and_commands_only_when_named_exactly() -> None:
    ms = MutationSet(
        ["http://build-api.shop.svc:8080/v1/resume", "https://hooks.example.com", "command:make"],
        "shop",
    )

    def post(scheme: str, host: str, port: int, path: str) -> HttpCall:
        return HttpCall("POST", scheme, host, port, path)

    assert ms.covers(post("http", "build-api.shop.svc", 8080, "/v1/resume"))
    assert ms.covers(post("http", "build-api.shop.svc", 8080, "/v1/resume/now?x=1"))
    assert not ms.covers(post("http", "build-api.shop.svc", 8080, "/v1/resumed"))
    assert not ms.covers(post("http", "build-api.shop.svc", 80, "/v1/resume"))
    assert not ms.covers(post("https", "build-api.shop.svc", 8080, "/v1/resume"))
    assert ms.covers(post("https", "hooks.example.com", 443, "/any"))
    assert ms.covers(Command("make")) and not ms.covers(Command("/usr/bin/make"))


def test_objects_in_words_and_short_names_are_covered_as_in_slashes() -> None:
    web = obj("web", kind="Deployment", plural="deployments", group="apps")
    for entry, write in (
        ("Job build", obj("build")),
        ("the build Job", obj("build")),
        ("job build in namespace shop", obj("build")),
        ("deploy/web", web),
    ):
        ms = MutationSet([entry], "shop")
        assert ms.covers(write) and not ms.covers(obj("other")), entry
    assert not MutationSet(["Job build in namespace prod"], "shop").covers(obj("build"))


def test_other_entries_name_nothing() -> None:
    ms = MutationSet(
        ["repo:build/config.yaml", "every build Job", "a/b/c/d", "http://u:p@x/"], "shop"
    )
    assert not ms.covers(obj("build"))
    assert not ms.covers(HttpCall("POST", "http", "x", 80, "/"))
    assert str(MutationSet([], "shop")) == "none named"
