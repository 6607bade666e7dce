"""`mlgate validate` refuses the policy documents the webhook refuses at `kubectl apply`, side by side: each
fixture of tests/cli/policy-documents is applied (server dry run) to the real API server with the webhook
registered, and given to `mlgate validate`. What the webhook refuses, mlgate refuses with the same words, at the
field; what it takes, mlgate takes."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import yaml
from control_plane import REPO, ControlPlane
from e2e_webhook import WebhookProcess

pytestmark = pytest.mark.e2e

FIXTURES = REPO / "tests" / "cli" / "policy-documents"
NAMES = sorted(p.name for p in FIXTURES.glob("*.yaml"))


def mlgate(name: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "mlgate", "validate", "-o", "json", str(FIXTURES / name)],
                          capture_output=True, text=True, cwd=REPO, check=False)
    [record] = json.loads(done.stdout)["results"]
    return {"exit": done.returncode, **record}


@pytest.mark.parametrize("name", NAMES)
def test_the_webhook_and_mlgate_agree_on_a_policy_document(
        name: str, webhook: WebhookProcess, cluster: ControlPlane) -> None:
    obj = yaml.safe_load((FIXTURES / name).read_text(encoding="utf-8"))
    namespace = obj["metadata"].get("namespace")
    if namespace:
        cluster.kubectl("create", "namespace", namespace)  # already there after the first case: fine
    answer = cluster.kubectl("apply", "--dry-run=server", "-f", str(FIXTURES / name))
    ours = mlgate(name)
    if name == "valid-policy.yaml":
        assert answer.ok, answer.output
        assert ours["exit"] == 0 and ours["violations"] == []
        return
    assert not answer.ok, f"the cluster took {name}"
    assert ours["exit"] == 1 and ours["status"] == "denied"
    loader = [v for v in ours["violations"] if v["policy"] == "mlgate"]
    assert loader, ours["violations"]
    if "policies.validate.mlgate.dev" in answer.stderr:  # refused by the webhook: the loader's words, each one
        for violation in loader:
            assert violation["detail"] in answer.stderr, (violation, answer.stderr)
    else:  # refused by the CRD's schema first, before the webhook is asked: mlgate's CRD check says so too
        assert any(v["policy"] == "crd" for v in ours["violations"]), (answer.stderr, ours["violations"])
