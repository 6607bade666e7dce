"""The watch loops against a stand-in API server over TLS, with a kubeconfig, as `--kubeconfig` runs them."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import yaml
from webhook_load import wait_until

from mlgate_certs.throwaway import throwaway_pki
from mlgate_webhook.facts_cache import WatchedFacts
from mlgate_webhook.kube import FACTS, start_watches
from mlgate_webhook.policy_store import ClusterPolicySource, PolicyStore

NODE = {"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                     "resourceVersion": "5"},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "images": [{"names": ["x"]}]}}
POLICY = {"apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy",
          "metadata": {"name": "from-cluster", "resourceVersion": "6"},
          "spec": {"rules": [{"rule": "gpu.max", "params": {"perContainer": 4}}]}}


class FakeAPIServer(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, dict, str]]] = []

    def do_GET(self):
        url = urlparse(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        self.seen.append((url.path, query, self.headers.get("Authorization", "")))
        items = {FACTS["Node"]: [NODE], "/apis/mlgate.dev/v1alpha1/clustermlpolicies": [POLICY]}
        if url.path not in {*FACTS.values(), "/apis/mlgate.dev/v1alpha1/clustermlpolicies"}:
            return self._json(404, {"kind": "Status", "code": 404})
        if query.get("watch") != "true":
            return self._json(200, {"metadata": {"resourceVersion": "7"}, "items": items.get(url.path, [])})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if url.path == FACTS["Namespace"]:
            event = {"type": "ADDED", "object": {"metadata": {"name": "ml", "labels": {"team": "a"},
                                                              "resourceVersion": "8"}}}
            self.wfile.write((json.dumps(event) + "\n").encode())
            self.wfile.flush()
        threading.Event().wait(0.2)  # then the server ends the watch, as timeoutSeconds would

    def _json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_facts_and_cluster_policies_arrive_through_list_and_watch(tmp_path):
    pki = throwaway_pki(tmp_path)
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAPIServer)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": f"https://127.0.0.1:{server.server_port}",
                                                  "certificate-authority": str(pki.ca_cert)}}],
        "users": [{"name": "test", "user": {"token": "s3cret"}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
    }))
    facts, policies = WatchedFacts(), ClusterPolicySource()
    store = PolicyStore([policies])
    stop = start_watches(facts, policies, kubeconfig=str(kubeconfig), in_cluster=False)
    try:
        wait_until(lambda: facts.known and facts.namespace_labels("ml") == {"team": "a"}, what="the facts")
        def policy_in_force() -> bool:  # each kind lists on its own: a refresh may come before the policy did
            store.refresh()
            return store.current is not None and [p.key for p in store.current.policies] == ["from-cluster"]

        wait_until(policy_in_force, what="the cluster policy")
    finally:
        stop.set()
        server.shutdown()
    (node,) = facts.nodes()
    assert node["status"] == {"allocatable": {"nvidia.com/gpu": "8"}}
    assert [p.key for p in store.current.policies] == ["from-cluster"]
    watches = [(path, q) for path, q, _ in FakeAPIServer.seen if q.get("watch") == "true"]
    assert (FACTS["Namespace"], {"watch": "true", "resourceVersion": "7", "allowWatchBookmarks": "true",
                                 "timeoutSeconds": "300"}) in watches
    assert {auth for _, _, auth in FakeAPIServer.seen} == {"Bearer s3cret"}
