"""Policy files load through the same document splitter and loader as manifests: same exact lines,
same refusal of repeated keys, and dates that stay text."""

from mlgate.loading.policies import load_policy_text

# One minimal valid policy; the rule's parameter is on line 9.
POLICY = (
    "apiVersion: mlgate.dev/v1alpha1\n"
    "kind: ClusterMLPolicy\n"
    "metadata:\n"
    "  name: gpu\n"
    "spec:\n"
    "  rules:\n"
    "    - rule: gpu.max\n"
    "      params:\n"
    "        perContainer: 8\n"
)


def errors(text: str) -> list[str]:
    policies, problems = load_policy_text(text, "p.yaml")
    assert not (policies and problems)
    return [str(problem) for problem in problems]


def test_the_minimal_policy_loads() -> None:
    assert errors(POLICY) == []


def test_after_a_commented_separator_an_error_is_on_its_field_line() -> None:
    text = "--- # gpu policy\n" + POLICY.replace("perContainer", "perContainr")
    assert errors(text) == ["p.yaml:10: spec.rules[0].params.perContainr: unknown field"]


def test_after_a_tagged_separator_an_error_is_on_its_field_line() -> None:
    text = "--- !!map\n" + POLICY.replace("perContainer", "perContainr")
    assert errors(text) == ["p.yaml:10: spec.rules[0].params.perContainr: unknown field"]


def test_a_repeated_parameter_is_refused_at_its_second_line() -> None:
    text = POLICY + "        perContainer: 4\n"
    assert errors(text) == ["p.yaml:10: invalid YAML: duplicate key 'perContainer' (first on line 9)"]


def test_a_date_as_a_policy_name_stays_the_text_as_written() -> None:
    policies, problems = load_policy_text(POLICY.replace("name: gpu", "name: 2024-01-01"), "p.yaml")
    assert problems == []
    assert [policy.name for policy in policies] == ["2024-01-01"]
