"""Manifests from bytes to Documents: each line number is where the field is in the file, whatever
the separator, byte order mark or format, and the values are what Kubernetes would read."""

import io
import json

import pytest
import yaml

from mlgate.loading.documents import Document, parse_stream

# One minimal manifest; hostPID is on line 6.
POD = (
    "apiVersion: v1\n"
    "kind: Pod\n"
    "metadata:\n"
    "  name: trainer\n"
    "spec:\n"
    "  hostPID: true\n"
    "  containers: [{name: main, image: x}]\n"
)
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"  # three lines
POD_JSON = json.dumps(yaml.safe_load(POD), indent=2)
BOM = b"\xef\xbb\xbf"


def documents(text: str | bytes, source: str = "pods.yaml") -> list[Document]:
    return list(parse_stream(io.BytesIO(text.encode() if isinstance(text, str) else text), source))


def only(text: str | bytes, source: str = "pods.yaml") -> Document:
    (document,) = documents(text, source)
    assert document.error is None, document.error
    return document


def line_in(text: str, needle: str) -> int:
    return next(number for number, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_field_is_reported_on_its_own_line() -> None:
    assert only(POD).line_of("/spec/hostPID") == 6


SEPARATORS = {
    "bare": "---\n",
    "with a comment": "--- # the pod\n",
    "with a tab and a comment": "---\t# the pod\n",
    "with a tag": "--- !!map\n",
    "with a tag and a comment": "--- !!map # the pod\n",
}


@pytest.mark.parametrize("separator", SEPARATORS.values(), ids=SEPARATORS.keys())
def test_after_a_separator_a_field_is_on_its_own_line(separator: str) -> None:
    _, pod = documents(CONFIGMAP + separator + POD)
    assert pod.error is None, pod.error
    assert pod.line_of("/spec/hostPID") == 3 + 1 + 6


def test_a_separator_with_only_a_comment_after_it_is_not_the_first_line_of_the_document() -> None:
    _, pod = documents(CONFIGMAP + "--- # the pod\n" + POD)
    assert pod.line == 5


def test_a_document_on_its_separator_line_starts_there() -> None:
    flow = "--- {apiVersion: v1, kind: Pod, metadata: {name: t},\n  spec: {hostPID: true}}\n"
    _, pod = documents(CONFIGMAP + flow)
    assert pod.error is None, pod.error
    assert (pod.line, pod.line_of("/metadata/name"), pod.line_of("/spec/hostPID")) == (4, 4, 5)


def test_a_syntax_error_on_a_separator_line_has_its_own_line_and_column() -> None:
    separator = "--- {apiVersion: v1, kind: ]}\n"
    _, broken = documents(CONFIGMAP + separator)
    assert broken.error is not None
    assert broken.error.startswith(f"column {separator.index(']') + 1}: invalid YAML: ")
    assert broken.error_line == CONFIGMAP.count("\n") + 1


def test_a_syntax_error_after_a_commented_separator_has_its_own_line() -> None:
    _, broken = documents(CONFIGMAP + "--- # the pod\n" + POD.replace("  name: trainer", "  name: [trainer"))
    assert broken.error is not None and broken.error.startswith("column ")
    assert broken.error_line == 9


def test_an_unquoted_date_stays_the_text_as_written() -> None:
    pod = only(POD.replace("name: trainer", "name: 2024-01-01"))
    assert pod.data is not None
    assert pod.data["metadata"]["name"] == "2024-01-01"
    json.dumps(pod.data)  # the JSON report must be able to write it


def test_a_repeated_key_is_an_error_at_its_second_line_naming_the_first() -> None:
    (pod,) = documents(POD + "  hostPID: false\n")
    assert (pod.data, pod.error) == (None, "column 3: invalid YAML: duplicate key 'hostPID' (first on line 6)")


def test_a_repeated_key_in_a_later_document_is_reported_with_file_lines() -> None:
    _, pod = documents(CONFIGMAP + "--- # the pod\n" + POD.replace("kind: Pod\n", "kind: Pod\nkind: Pod\n"))
    assert pod.error == "column 1: invalid YAML: duplicate key 'kind' (first on line 6)"


def test_json_fields_are_on_their_own_lines() -> None:
    pod = only(POD_JSON, "pod.json")
    assert pod.line_of("/spec/hostPID") == line_in(POD_JSON, '"hostPID"')
    assert pod.line_of("/spec/containers/0/image") == line_in(POD_JSON, '"image"')


def test_json_from_a_file_and_from_stdin_get_the_same_lines() -> None:
    from_file, from_stdin = only(POD_JSON, "pod.json"), only(POD_JSON, "<stdin>")
    for ptr in ("/kind", "/spec/hostPID", "/spec/containers/0/name"):
        assert from_file.line_of(ptr) == from_stdin.line_of(ptr)


@pytest.mark.parametrize("source", ["pod.json", "pod.yaml"])
def test_a_byte_order_mark_is_accepted(source: str) -> None:
    text = POD_JSON if source.endswith(".json") else POD
    pod = only(BOM + text.encode(), source)
    assert pod.line_of("/spec/hostPID") == line_in(text, "hostPID")


JSON_ONLY = {
    "escaped slash": r'"x\/y"',
    "unicode escape": r'"\u00e9"',
    "surrogate pair": r'"\ud83d\ude00"',
    "exponent without a sign": "1e5",
    "exponent with a dot": "1.0E+3",
    "negative zero": "-0",
    "tab before a value": '\t"x"',
}


@pytest.mark.parametrize("value", JSON_ONLY.values(), ids=JSON_ONLY.keys())
def test_json_values_are_read_as_json_reads_them_and_keep_their_lines(value: str) -> None:
    text = POD_JSON.replace('"name": "trainer"', f'"name": "trainer",\n    "uid": {value}')
    pod = only(text, "pod.json")
    assert pod.data == json.loads(text)
    assert pod.line_of("/spec/hostPID") == line_in(text, '"hostPID"')


def test_json_a_repeated_key_keeps_the_last_value_and_its_line_as_kubectl_does() -> None:
    text = POD_JSON.replace('"hostPID": true', '"hostPID": false,\n    "hostPID": true')
    pod = only(text, "pod.json")
    assert pod.data is not None and pod.data["spec"]["hostPID"] is True
    assert pod.line_of("/spec/hostPID") == line_in(text, '"hostPID": true')


def test_a_json_syntax_error_has_its_own_line() -> None:
    text = POD_JSON.replace('"hostPID": true', '"hostPID": tru')
    (pod,) = documents(text, "pod.json")
    row = text.splitlines()[line_in(text, "tru") - 1]
    assert (pod.error_line, pod.error) == (line_in(text, "tru"), f"column {row.index('tru') + 1}: invalid JSON: "
                                                                  "Expecting value")


def test_json_yaml_cannot_read_still_loads_with_its_fields_at_the_document_line() -> None:
    text = POD_JSON.replace('"name": "trainer"', '"name": "trainer\x7f"')
    pod = only(text, "pod.json")
    assert pod.data == json.loads(text)
    assert pod.line_of("/spec/hostPID") == 1


def laughs(levels: int) -> str:
    """A pod whose annotations nest `levels` of nine aliases each ("billion laughs")."""
    rows = ['    l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"    l{n}: &l{n} [{','.join([f'*l{n - 1}'] * 9)}]" for n in range(1, levels)]
    return POD.replace("  name: trainer\n", "  name: trainer\n  annotations:\n" + "\n".join(rows) + "\n")


def test_aliases_that_expand_past_the_limit_are_refused_before_anything_walks_them():
    (doc,) = documents(laughs(9))  # 9**9 strings once expanded
    assert doc.data is None and "excessive aliasing" in doc.error


def test_a_modest_use_of_aliases_still_loads():
    (doc,) = documents(laughs(3))
    assert doc.error is None and len(doc.data["metadata"]["annotations"]["l2"]) == 9


def test_an_alias_inside_its_own_anchor_is_refused():
    (doc,) = documents(POD.replace("  name: trainer\n", "  name: trainer\n  labels: &loop {self: *loop}\n"))
    assert doc.data is None and "refers to a value that contains it" in doc.error
