"""The CRDs are generated from the models; the committed files must match them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from goalkeeper import crds
from goalkeeper.cli import main
from goalkeeper.core.models import MonitorApprovalSpec

ROOT = Path(__file__).resolve().parents[2]


def test_committed_crds_match_the_models() -> None:
    stale = crds.stale_files(ROOT / "crds")
    assert stale == [], f"regenerate with `goalkeeper crds`: {stale}"


def test_crds_check_command_fails_on_drift(tmp_path: Path) -> None:
    crds.write_all(tmp_path)
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 0
    target = tmp_path / "monitors.goalkeeper.dev.yaml"
    target.write_text(target.read_text().replace("maximum: 1440", "maximum: 9999"))
    assert main(["crds", "--check", "--out", str(tmp_path)]) == 1


def walk(node: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found.extend(walk(value))
    elif isinstance(node, list):
        for value in node:
            found.extend(walk(value))
    return found


def test_schemas_are_structural() -> None:
    for build in crds.FILES.values():
        schema = build()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for node in walk(schema["properties"]):
            keys = set(node)
            if "properties" in keys and "type" in keys:
                assert node["type"] == "object"
                assert "additionalProperties" not in keys
            for forbidden in ("$ref", "$defs", "anyOf", "oneOf", "const", "uniqueItems", "title"):
                assert forbidden not in keys, (forbidden, node)


def test_monitor_spec_has_exactly_four_fields_with_bounds_and_defaults() -> None:
    crd = crds.monitor_crd()
    version = crd["spec"]["versions"][0]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == {"task", "stopWhen", "everyMinutes", "maxChecks"}
    assert spec["required"] == ["task"]
    every = spec["properties"]["everyMinutes"]
    assert (every["type"], every["minimum"], every["maximum"], every["default"]) == (
        "integer",
        1,
        1440,
        30,
    )
    checks = spec["properties"]["maxChecks"]
    assert (checks["minimum"], checks["maximum"], checks["default"]) == (1, 1000, 1000)
    rules = [v["rule"] for v in spec["properties"]["task"]["x-kubernetes-validations"]]
    assert rules == ["self.trim().size() > 0", "self.trim().size() <= 8000"]
    assert spec["properties"]["stopWhen"]["default"].startswith("Stop only when")
    assert "x-kubernetes-preserve-unknown-fields" not in spec


def properties_of(crd: dict[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"][
        "properties"
    ]
    return properties


def test_spec_text_may_carry_any_whitespace_and_the_trimmed_bound_is_a_cel_rule() -> None:
    spec = properties_of(crds.monitor_crd())["spec"]["properties"]
    for field, limit in (("task", 8000), ("stopWhen", 4000)):
        # A maxLength on the raw text would refuse a valid task padded with whitespace.
        assert "maxLength" not in spec[field], field
        rules = [v["rule"] for v in spec[field]["x-kubernetes-validations"]]
        assert rules == ["self.trim().size() > 0", f"self.trim().size() <= {limit}"]


def test_text_goalkeeper_stores_is_bounded_by_its_trimmed_length() -> None:
    # What the operator writes is the model's own value, already trimmed.
    step_input = properties_of(crds.monitorstep_crd())["spec"]["properties"]["input"]
    assert [step_input["properties"][f]["maxLength"] for f in ("task", "stopWhen")] == [8000, 4000]
    observation = properties_of(crds.monitor_crd())["status"]["properties"]["lastObservation"]
    fields = ("observation", "report", "reason")
    assert [observation["properties"][f]["maxLength"] for f in fields] == [8000, 4000, 2000]
    for build in crds.FILES.values():
        assert crds.TRIMMED_MARKER not in crds.render(build())


def test_monitor_crd_names_columns_and_subresource() -> None:
    crd = crds.monitor_crd()
    names = crd["spec"]["names"]
    assert names["shortNames"] == ["mon"] and names["categories"] == ["goalkeeper"]
    version = crd["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
    assert columns == ["Goal", "Work", "Progress", "Checks", "Next Check", "Step", "Health", "Age"]
    # kubectl prints a `date` column as an age: a future time would read <invalid>.
    by_name = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert by_name["Next Check"]["type"] == "string"


def test_the_status_layout_version_has_no_default_the_api_server_could_stamp() -> None:
    # A default would be applied to a status an earlier release wrote, whenever it is
    # read: the operator could no longer tell which layout to migrate from.
    version = crds.monitor_crd()["spec"]["versions"][0]
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "default" not in status["schemaVersion"]
    assert status["schemaVersion"]["minimum"] == 1


def test_monitorstep_result_is_free_form_and_input_is_typed() -> None:
    schema = crds.monitorstep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    result = schema["properties"]["status"]["properties"]["result"]
    assert result["x-kubernetes-preserve-unknown-fields"] is True
    step_input = schema["properties"]["spec"]["properties"]["input"]
    assert "task" in step_input["properties"]


def test_a_monitorstep_spec_cannot_change_once_created() -> None:
    schema = crds.monitorstep_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert [v["rule"] for v in spec["x-kubernetes-validations"]] == ["self == oldSelf"]
    # The rule guards the step's spec only: its pod still writes the status.
    assert "x-kubernetes-validations" not in schema["properties"]["status"]


def test_crds_command_prints_yaml_documents(capsys: object) -> None:
    assert main(["crds", "--stdout"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["metadata"]["name"] for d in docs] == [
        "monitors.goalkeeper.dev",
        "monitorsteps.goalkeeper.dev",
        "monitorapprovals.goalkeeper.dev",
        "modelconfigs.goalkeeper.dev",
        "notificationsinks.goalkeeper.dev",
    ]


def test_a_monitor_approval_has_no_status_and_its_answer_in_columns() -> None:
    crd = crds.monitorapproval_crd()
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version
    properties = version["schema"]["openAPIV3Schema"]["properties"]
    assert "status" not in properties
    assert set(properties["spec"]["properties"]) == set(MonitorApprovalSpec.model_fields)
    assert properties["spec"]["properties"]["decision"]["enum"] == ["approve", "reject"]
    names = [c["name"] for c in version["additionalPrinterColumns"]]
    assert names == ["Monitor", "Request", "Decision", "Amount", "Approver", "Age"]


def test_the_approval_example_is_a_valid_monitor_approval() -> None:
    example = yaml.safe_load((Path(__file__).parents[2] / "examples" / "approval.yaml").read_text())
    assert example["kind"] == "MonitorApproval"
    spec = MonitorApprovalSpec.model_validate(example["spec"])
    assert spec.approver == ""  # the API server fills it in
    # The operator takes only an approval owned by the Monitor it answers.
    (owner,) = example["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Monitor", spec.monitor) and owner["uid"]
