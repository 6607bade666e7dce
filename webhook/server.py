"""One webhook process: the service wired to uvicorn over TLS, with its pollers and watches.

`Webhook(options).run()` is what `mlgate serve` does; tests use `start()` / `stop()` to run the
same server on a thread.

Connections are bounded before uvicorn sees them: a TLS handshake has `handshake_timeout` seconds
from accept (`protocol.tls_event_loop`), and at most `max_connections` are open at once, counted
from accept (`tls.ConnectionGate`); one more is closed at accept. After the handshake, the request
head has `header_timeout` seconds and an idle kept-alive connection `KEEP_ALIVE_SECONDS`.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn

from mlgate.kube.reach import Reachability
from mlgate.loading.policies import default_policy_dir
from mlgate.model.facts import NO_FACTS, ClusterFacts
from mlgate_certs.bundle import ensure_dev_certs  # type: ignore[import-not-found,unused-ignore]

from .app import create_app
from .exception_store import ClusterExceptionSource, ExceptionStore
from .facts_cache import WatchedFacts
from .metrics import Metrics, metrics_server
from .policy_status import PolicyStatusWriter
from .policy_store import ClusterPolicySource, DirectorySource, PolicySource, PolicyStore
from .probes import Heartbeat, Probes
from .protocol import protocol_with_timeout, tls_event_loop
from .service import Service, Settings
from .tls import CertReloader, ConnectionGate
from .watch import Poller

if TYPE_CHECKING:
    from .selfmanaged import SelfManaged, SelfManagedOptions

log = logging.getLogger("mlgate.webhook")
KEEP_ALIVE_SECONDS = 30  # the API server keeps idle connections to webhooks for up to 90 s
FD_RESERVE = 64  # file descriptors kept for everything but connections: listener, loop, files, watches


def connection_limit(wanted: int) -> int:
    """`wanted`, or fewer if the process may not open that many files besides its own `FD_RESERVE`."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or wanted <= soft - FD_RESERVE:
        return wanted
    limit = max(soft - FD_RESERVE, 1)
    log.warning("at most %d connections rather than %d: the file descriptor limit is %d", limit, wanted, soft)
    return limit


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, as uvicorn's Config.bind_socket makes it (SO_REUSEADDR, inheritable), but
    raising OSError instead of logging and exiting; uvicorn listens on it (Server.run(sockets=...))."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class _Config(uvicorn.Config):
    """uvicorn's configuration, with an event loop of our own making."""

    def __init__(self, app: Any, loop_factory: Callable[[], asyncio.AbstractEventLoop], **kwargs: Any):
        super().__init__(app, **kwargs)
        self.loop_factory = loop_factory

    def get_loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        return self.loop_factory


@dataclass
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = 8443
    cert_file: Path | None = None
    key_file: Path | None = None
    policy_paths: tuple[str, ...] = ()
    log_level: str = "info"
    kubeconfig: str | None = None
    in_cluster: bool = False
    state_dir: Path = Path(".state")
    settings: Settings = field(default_factory=Settings)
    metrics_port: int | None = None  # plain-HTTP /metrics on this port (0: any free one); None: none
    self_managed: SelfManagedOptions | None = None  # certificates and registration kept by the webhook itself

    @property
    def cluster(self) -> bool:
        return self.in_cluster or self.kubeconfig is not None


class Webhook:
    def __init__(self, options: ServeOptions):
        self.options = options
        self.metrics = Metrics()
        cert_file, key_file = options.cert_file, options.key_file
        self.reach = Reachability() if options.cluster or options.self_managed is not None else None
        self.self_managed = self._self_managed()
        if self.self_managed is not None and cert_file is None:
            files = self.self_managed.bootstrap()  # blocks until the Secret holds a serving pair
            cert_file, key_file, self.dev_ca = files.cert, files.key, None
        elif cert_file is None or key_file is None:
            files = ensure_dev_certs(options.state_dir / "dev-tls")
            cert_file, key_file, self.dev_ca = files.cert, files.key, files.ca_cert
        else:
            self.dev_ca = None
        self.tls = CertReloader(cert_file, key_file, self.metrics)
        sources: list[PolicySource] = [DirectorySource(options.policy_paths or [default_policy_dir()],
                                                       allow_empty=options.settings.allow_empty_policies,
                                                       settle=options.settings.poll_interval)]
        self.watched_facts = WatchedFacts() if options.cluster else None
        self.cluster_policies = ClusterPolicySource() if options.cluster else None
        if self.cluster_policies is not None:
            sources.append(self.cluster_policies)
        self.store = PolicyStore(sources, self.metrics)
        self.store.refresh()
        self.cluster_exceptions = ClusterExceptionSource() if options.cluster else None
        self.exceptions = ExceptionStore(self.cluster_exceptions, self.metrics) if self.cluster_exceptions else None
        facts: ClusterFacts = self.watched_facts if self.watched_facts is not None else NO_FACTS
        self.service = Service(self.store, self.metrics, facts, self.tls, options.settings, self.exceptions,
                               reach=self.reach)
        self.heartbeat = Heartbeat()
        self.server = uvicorn.Server(self._config())
        connections = self.server.server_state.connections  # uvicorn's: from the end of the handshake to close
        self.gate = ConnectionGate(connection_limit(options.settings.max_connections),
                                   options.settings.handshake_timeout, connections.__len__, self.metrics)
        self.tls.listener.gate = self.gate
        self.metrics.connections_open.set_function(self.gate.count)
        self.metrics.ready.set_function(lambda: float(self.service.readiness()[0]))
        try:  # bound now, so that nothing says "serving" before the port is ours; uvicorn gets the socket
            self.socket: socket.socket = listening_socket(options.host, options.port)
        except OSError as exc:
            raise OSError(f"--port {options.port} on {options.host}: {exc.strerror or exc}") from None
        port = options.metrics_port  # bound now, so that a taken port fails `mlgate serve` at start
        try:
            probes = Probes(self.heartbeat, options.settings.loop_stall, self.service.readiness)
            self.metrics_server = None if port is None else metrics_server(self.metrics, options.host, port, probes)
        except OSError as exc:
            raise OSError(f"--metrics-port {port}: {exc.strerror}") from None
        self._metrics_thread: threading.Thread | None = None
        interval = options.settings.poll_interval
        self._pollers = [Poller("policies", self.store.refresh, interval),
                         Poller("certificate", self.tls.check, interval)]
        if self.self_managed is not None:
            self.self_managed.ready = lambda: self.service.readiness()[0]
            self._pollers.insert(0, Poller("self-managed", self.self_managed.tick, interval))
        self._watch_stop: threading.Event | None = None
        self._thread: threading.Thread | None = None

    def _self_managed(self) -> SelfManaged | None:
        if self.options.self_managed is None:
            return None
        from mlgate.kube.rest import kube_rest

        from .selfmanaged import SelfManaged

        rest = kube_rest(self.options.kubeconfig, self.options.in_cluster, reach=self.reach)
        return SelfManaged(self.options.self_managed, rest, self.options.state_dir / "self-managed")

    def _loop(self) -> asyncio.AbstractEventLoop:
        loop = tls_event_loop(self.options.settings.handshake_timeout)()
        self.heartbeat.attach(loop)  # /healthz on the metrics port sees whether this loop still turns
        return loop

    def _config(self) -> uvicorn.Config:
        return _Config(
            create_app(self.service), self._loop,
            host=self.options.host, port=self.options.port,
            ssl_context_factory=lambda _config, _default: self.tls.listener,
            http=protocol_with_timeout(self.options.settings.header_timeout),
            lifespan="off", access_log=False, log_config=None, log_level=self.options.log_level.lower(),
            server_header=False, proxy_headers=False,  # the API server connects directly; no proxy to trust
            timeout_keep_alive=KEEP_ALIVE_SECONDS, timeout_graceful_shutdown=10,
        )

    def _start_background(self) -> None:
        if self.watched_facts is not None:
            from .events import DenialEvents, event_poster
            from .kube import start_watches, status_patcher  # the Kubernetes client only when it is needed

            if self.service.events is None:
                self.service.events = DenialEvents(event_poster(kubeconfig=self.options.kubeconfig,
                                                                in_cluster=self.options.in_cluster),
                                                   self.metrics, socket.gethostname())
                self.service.events.start()

            self._watch_stop = start_watches(self.watched_facts, self.cluster_policies,
                                             kubeconfig=self.options.kubeconfig, in_cluster=self.options.in_cluster,
                                             exceptions=self.cluster_exceptions, reach=self.reach)
            if self.cluster_policies is not None:
                writer = PolicyStatusWriter(self.cluster_policies, status_patcher(
                    kubeconfig=self.options.kubeconfig, in_cluster=self.options.in_cluster))
                self._pollers.append(Poller("policy status", writer.sync, self.options.settings.poll_interval))
            if self.exceptions is not None and self.cluster_exceptions is not None:
                interval = self.options.settings.poll_interval
                status = PolicyStatusWriter(self.cluster_exceptions, status_patcher(
                    kubeconfig=self.options.kubeconfig, in_cluster=self.options.in_cluster))
                self._pollers += [Poller("exceptions", self.exceptions.refresh, interval),
                                  Poller("exception status", status.sync, interval)]
        for poller in self._pollers:
            poller.start()
        if self.metrics_server is not None and self._metrics_thread is None:
            self._metrics_thread = threading.Thread(target=self.metrics_server.serve_forever, name="mlgate-metrics",
                                                    daemon=True)
            self._metrics_thread.start()

    def _stop_background(self) -> None:
        for poller in self._pollers:
            poller.stop()
        if self.self_managed is not None:
            self.self_managed.stop()
        if self._watch_stop is not None:
            self._watch_stop.set()
        if self.service.events is not None:
            self.service.events.stop()
        if self.metrics_server is not None and self._metrics_thread is not None:
            self.metrics_server.shutdown()  # waits for serve_forever to return
            self.metrics_server.server_close()
            self._metrics_thread = None

    def run(self) -> None:
        """Serve until SIGINT/SIGTERM."""
        self._start_background()
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self._stop_background()

    def start(self, timeout: float = 10.0) -> None:
        """Serve on a thread; return once the socket is listening."""
        self._start_background()
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]},
                                        name="mlgate-webhook", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the webhook server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        self._stop_background()

    @property
    def port(self) -> int:
        for server in getattr(self.server, "servers", ()):
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self.socket.getsockname()[1])  # bound, not yet served: --port 0 has its number already

    @property
    def url(self) -> str:
        return f"https://{self.options.host}:{self.port}"

    @property
    def probe_url(self) -> str | None:
        """Where /healthz and /readyz are answered off the serving loop: the metrics port, while it serves."""
        metrics = self.metrics_url
        return None if metrics is None else metrics.removesuffix("/metrics")

    @property
    def metrics_url(self) -> str | None:
        """The plain-HTTP metrics endpoint, while it serves."""
        if self.metrics_server is None or self._metrics_thread is None:
            return None
        return f"http://{self.options.host}:{self.metrics_server.server_port}/metrics"
