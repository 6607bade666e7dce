"""Policy hot reload under continuous requests: a new set takes over, a broken one is refused whole."""

from __future__ import annotations

import os

from builders import change, pytorchjob
from webhook_harness import client, start_webhook
from webhook_load import Load, wait_until
from webhook_reviews import encode, review

GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/{}/nvidia.com~1gpu"
SIX_GPUS = change(change(pytorchjob(), GPU.format("limits"), 6), GPU.format("requests"), 6)
BODY = encode(review(SIX_GPUS))
HEADERS = {"content-type": "application/json"}


def verdict(webhook, tls) -> bool:
    with client(webhook, tls) as c:
        return bool(c.post("/validate", content=BODY, headers=HEADERS).json()["response"]["allowed"])


def set_gpu_limit(policy_dir, limit: int) -> None:
    path = policy_dir / "gpu.yaml"
    text = path.read_text()
    current = next(line for line in text.splitlines() if "perContainer:" in line)
    path.write_text(text.replace(current, current.split(":")[0] + f": {limit}"))


def metric_value(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return float(line.split()[1])


def test_a_new_policy_set_takes_over_and_a_broken_one_is_refused_under_load(policy_dir, tls_files):
    webhook = start_webhook(tls_files, [policy_dir])
    load = Load(lambda: client(webhook, tls_files),
                lambda c: c.post("/validate", content=BODY, headers=HEADERS), threads=2).start()
    try:
        assert verdict(webhook, tls_files) is True  # 6 GPUs under the limit of 8
        set_gpu_limit(policy_dir, 4)
        wait_until(lambda: verdict(webhook, tls_files) is False, what="the lower limit to apply")
        good_generation = webhook.store.current.generation

        (policy_dir / "zz-broken.yaml").write_text("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\n"
                                                  "metadata: {name: broken}\nspec:\n  rules:\n    - rule: gpu.nope\n")
        set_gpu_limit(policy_dir, 8)  # in the same, broken set: must not apply either
        wait_until(lambda: webhook.store.errors != [], what="the broken set to be refused")
        assert webhook.store.current.generation == good_generation
        assert any("zz-broken.yaml:6: spec.rules[0].rule: unknown rule 'gpu.nope'" in e for e in webhook.store.errors)
        for _ in range(5):
            assert verdict(webhook, tls_files) is False  # the last good set (limit 4) is still in force
        with client(webhook, tls_files) as c:
            ready = c.get("/readyz")
            metrics = c.get("/metrics").text
        assert ready.status_code == 200
        assert "unknown rule 'gpu.nope'" in ready.json()["policies"]["lastError"][0]
        # the broken file and the edit beside it may be seen in one poll or in two: one or two refusals
        assert metric_value(metrics, "mlgate_policy_reload_errors_total") in (1.0, 2.0)
        assert "mlgate_policy_last_reload_ok 0.0" in metrics

        os.remove(policy_dir / "zz-broken.yaml")
        wait_until(lambda: verdict(webhook, tls_files) is True, what="the repaired set to apply")
        assert webhook.store.current.generation == good_generation + 1
        assert webhook.store.errors == []
    finally:
        load.stop()
        webhook.stop()
    assert load.failures == []
    assert len(load.outcomes) >= 20
    allowed = [o.json()["response"]["allowed"] for o in load.outcomes if not isinstance(o, Exception)]
    assert True in allowed and False in allowed  # the load saw both sets


def test_a_server_started_with_a_broken_set_is_not_ready_until_it_is_fixed(policy_dir, tls_files):
    (policy_dir / "gpu.yaml").write_text("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata: [\n")
    webhook = start_webhook(tls_files, [policy_dir])
    try:
        with client(webhook, tls_files) as c:
            ready = c.get("/readyz")
            refused = c.post("/validate", content=BODY, headers=HEADERS)
        assert ready.status_code == 503
        assert ready.json()["missing"] == ["no policy set loaded"]
        assert "invalid YAML" in ready.json()["policies"]["lastError"][0]
        assert refused.status_code == 503
        assert "no policy set is loaded yet" in refused.json()["message"]
        (policy_dir / "gpu.yaml").unlink()
        wait_until(lambda: webhook.store.current is not None, what="the repaired set")
        with client(webhook, tls_files) as c:
            assert c.get("/readyz").status_code == 200
    finally:
        webhook.stop()
