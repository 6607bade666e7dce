"""The loader builds plain documents itself (fast path) and leaves the rest to PyYAML: both must give what
yaml.safe_load gives, except that timestamps stay text and repeated keys are refused, and the node tree must
still carry line numbers."""

import json

import pytest
import yaml

from mlgate.loading.linemap import NotFinite, compose_node, compose_with_lines, line_at, load_with_node

DOCUMENTS = {
    "plain": "kind: Pod\nspec:\n  containers:\n  - name: a\n    image: x:1\n",
    "scalars": "a: 1\nb: 1.5\nc: -2.5e+3\nd: true\ne: null\nf: ~\ng: 0o17\nh: 0x1F\ni: '1'\nk: yes\n",
    "non-string keys": "2: two\ntrue: yes\nnull: none\n",
    "anchors and merge": "base: &b {x: 1, y: 2}\nderived:\n  <<: *b\n  y: 3\n",
    "explicit tags": "s: !!str 123\nb: !!binary aGVsbG8=\nset: !!set {a, b}\n",
    "omap": "o: !!omap [a: 1, b: 2]\n",
    "nested": "a: [[1, [2, {b: [3]}]], {}]\n",
    "empty values": "a:\nb: []\nc: {}\nd: ''\n",
}


@pytest.mark.parametrize("text", DOCUMENTS.values(), ids=DOCUMENTS.keys())
def test_a_document_loads_exactly_as_pyyaml_safe_load_builds_it(text: str) -> None:
    value, node = load_with_node(text)
    assert value == yaml.safe_load(text)
    assert node is not None


def test_bytes_and_text_load_alike() -> None:
    text = DOCUMENTS["anchors and merge"]
    assert load_with_node(text.encode())[0] == load_with_node(text)[0]


TIMESTAMPS = {
    "date": ("d: 2001-12-14\n", {"d": "2001-12-14"}),
    "datetime": ("t: 2001-12-14t21:59:43.10-05:00\n", {"t": "2001-12-14t21:59:43.10-05:00"}),
    "date with an anchor (PyYAML's constructor)": ("d: &a 2001-12-14\ne: *a\n", {"d": "2001-12-14", "e": "2001-12-14"}),
    "explicit tag": ("d: !!timestamp 2001-12-14\n", {"d": "2001-12-14"}),
    "key": ("2001-12-14: d\n", {"2001-12-14": "d"}),
}


@pytest.mark.parametrize(("text", "expected"), TIMESTAMPS.values(), ids=TIMESTAMPS.keys())
def test_a_timestamp_stays_the_text_as_written_as_kubernetes_reads_it(text: str, expected: object) -> None:
    value, _ = load_with_node(text)
    assert value == expected
    assert json.loads(json.dumps(value)) == value


def test_pyyaml_own_loaders_still_build_dates() -> None:
    load_with_node("d: 2001-12-14\n")
    assert not isinstance(yaml.safe_load("d: 2001-12-14\n")["d"], str)


# `k` on the second line and again on the fourth
DUPLICATES = {
    "top level": "z: 0\nk: 1\nb: 2\nk: 3\n",
    "nested": "a:\n  k: 1\n  c: 2\n  k: 3\n",
    "in a sequence item": "a:\n- k: 1\n  c: 2\n  k: 3\n",
    "flow mapping": "a: 1\nb: {k: 1,\n  c: 2,\n  k: 2}\n",
    "quoted and plain": "z: 0\nk: 1\nb: 2\n'k': 3\n",
    "with an anchor (PyYAML's constructor)": "z: &n 0\nk: 1\nb: 2\nk: 3\n",
    "beside a merge key (PyYAML's constructor)": "z: 0\nk: {x: 1}\n<<: {y: 1}\nk: 3\n",
}


@pytest.mark.parametrize("text", DUPLICATES.values(), ids=DUPLICATES.keys())
def test_a_repeated_key_is_refused_at_its_second_line_naming_the_first(text: str) -> None:
    with pytest.raises(yaml.MarkedYAMLError) as raised:
        load_with_node(text, first_line=10)
    assert raised.value.problem == "duplicate key 'k' (first on line 11)"
    assert raised.value.problem_mark is not None
    assert raised.value.problem_mark.line + 10 == 13


def test_a_key_repeated_in_another_mapping_is_no_duplicate() -> None:
    assert load_with_node("a: {x: 1}\nb: {x: 2}\n")[0] == {"a": {"x": 1}, "b": {"x": 2}}


def test_a_key_may_override_a_merged_one() -> None:
    assert load_with_node("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n")[0] == {"base": {"x": 1}, "d": {"x": 2}}


def test_an_overriding_key_gets_its_own_line_not_the_merged_one() -> None:
    _, node = load_with_node("base: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n")
    assert node is not None
    assert line_at(node, "/d/x") == 4


def test_json_composes_to_the_same_lines_with_escapes_libyaml_refuses() -> None:
    node = compose_node('{\n  "a": "\\ud83d\\ude00",\n  "b": "x\\/y"\n}')
    assert node is not None
    assert line_at(node, "/b") == 3


def test_json_yaml_cannot_compose_loses_its_lines_not_its_document() -> None:
    assert compose_node('{"a": "\x7f"}') is None


def test_line_numbers_point_at_the_field() -> None:
    _, lines = compose_with_lines(DOCUMENTS["plain"])
    assert lines["/spec/containers/0/image"] == 5


def test_a_number_that_is_not_finite_is_refused_where_it_stands() -> None:
    with pytest.raises(NotFinite) as refused:
        load_with_node("a: 1\nb: .nan\n")
    assert refused.value.problem == ".nan is not a finite number, which the API server refuses"
    assert refused.value.problem_mark is not None and refused.value.problem_mark.line == 1


@pytest.mark.parametrize(("text", "problem"), [
    ("replicas: 1e400\n", "1e400 is not a finite number, which the API server refuses"),
    ("replicas: -1E+400\n", "-1E+400 is not a finite number, which the API server refuses"),
    ("replicas: 9223372036854775808\n",
     "9223372036854775808 is out of the range of a 64-bit integer, which the API server refuses"),
])
def test_a_number_out_of_range_is_refused_where_it_stands(text: str, problem: str) -> None:
    with pytest.raises(NotFinite) as refused:
        load_with_node("a: 1\n" + text)
    assert refused.value.problem == problem
    assert refused.value.problem_mark is not None and refused.value.problem_mark.line == 1


def test_an_exponent_without_a_dot_is_a_number_as_the_api_server_reads_it() -> None:
    value, _ = compose_with_lines("replicas: 1e3\nlimit: -2E-1\nbig: 9223372036854775807\nname: 1e3x\n")
    assert value == {"replicas": 1000.0, "limit": -0.2, "big": 2**63 - 1, "name": "1e3x"}


def test_what_mlgate_writes_it_and_kubectl_read_back_with_the_same_types() -> None:
    import io

    from mlgate.loading.documents import dump_yaml

    written = io.StringIO()
    dump_yaml([{"lr": "3e-5", "big": "1E10", "rate": 3e-05, "name": "run-1"}], written)
    assert '"3e-5"' in written.getvalue() or "'3e-5'" in written.getvalue()  # go-yaml would read 3e-5 as a float
    value, _ = compose_with_lines(written.getvalue().split("---", 1)[1])
    assert value == {"lr": "3e-5", "big": "1E10", "rate": 3e-05, "name": "run-1"}
