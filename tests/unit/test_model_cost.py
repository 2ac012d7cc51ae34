"""The model-cost bench runs the real observe step, and what it measures holds: the step's
fact sheet shows the named Job and ConfigMap, so a check is one request, and from one steady
check to the next the cached prefix runs past the tools and the system prompt into the user
message's stable part."""

from __future__ import annotations

from bench import model_cost
from bench.model_cost import Size, input_by_part, prefix_across, run_checks, segments


async def test_the_cached_prefix_reaches_into_the_user_message_across_steady_checks() -> None:
    checks = await run_checks(3)
    assert [len(c.bodies) for c in checks] == [1, 1, 1]
    for check in checks:
        assert input_by_part(check)["tool results"].bytes == 0
        user = next(s.text for s in segments(check.bodies[0]) if s.part == "user")
        assert "- Job nightly/build: active; active 1" in user
        assert "ConfigMap nightly/build-progress" in user
    steady, following = checks[1], checks[2]
    first_request = segments(following.bodies[0])
    user = next(s.text for s in first_request if s.part == "user")
    # Up to the recorded authority: it is fenced with each check's own fence id.
    stable = user.partition("## Recorded contract")[0]
    tools_and_system = [s for s in first_request if s.part in ("tools", "system")]
    floor = sum((Size.of(s.text) for s in tools_and_system), Size.of(stable))
    assert prefix_across(steady, following).bytes >= floor.bytes


def test_the_table_names_every_row() -> None:
    table = model_cost.run()
    for row in (
        "requests per check",
        "input: tools",
        "input: system",
        "input: user",
        "input: tool results",
        "input: assistant turns",
        "cacheable within the check",
        "cacheable from the previous check",
        "output",
    ):
        assert row in table
