"""A credential in a URI (`https://user:TOKEN@host/...`) is never repeated: not in a denial, a warning, the
decision log, the CLI report in any format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mlgate.engine import evaluate
from mlgate.model.facts import NO_FACTS
from mlgate.model.results import Finding, redact
from mlgate_webhook.review import admit, parse_review
from tests.builders import change, decide, trainingjob
from tests.limits.test_linear_evaluation import SHIPPED
from tests.webhook.webhook_reviews import review

SECRET = "ghp_s3cr3tT0ken"
LEAKY = change(trainingjob(), "/spec/checkpoint", {"uri": f"https://ci-bot:{SECRET}@files.example.com/ckpt"})


@pytest.mark.parametrize(("text", "redacted"), [
    ('"https://user:TOKEN@host/x"', '"https://***@host/x"'),
    ("s3://AKIA:secret@bucket/key", "s3://***@bucket/key"),
    ("HTTPS://token@host", "HTTPS://***@host"),
    ("mail ops@example.com about s3://bucket/key", "mail ops@example.com about s3://bucket/key"),
])
def test_the_userinfo_of_every_uri_is_redacted_and_nothing_else(text: str, redacted: str) -> None:
    assert redact(text) == redacted


def test_a_finding_never_holds_the_credential_it_was_given() -> None:
    finding = Finding("/spec/checkpoint/uri", "uri scheme not allowed", f'"https://u:{SECRET}@h/x"', f"not {SECRET}@")
    assert SECRET not in finding.detail and finding.detail == '"https://***@h/x"'


def test_the_checkpoint_rule_quotes_the_uri_without_its_credential() -> None:
    decision = decide(LEAKY, "storage.checkpoint-uri")
    assert not decision.allowed
    assert "https://***@files.example.com/ckpt" in decision.deny_message() and SECRET not in decision.deny_message()


def test_the_webhook_answer_and_its_log_messages_carry_no_credential() -> None:
    body = json.dumps(review(LEAKY)).encode()
    admission = admit(parse_review(body, "application/json"), SHIPPED, NO_FACTS, "validate")
    assert admission.verdict == "denied"
    assert SECRET not in json.dumps(admission.review()) and SECRET not in json.dumps(admission.messages)
    assert evaluate(LEAKY, SHIPPED).results  # and the engine still judged it


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "junit"])
def test_no_cli_report_repeats_the_credential(tmp_path: Path, fmt: str) -> None:
    manifest = tmp_path / "job.json"
    manifest.write_text(json.dumps(LEAKY))
    result = subprocess.run([sys.executable, "-m", "mlgate", "validate", "-o", fmt, str(manifest)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1, result.stderr
    assert "files.example.com" in result.stdout and SECRET not in result.stdout + result.stderr
