"""A platform adds or overrides runtimes in a file given to `mlgate operator --runtimes`, not in code; a file that
does not fit is an error at its file, line and field, without a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mlgate_reconciler.command import operator
from mlgate_reconciler.desired_inference import desired_inference_children, inference_problem
from mlgate_reconciler.runtimes import RuntimesError, active_runtimes, load_runtimes, use_runtimes

VLLM = """\
runtimes:
  vllm:
    image: vllm/vllm-openai:v0.6.3
    args: ["--model=/mnt/models", "--served-model-name={{.Name}}", --port=8080]
    httpPort: 8080
    modelDir: /mnt/models
    readinessProbe:
      httpGet: {path: /health, port: 8080}
"""


@pytest.fixture(autouse=True)
def shipped_catalog() -> Iterator[None]:
    yield
    use_runtimes(None)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "runtimes.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def isvc(runtime: str) -> dict[str, Any]:
    return {"apiVersion": "mlgate.dev/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2"},
            "spec": {"modelUri": "s3://models/sent/v3", "runtime": runtime}}


def test_an_override_replaces_only_the_fields_it_names(tmp_path):
    catalog = load_runtimes(write(tmp_path, "runtimes:\n  triton:\n    image: registry.local/triton:24.01-py3\n"))
    triton, shipped = catalog.runtimes["triton"], load_runtimes().runtimes["triton"]
    assert triton.image == "registry.local/triton:24.01-py3"
    assert (triton.args, triton.http_port, triton.readiness_probe) == (
        shipped.args, shipped.http_port, shipped.readiness_probe)


def test_a_new_runtime_is_added_by_name_and_served_with_its_own_port_and_args(tmp_path):
    catalog = load_runtimes(write(tmp_path, VLLM))
    assert sorted(catalog.runtimes) == ["tensorflow-serving", "torchserve", "triton", "vllm"]
    assert inference_problem(isvc("vllm"), catalog) is None
    children = {c["kind"]: c for c in desired_inference_children(isvc("vllm"), catalog)}
    main = children["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert main["args"] == ["--model=/mnt/models", "--served-model-name=sent", "--port=8080"]
    assert children["Service"]["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8080,
                                                     "protocol": "TCP"}]  # no grpcPort: no grpc port


def test_the_storage_initializer_image_is_configured_in_the_same_file(tmp_path):
    catalog = load_runtimes(write(tmp_path, "storageInitializer:\n  image: registry.local/init:v1\n"))
    (init,) = desired_inference_children(isvc("triton"), catalog)[0]["spec"]["template"]["spec"]["initContainers"]
    assert init["image"] == "registry.local/init:v1"
    assert init["resources"] == load_runtimes().storage_initializer.resources


def test_the_installed_catalog_is_the_one_every_pass_reads(tmp_path):
    use_runtimes(load_runtimes(write(tmp_path, VLLM)))
    assert inference_problem(isvc("vllm")) is None
    use_runtimes(None)
    assert inference_problem(isvc("vllm")) is not None
    assert sorted(active_runtimes().runtimes) == ["tensorflow-serving", "torchserve", "triton"]


@pytest.mark.parametrize(("text", "line", "field", "problem"), [
    ("runtimes:\n  triton: [\n", 3, "", "not valid YAML"),
    ("runtimes:\n  triton:\n    httpPort: eighty\n", 3, "runtimes.triton.httpPort", "valid integer"),
    ("runtimes:\n  vllm:\n    image: vllm/vllm-openai:v0.6.3\n", 2, "runtimes.vllm.httpPort", "Field required"),
    ("runtimes:\n  triton:\n    imag: x\n", 3, "runtimes.triton.imag", "Extra inputs are not permitted"),
    ("runtimes:\n  Big_Name:\n    image: x\n", 2, "runtimes.Big_Name", "DNS label"),
    ("\nruntime:\n  triton: {}\n", 2, "runtime", "unknown section"),
    ("runtimes:\n  triton: 7\n", 2, "runtimes.triton", "must be a mapping"),
    ("- triton\n", 1, "", "must be a mapping"),
])
def test_a_malformed_runtimes_file_is_an_error_at_its_line_and_field(tmp_path, text, line, field, problem):
    path = write(tmp_path, text)
    with pytest.raises(RuntimesError) as raised:
        load_runtimes(path)
    error = raised.value
    assert (error.source, error.line, error.field) == (str(path), line, field)
    assert problem in error.problem


def test_the_operator_command_refuses_a_malformed_runtimes_file_with_exit_2_and_no_traceback(tmp_path):
    path = write(tmp_path, "runtimes:\n  triton:\n    httpPort: eighty\n")
    result = CliRunner().invoke(operator, ["--runtimes", str(path), "--once"])
    assert result.exit_code == 2
    assert f"mlgate operator: {path}:3: runtimes.triton.httpPort: " in result.output
    assert "Traceback" not in result.output


def test_the_runtimes_file_can_come_from_the_environment(tmp_path):
    path = write(tmp_path, "runtimes:\n  triton: 7\n")
    result = CliRunner().invoke(operator, ["--once"], env={"MLGATE_RUNTIMES": str(path)})
    assert (result.exit_code, f"{path}:2: runtimes.triton: must be a mapping" in result.output) == (2, True)
