"""The kopf configuration the operator runs with."""

from __future__ import annotations

from typing import Any

import kopf

from goalkeeper.controller.run import NoDiffBase, build_registry


def _configured() -> kopf.OperatorSettings:
    registry = build_registry()
    settings = kopf.OperatorSettings()
    for handler in registry._activities.get_all_handlers():
        if handler.id.endswith(".configure"):
            configure: Any = handler.fn  # called with the one argument it reads
            configure(settings=settings)
    return settings


def test_no_handler_needs_kopfs_diff_of_a_body() -> None:
    # NoDiffBase is right only while every handler is a watch-event handler.
    registry = build_registry()
    assert not list(registry._changing.get_all_handlers())
    assert not list(registry._spawning.get_all_handlers())
    assert len(list(registry._watching.get_all_handlers())) == 6


def test_bodies_are_not_copied_for_a_diff() -> None:
    storage = _configured().persistence.diffbase_storage
    assert isinstance(storage, NoDiffBase)
    body = kopf.Body({"metadata": {"name": "m"}, "spec": {"task": "t" * 1000}})
    assert storage.build(body=body) == {}
    assert storage.fetch(body=body) is None


def test_step_jobs_and_pods_are_selected_by_the_server() -> None:
    selectors = _configured().watching.label_selectors
    assert selectors["batch", "jobs"] == selectors["", "pods"] == "goalkeeper.dev/step"


def test_steps_jobs_and_pods_are_kept_while_kopf_lists_them() -> None:
    # kopf runs index handlers while it lists and holds every other handler until all
    # indexed lists are in: the cache's `lists_in` is rung by the first one after.
    registry = build_registry()
    indexed = {
        (handler.selector.group, handler.selector.any_name)
        for handler in registry._indexing.get_all_handlers()
        if handler.selector is not None
    }
    assert indexed == {("goalkeeper.dev", "monitorsteps"), ("batch", "jobs"), ("", "pods")}
