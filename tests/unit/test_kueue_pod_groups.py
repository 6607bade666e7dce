"""Kueue plain-pod groups: each Pod is one member of a group whose size one Pod cannot see.

Alone (the webhook), a Pod is checked for what it can get wrong itself: the group label and the total-count
annotation come as a pair, and the count is a positive integer. Given with the other members (the CLI's
input, through `ClusterFacts.pod_group`), the members are judged together.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlgate.loading.peers import with_pod_groups
from mlgate.model.facts import NO_FACTS, StaticFacts
from mlgate.model.results import Outcome
from tests.builders import DELETE, change, decide, pod

GROUP_LABEL = "/metadata/labels/kueue.x-k8s.io~1pod-group-name"
TOTAL = "/metadata/annotations/kueue.x-k8s.io~1pod-group-total-count"
REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "kueue-pod-group.yaml"


def member(total: object = "2", name: str = "trainer-0") -> dict:
    return change(change(change(pod(), GROUP_LABEL, "train"), TOTAL, total), "/metadata/name", name)


def reasons(obj: dict, facts=NO_FACTS) -> list[str]:
    return [f.reason for r in decide(obj, "gang.size", facts=facts).results for f in r.findings]


def test_one_member_of_a_group_of_two_passes_alone():
    assert decide(member(), "gang.size").results[0].outcome is Outcome.PASS


@pytest.mark.parametrize(("obj", "reason"), [
    (change(member(), TOTAL, DELETE), "kueue total count missing"),
    (change(member(), GROUP_LABEL, DELETE), "kueue group name missing"),
    (member(total="0"), "kueue total count not a positive integer"),
    (member(total="two"), "kueue total count not a positive integer"),
    (member(total="²"), "kueue total count not a positive integer"),
])
def test_a_member_alone_is_refused_for_what_it_can_get_wrong_itself(obj: dict, reason: str):
    assert reasons(obj) == [reason]


def test_members_given_together_may_be_fewer_than_the_count():
    facts = StaticFacts.from_objects([member()])
    assert reasons(member(), facts) == []


def test_more_members_than_the_count_are_refused():
    facts = StaticFacts.from_objects([member(name=f"trainer-{i}") for i in range(3)])
    assert reasons(member(), facts) == ["kueue group larger than its count"]


def test_members_that_disagree_on_the_count_are_refused():
    facts = StaticFacts.from_objects([member(), member(total="3", name="trainer-1")])
    assert reasons(member(), facts) == ["kueue total counts differ"]


def test_a_group_in_another_namespace_is_another_group():
    elsewhere = [change(member(name=f"t-{i}"), "/metadata/namespace", "other") for i in range(3)]
    assert reasons(member(), StaticFacts.from_objects(elsewhere)) == []


def test_the_cli_input_gives_the_members_of_kueues_own_example_to_each_other(tmp_path: Path):
    text = REAL.read_text(encoding="utf-8")
    facts = with_pod_groups(NO_FACTS, [str(REAL)], "default")
    assert len(facts.pod_group("default", "sample-group") or []) == 2
    third = tmp_path / "third.yaml"
    third.write_text(text.split("---\n")[1], encoding="utf-8")  # one more Pod of the same group
    crowded = with_pod_groups(NO_FACTS, [str(REAL), str(third)], "default")
    assert len(crowded.pod_group("default", "sample-group") or []) == 3
    one = change(change(member(), GROUP_LABEL, "sample-group"), "/metadata/namespace", "default")
    assert reasons(one, facts) == [] and reasons(one, crowded) == ["kueue group larger than its count"]


def test_input_without_a_group_leaves_the_facts_as_they_were(tmp_path: Path):
    plain = tmp_path / "job.yaml"
    plain.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: []}\n", encoding="utf-8")
    assert with_pod_groups(NO_FACTS, [str(plain)], "default") is NO_FACTS


def test_mlgate_validate_admits_kueues_own_pod_group_and_refuses_a_crowded_one(tmp_path: Path):
    from click.testing import CliRunner

    from mlgate.cli.main import cli

    run = CliRunner().invoke(cli, ["validate", "-o", "json", str(REAL)])
    assert run.exit_code == 0, run.output
    third = tmp_path / "third.yaml"
    third.write_text(REAL.read_text(encoding="utf-8").split("---\n")[1], encoding="utf-8")
    crowded = CliRunner().invoke(cli, ["validate", "-o", "json", str(REAL), str(third)])
    assert crowded.exit_code == 1
    assert crowded.output.count('"reason":"kueue group larger than its count"') == 3
