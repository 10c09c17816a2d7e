"""`phalanx convert`: upstream Jobs (the article's manifests) in, the Phalanx form out; clear errors."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from phalanx.api.job_policy import JobPolicy, from_upstream_scheduling, parse_job_policy, upstream_scheduling
from phalanx.cli import main
from phalanx.tools.convert import ConvertError, convert_object, convert_text, split_documents

ARTICLE = Path(__file__).resolve().parents[2] / "data" / "article"
NB = "oci.oraclecloud.com/rdma.network_block_id"
LB = "oci.oraclecloud.com/rdma.local_block_id"


def article(name: str) -> str:
    return (ARTICLE / name).read_text()


def docs(text: str) -> list[Any]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def upstream_job(scheduling: Any, parallelism: int = 4, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "scheduling": scheduling,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "w", "image": "x"}]}},
            **extra,
        },
    }


def problems_of(obj: Any) -> list[str]:
    _, _, problems, _ = convert_object(obj)
    return problems


# ---------------------------------------------------------------------- the article's manifests


def test_gang_4_becomes_a_managed_gang_with_everything_else_unchanged() -> None:
    source = article("gang-4.yaml")
    result = convert_text(source, "gang-4.yaml")
    assert result.converted == ("Job gang-4",)
    assert result.warnings == ()
    (before,) = docs(source)
    (after,) = docs(result.text)
    assert after["metadata"] == {
        "name": "gang-4",
        "labels": {"phalanx.dev/managed": "true"},
        "annotations": {"phalanx.dev/policy": "gang", "phalanx.dev/disruption-mode": "single"},
    }
    del before["spec"]["scheduling"]
    assert after["spec"] == before["spec"]
    policy = parse_job_policy(after)
    assert (policy.policy, policy.min_count, policy.topology_key) == ("gang", 4, None)


def test_local_2_keeps_its_local_block() -> None:
    (after,) = docs(convert_text(article("local-2.yaml")).text)
    assert after["metadata"]["annotations"]["phalanx.dev/topology-key"] == LB
    assert "scheduling" not in after["spec"]
    assert parse_job_policy(after).min_count == 2


def test_the_preemption_file_converts_every_job_and_copies_the_priority_classes_byte_for_byte() -> None:
    source = article("preemption.yaml")
    result = convert_text(source, "preemption.yaml")
    assert result.converted == ("Job low-a", "Job low-b", "Job high-2")
    out = docs(result.text)
    assert [d["kind"] for d in out] == ["PriorityClass", "PriorityClass", "Job", "Job", "Job"]
    chunks = split_documents(result.text)
    assert chunks[:2] == split_documents(source)[:2]  # untouched documents are copied as they were
    for before, after in zip(docs(source)[2:], out[2:], strict=True):
        expected = from_upstream_scheduling(
            before["spec"]["scheduling"],
            parallelism=before["spec"]["parallelism"],
            priority_class_name=before["spec"]["template"]["spec"]["priorityClassName"],
        )
        assert parse_job_policy(after) == expected
        assert after["spec"]["template"] == before["spec"]["template"]
    assert out[2]["metadata"]["annotations"]["phalanx.dev/topology-key"] == NB
    assert out[4]["spec"]["template"]["spec"]["priorityClassName"] == "high"


def test_a_job_without_spec_scheduling_is_copied_unchanged() -> None:
    source = article("plain-4.yaml")
    result = convert_text(source)
    assert result.text == source
    assert result.converted == ()


def test_upstream_workloads_and_podgroups_pass_through_with_a_warning() -> None:
    source = article("slices.yaml")
    result = convert_text(source, "slices.yaml")
    assert result.text == source  # comments included
    assert len(result.warnings) == 2
    assert result.warnings[0].startswith(
        "slices.yaml: document 1 (Workload slices): scheduling.k8s.io/v1beta1 Workload passed through "
        "unchanged: a stock apiserver does not serve it"
    )


def test_a_pod_that_names_an_upstream_podgroup_is_an_error() -> None:
    with pytest.raises(ConvertError) as caught:
        convert_text(article("slice-pod.yaml"), "slice-pod.yaml")
    assert caught.value.problems == [
        "slice-pod.yaml: document 1 (Pod slices-0-0): spec.schedulingGroup: not supported: a stock apiserver "
        "drops it, and Phalanx gang-schedules Jobs (by their label and annotations), not pods that name an "
        "upstream PodGroup"
    ]


# ---------------------------------------------------------------------- streams


def test_comments_and_markers_of_a_converted_document_stay() -> None:
    source = (
        "# header of the file\n"
        "apiVersion: v1\nkind: ConfigMap  # keep me\nmetadata: {name: c}\n"
        "--- # the gang\n"
        "# Four workers together.\n"
        + yaml.safe_dump(upstream_job({"schedulingPolicy": {"gang": {"minCount": 4}}}), sort_keys=False)
        + "...\n"
    )
    result = convert_text(source)
    assert result.text.startswith(
        "# header of the file\napiVersion: v1\nkind: ConfigMap  # keep me\nmetadata: {name: c}\n"
        "--- # the gang\n# Four workers together.\napiVersion: batch/v1\n"
    )
    assert [d["kind"] for d in docs(result.text)] == ["ConfigMap", "Job"]


def test_json_and_flow_style_input_is_read() -> None:
    import json

    source = json.dumps(upstream_job({"schedulingPolicy": {"gang": {}}}))
    (after,) = docs(convert_text(source).text)
    assert after["metadata"]["labels"] == {"phalanx.dev/managed": "true"}
    assert parse_job_policy(after).min_count == 4  # gang without minCount: all of parallelism


def test_a_list_and_a_cronjob_are_converted_inside() -> None:
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "0 2 * * *",
            "jobTemplate": {"spec": upstream_job({"schedulingPolicy": {"gang": {"minCount": 2}}})["spec"]},
        },
    }
    gang_all = upstream_job({"schedulingPolicy": {"gang": {}}, "disruptionMode": {"all": {}}})
    listed = {"apiVersion": "v1", "kind": "List", "items": [gang_all, cron]}
    result = convert_text(yaml.safe_dump(listed))
    assert result.converted == ("Job j", "CronJob nightly")
    (after,) = docs(result.text)
    job, cronjob = after["items"]
    assert "scheduling" not in job["spec"]
    assert job["metadata"]["annotations"]["phalanx.dev/disruption-mode"] == "all"
    template = cronjob["spec"]["jobTemplate"]
    assert template["metadata"]["labels"] == {"phalanx.dev/managed": "true"}
    assert template["metadata"]["annotations"]["phalanx.dev/min-count"] == "2"
    assert "scheduling" not in template["spec"]


def test_invalid_yaml_is_an_error() -> None:
    with pytest.raises(ConvertError, match=r"^x.yaml: not valid YAML"):
        convert_text("a: [1,\n", "x.yaml")


# ---------------------------------------------------------------------- what cannot be converted


@pytest.mark.parametrize(
    ("scheduling", "problem"),
    [
        (
            {"schedulingPolicy": {"gang": {"minCount": 4}}, "resourceClaims": [{"name": "c"}]},
            "spec.scheduling.resourceClaims: not supported: Phalanx has no PodGroup-shared ResourceClaims",
        ),
        ({"schedulingPolicy": {"gang": {}}, "priority": 5}, "spec.scheduling.priority: unknown field"),
        (
            {"schedulingPolicy": {}},
            "spec.scheduling.schedulingPolicy: exactly one of basic, gang must be set",
        ),
        (
            {"schedulingPolicy": {"basic": {}, "gang": {}}},
            "spec.scheduling.schedulingPolicy: exactly one of basic, gang must be set",
        ),
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "minCount: 0 is not an integer of at least 1"),
        ({"schedulingPolicy": {"gang": {"minCount": "4"}}}, "minCount: '4' is not an integer of at least 1"),
        ({"schedulingPolicy": {"gang": {"minGroupCount": 2}}}, "gang.minGroupCount: unknown field"),
        (
            {
                "schedulingPolicy": {"gang": {}},
                "schedulingConstraints": {"topology": [{"key": NB}, {"key": LB}]},
            },
            "topology: 2 constraints; at most one is allowed",
        ),
        (
            {
                "schedulingPolicy": {"gang": {}},
                "schedulingConstraints": {"topology": [{"key": NB, "mode": "x"}]},
            },
            "topology[0].mode: unknown field",
        ),
        (
            {"schedulingPolicy": {"gang": {}}, "disruptionMode": {"some": {}}},
            "disruptionMode.some: unknown field",
        ),
        (
            {"schedulingPolicy": {"basic": {}}, "schedulingConstraints": {"topology": [{"key": NB}]}},
            "spec.scheduling: Phalanx would refuse the converted Job: "
            f'metadata.annotations[phalanx.dev/topology-key]: "{NB}" needs policy gang (pods placed one '
            "by one cannot be held in one domain), but phalanx.dev/policy is basic",
        ),
        (
            {"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}},
            'metadata.annotations[phalanx.dev/disruption-mode]: "all" needs policy gang, '
            "but phalanx.dev/policy is basic",
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 5}}},
            "spec.scheduling: Phalanx would refuse the converted Job: "
            "metadata.annotations[phalanx.dev/min-count]: 5 is greater than parallelism 4",
        ),
        (
            {"schedulingPolicy": {"gang": {}}, "schedulingConstraints": {"topology": [{"key": "bad key!"}]}},
            'metadata.annotations[phalanx.dev/topology-key]: "bad key!" is not a valid label key',
        ),
    ],
)
def test_what_phalanx_cannot_keep_is_named(scheduling: dict[str, Any], problem: str) -> None:
    found = problems_of(upstream_job(scheduling))
    assert any(problem in p for p in found), found


def test_annotations_that_disagree_with_spec_scheduling_are_an_error_and_agreeing_ones_are_fine() -> None:
    job = upstream_job({"schedulingPolicy": {"gang": {"minCount": 4}}})
    job["metadata"]["annotations"] = {"phalanx.dev/policy": "basic"}
    assert problems_of(job) == [
        "metadata.annotations[phalanx.dev/policy]: 'basic' disagrees with spec.scheduling, which asks for "
        "'gang'; remove the annotation or the field"
    ]
    job["metadata"]["annotations"] = {"phalanx.dev/min-count": "4", "phalanx.dev/policy": "gang"}
    assert problems_of(job) == []


REFUSED = "Phalanx's webhook would refuse the converted Job: "


def test_what_the_webhook_refuses_in_the_whole_converted_job_is_an_error() -> None:
    """Not only the annotations converted from spec.scheduling: the whole Job, as gate_job checks it (the
    review's cases: a misspelt annotation kept, a mode without a key, a gang's claims and nodeName)."""
    gang = {"schedulingPolicy": {"gang": {}}}
    misspelt = upstream_job(gang)
    misspelt["metadata"]["annotations"] = {"phalanx.dev/topolgy-key": "x"}
    assert problems_of(misspelt) == [
        REFUSED + "metadata.annotations[phalanx.dev/topolgy-key]: unknown Phalanx annotation; did you mean "
        "phalanx.dev/topology-key?"
    ]
    modeless = upstream_job({"schedulingPolicy": {"basic": {}}})
    modeless["metadata"]["annotations"] = {"phalanx.dev/topology-mode": "preferred"}
    assert problems_of(modeless) == [
        REFUSED + "metadata.annotations[phalanx.dev/topology-mode]: needs phalanx.dev/topology-key: it says "
        "how strictly that key holds"
    ]
    claims = upstream_job(gang)
    claims["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    (found,) = problems_of(claims)
    assert found.startswith(REFUSED + "spec.template.spec.resourceClaims: Phalanx does not model DRA")
    pinned = upstream_job(gang)
    pinned["spec"]["template"]["spec"]["nodeName"] = "n1"
    assert problems_of(pinned) == [
        REFUSED + "spec.template.spec.nodeName: must not be set for a gang: pods bound by hand cannot be "
        "gang-admitted; remove it, or set phalanx.dev/policy: basic"
    ]
    keyed_template = upstream_job(gang)
    keyed_template["spec"]["template"]["metadata"] = {"annotations": {"phalanx.dev/topology-key": NB}}
    (found,) = problems_of(keyed_template)
    assert found.startswith(
        REFUSED + "spec.template.metadata.annotations[phalanx.dev/topology-key]: Phalanx reads its keys"
    )
    tas = upstream_job(gang)
    tas["spec"]["template"]["metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": NB}}
    (found,) = problems_of(tas)
    assert found.startswith(REFUSED + "spec.template.metadata.annotations[kueue.x-k8s.io/podset-required")
    # A basic Job may have claims and a node: the webhook lets them through, and so does convert.
    basic = upstream_job({"schedulingPolicy": {"basic": {}}})
    basic["spec"]["template"]["spec"].update(nodeName="n1", resourceClaims=[{"name": "gpu"}])
    assert problems_of(basic) == []


def test_a_cronjobs_refusal_names_the_field_inside_its_job_template() -> None:
    job = upstream_job({"schedulingPolicy": {"gang": {}}})
    job["spec"]["template"]["spec"]["nodeName"] = "n1"
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "cj"},
        "spec": {
            "schedule": "* * * * *",
            "jobTemplate": {
                "metadata": {"annotations": {"phalanx.dev/topolgy-key": "x"}},
                "spec": job["spec"],
            },
        },
    }
    assert problems_of(cron) == [
        REFUSED + "spec.jobTemplate.metadata.annotations[phalanx.dev/topolgy-key]: unknown Phalanx "
        "annotation; did you mean phalanx.dev/topology-key?"
    ]
    del cron["spec"]["jobTemplate"]["metadata"]
    (found,) = problems_of(cron)
    assert found.startswith(REFUSED + "spec.jobTemplate.spec.template.spec.nodeName: must not be set")


def test_a_gangs_other_scheduler_is_a_warning_the_webhook_refuses_it_by_default() -> None:
    job = upstream_job({"schedulingPolicy": {"gang": {}}})
    job["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    new, done, problems, warnings = convert_object(job)
    assert (done, problems) == (["Job j"], [])
    (warning,) = warnings
    assert warning.startswith(
        "Phalanx's webhook refuses this gang unless it runs with --scheduler-names listing that scheduler "
        "(the default is default-scheduler): spec.template.spec.schedulerName: 'volcano' is not a scheduler"
    )
    assert new["metadata"]["labels"] == {"phalanx.dev/managed": "true"}


@pytest.mark.parametrize("name", ["c1", "c5", "c6", "c7"])
def test_the_command_writes_nothing_for_a_job_the_webhook_refuses(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bodies = {
        "c1": ({"phalanx.dev/topolgy-key": "x"}, {}),
        "c5": ({"phalanx.dev/topology-mode": "preferred"}, {}),
        "c6": ({}, {"nodeName": "n1"}),
        "c7": ({}, {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}),
    }
    annotations, pod = bodies[name]
    job = upstream_job({"schedulingPolicy": {"basic": {}} if name == "c5" else {"gang": {}}})
    job["metadata"]["annotations"] = annotations
    job["spec"]["template"]["spec"].update(pod)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["convert", "-f", str(path)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"phalanx convert: {path}: document 1 (Job j): {REFUSED}")


def test_every_problem_of_every_document_is_reported_and_nothing_is_written() -> None:
    bad = upstream_job({"schedulingPolicy": {"gang": {"minCount": 0}}, "resourceClaims": []})
    source = yaml.safe_dump(bad) + "---\n" + article("slice-pod.yaml")
    with pytest.raises(ConvertError) as caught:
        convert_text(source, "in.yaml")
    assert len(caught.value.problems) == 3
    assert all(p.startswith("in.yaml: document ") for p in caught.value.problems)


# ---------------------------------------------------------------------- a round trip for every policy


@st.composite
def policies(draw: st.DrawFn) -> JobPolicy:
    parallelism = draw(st.integers(1, 16))
    if draw(st.booleans()):
        return JobPolicy(policy="basic", min_count=None, parallelism=parallelism)
    return JobPolicy(
        policy="gang",
        min_count=draw(st.integers(1, parallelism)),
        topology_key=draw(st.sampled_from([None, NB, LB, "topology.kubernetes.io/zone"])),
        disruption_mode=draw(st.sampled_from(["single", "all"])),
        parallelism=parallelism,
    )


@given(policies())
def test_converting_the_upstream_rendering_of_a_policy_gives_the_policy_back(policy: JobPolicy) -> None:
    source = yaml.safe_dump(upstream_job(upstream_scheduling(policy), parallelism=policy.parallelism))
    (after,) = docs(convert_text(source).text)
    assert parse_job_policy(after) == policy
    assert "scheduling" not in after["spec"]


# ---------------------------------------------------------------------- the command


def test_the_command_reads_files_and_stdin_and_writes_yaml(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["convert", "-f", str(ARTICLE / "gang-4.yaml"), "-f", str(ARTICLE / "plain-4.yaml")]) == 0
    out = capsys.readouterr().out
    assert [d["metadata"]["name"] for d in docs(out)] == ["gang-4", "plain-4"]
    assert out.endswith(article("plain-4.yaml"))

    monkeypatch.setattr("sys.stdin", io.StringIO(article("local-2.yaml")))
    assert main(["convert", "-f", "-"]) == 0
    (after,) = docs(capsys.readouterr().out)
    assert after["metadata"]["labels"] == {"phalanx.dev/managed": "true"}


def test_the_command_fails_with_every_problem_on_stderr_and_nothing_on_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["convert", "-f", str(ARTICLE / "slice-pod.yaml")]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("phalanx convert: ")
    assert "spec.schedulingGroup: not supported" in captured.err

    assert main(["convert", "-f", str(tmp_path / "missing.yaml")]) == 1
    assert "No such file" in capsys.readouterr().err

    assert main(["convert", "-f", str(ARTICLE / "slices.yaml")]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("phalanx convert: warning: ") == 2
    assert captured.out == article("slices.yaml")
