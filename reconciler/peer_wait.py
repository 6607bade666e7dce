"""An init container that waits until a peer's DNS name resolves, for frameworks whose clients do not retry a lookup.

A pod's name resolves through the job's headless Service once that pod has an address (desired.py:
publishNotReadyAddresses), which can be after a peer has started. Settled per framework against upstream:

- PyTorch: no wait. Since torch 1.12 (pytorch/pytorch#74641, "c10d: retry dns lookup failures") the TCPStore
  client retries a failed getaddrinfo until its connect timeout (torch/csrc/distributed/c10d/socket.cpp
  SocketConnectOp::tryConnect: a gai error sets `retry`), which is torchrun's static rendezvous timeout, 600 s
  (torch/distributed/elastic/rendezvous/static_tcp_rendezvous.py), or init_process_group's. training-operator
  v1.9.0 still gives workers `init-pytorch` (pkg/controller.v1/pytorch/initcontainer.go: `until nslookup
  <master>`) for the older torch it supports; a job on torch before 1.12 brings its own wait.
- XGBoost: wait. xgboost's collective Connect (src/collective/socket.cc) resolves the tracker's host once,
  before its connect retries, and MakeSockAddress stops the process on a failed getaddrinfo (LOG(FATAL)). So a
  worker that starts before the master has an address fails at once; training-operator adds nothing for it.

The wait runs the main container's image and Python (an XGBoost worker's image has one: the tracker and
xgboost.collective are Python), so it resolves with the libc resolver, search domains and registry the worker
uses, under the main container's securityContext. It gives up after WAIT_SECONDS (torchrun's static rendezvous
timeout) and fails the pod, which the reconciler replaces against backoffLimit, rather than hang forever.
"""

from __future__ import annotations

import copy
from typing import Any

from .frameworks import Replica, Topology

__all__ = ["WAITS", "WAIT_CONTAINER", "WAIT_SECONDS", "wait_for_peer"]

WAITS = {"xgboost": ("Worker", "Master")}  # framework -> (role that waits, role whose first pod's name it waits for)
WAIT_CONTAINER = "wait-for-peer"
WAIT_SECONDS = 600
# small, with limits, so a LimitRange or a quota on limits admits the pod
WAIT_RESOURCES = {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}}
_SCRIPT = """\
import socket, sys, time
host, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
while True:
    try:
        socket.getaddrinfo(host, None)
        break
    except socket.gaierror as exc:
        if time.monotonic() > deadline:
            sys.exit(f"{host} did not resolve in {sys.argv[2]} s: {exc}")
        print(f"waiting for {host} to resolve", flush=True)
        time.sleep(2)
"""


def wait_for_peer(topo: Topology, replica: Replica, main: dict[str, Any]) -> dict[str, Any] | None:
    """The init container `replica` needs before its main container starts, or None."""
    waiter, awaited = WAITS.get(topo.framework, ("", ""))
    peers = topo.of(awaited)
    if replica.role != waiter or not peers or not main.get("image"):
        return None
    init: dict[str, Any] = {
        "name": WAIT_CONTAINER,
        "image": main["image"],
        "command": ["python3", "-c", _SCRIPT, topo.host(peers[0]), str(WAIT_SECONDS)],
        "resources": copy.deepcopy(WAIT_RESOURCES),
    }
    for field in ("imagePullPolicy", "securityContext"):
        if main.get(field):
            init[field] = copy.deepcopy(main[field])
    return init
