"""The webhook fails closed on its policy files.

A set that reads as empty, or that cannot be read at all (a directory that cannot be listed, file
descriptors exhausted), is a load error: the last good set stays in force and the error shows. At
start, with nothing loaded, the webhook stays unready and answers 503, so that the API server
applies each webhook's failurePolicy. A file caught mid-write is never loaded: files are loaded once
they read the same on two polls a settle interval apart, or at once after a ConfigMap's `..data` swap.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from builders import change, pytorchjob
from webhook_harness import FAST, TLSFiles, client, start_webhook
from webhook_load import wait_until
from webhook_reviews import encode, review

from mlgate.model.facts import NO_FACTS
from mlgate_webhook.metrics import Metrics
from mlgate_webhook.policy_store import DirectorySource, PolicyStore
from mlgate_webhook.review import admit, parse_review
from mlgate_webhook.service import Service
from mlgate_webhook.watch import Poller, list_dir

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "policies"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"
PRIVILEGED = change(pytorchjob(), WORKER + "/securityContext/privileged", True)
SIX_GPUS = change(change(pytorchjob(), WORKER + "/resources/limits/nvidia.com~1gpu", 6),
                  WORKER + "/resources/requests/nvidia.com~1gpu", 6)
HEADERS = {"content-type": "application/json"}
SETTLE = 0.1  # DirectorySource's settle interval in the unit tests here


def allowed(store: PolicyStore, obj: dict) -> bool:
    assert store.current is not None
    request = parse_review(encode(review(obj)), "application/json")
    return bool(admit(request, store.current, NO_FACTS, "validate").response["allowed"])


def gpu_policy(limit: int | None) -> str:
    """A policy file; without a limit, the prefix a writer has written before the gpu.max rule."""
    text = ("apiVersion: mlgate.dev/v1alpha1\nkind: ClusterMLPolicy\nmetadata:\n  name: gpu\nspec:\n"
            "  rules:\n    - rule: gpu.limits\n      action: deny\n")
    if limit is not None:
        text += f"    - rule: gpu.max\n      action: deny\n      params:\n        perContainer: {limit}\n"
    return text


def shipped_copy(target: Path) -> Path:
    """The shipped policies, gpu.yaml in a subdirectory; copied with their (old) modification times."""
    shutil.copytree(SHIPPED, target)
    (target / "team").mkdir()
    shutil.move(target / "gpu.yaml", target / "team" / "gpu.yaml")
    return target


def settle(store: PolicyStore) -> bool:
    """Two polls a settle interval apart, as the poller makes them."""
    store.refresh()
    time.sleep(SETTLE)
    return store.refresh()


# --- at start, nothing loaded: not ready, 503 ---------------------------------------------------


def _empty(d: Path) -> None:
    pass


def _no_manifests(d: Path) -> None:
    (d / "README.md").write_text("policies go here\n")


def _comments_only(d: Path) -> None:
    (d / "gpu.yaml").write_text("# policies go here\n---\n")


@pytest.mark.parametrize("fill", [_empty, _no_manifests, _comments_only], ids=["empty", "no-manifests", "comments"])
def test_an_empty_policy_directory_at_start_is_not_ready_and_admits_nothing(tmp_path, tls_files, fill):
    empty = tmp_path / "policies"
    empty.mkdir()
    fill(empty)
    webhook = start_webhook(tls_files, [empty])
    try:
        with client(webhook, tls_files) as c:
            for _ in range(5):  # and it stays so, poll after poll
                ready = c.get("/readyz")
                assert ready.status_code == 503
                assert ready.json()["missing"] == ["no policy set loaded"]
                (error,) = ready.json()["policies"]["lastError"]
                assert error.startswith(f"{empty}: no policy") and "--allow-empty-policies" in error
                for endpoint in ("/validate", "/mutate"):
                    answer = c.post(endpoint, content=encode(review(PRIVILEGED)), headers=HEADERS)
                    assert answer.status_code == 503, answer.text  # the API server applies failurePolicy
                    assert "no policy set is loaded yet" in answer.json()["message"]
                    assert str(empty) in answer.json()["message"]
                time.sleep(FAST.poll_interval * 2)
            assert 'mlgate_policy_last_reload_ok 0.0' in c.get("/metrics").text
        assert webhook.store.current is None
    finally:
        webhook.stop()


def test_allow_empty_makes_an_empty_directory_a_set_of_its_own(tmp_path):
    store = PolicyStore([DirectorySource([tmp_path], allow_empty=True, settle=SETTLE)])
    assert store.refresh() is True
    assert store.current is not None and store.current.policies == ()
    _, detail = Service(store, Metrics()).readiness()
    assert detail["missing"] == ["TLS not ready"]  # no TLS in this unit test; the (empty) set is loaded

    refused = PolicyStore([DirectorySource([tmp_path], settle=SETTLE)])
    assert refused.refresh() is False and refused.current is None
    assert "no policy files" in refused.errors[0]


def test_a_directory_of_workload_kinds_without_a_policy_is_an_empty_set(tmp_path):
    shutil.copy(SHIPPED / "gpu.yaml", tmp_path / "gpu.yaml")
    kinds = tmp_path / "kinds"
    kinds.mkdir()
    (kinds / "kind.yaml").write_text("# no documents\n")
    store = PolicyStore([DirectorySource([tmp_path / "gpu.yaml", kinds], settle=SETTLE)])
    store.refresh()
    assert store.current is None
    assert store.errors == [f"{kinds}: no policy documents in its 1 file(s); an empty policy set would allow every "
                            "request; serve --allow-empty-policies if that is meant"]


# --- after a good load: emptied or unreadable keeps the last good set ------------------------------


Breaker = Callable[[Path, dict[str, OSError]], str]  # breaks the directory; returns what the error says


def _emptied(d: Path, _: dict[str, OSError]) -> str:
    shutil.rmtree(d)
    d.mkdir()
    return f"{d}: no policy files (*.yaml, *.yml, *.json)"


def _comments(d: Path, _: dict[str, OSError]) -> str:
    files = sorted(d.rglob("*.yaml"))
    for path in files:
        path.write_text("# emptied by a bad sync\n")
    return f"{d}: no policy documents in its {len(files)} file(s)"


def _replaced_by_a_file(d: Path, _: dict[str, OSError]) -> str:
    shutil.rmtree(d)
    d.write_text("")
    return f"{d}: no policy documents in its 1 file(s)"


def _dangling_symlink(d: Path, _: dict[str, OSError]) -> str:
    shutil.rmtree(d)
    d.symlink_to(d.parent / "gone")
    return f"{d}: cannot read: No such file or directory"


def _unlistable(path: Path, broken: dict[str, OSError]) -> None:
    """chmod 000, or where that does not stop reads (as root) the error it would give, through `listdir`."""
    path.chmod(0)
    if os.geteuid() == 0:
        broken[str(path)] = PermissionError(errno.EACCES, os.strerror(errno.EACCES))


def _unlistable_subdirectory(d: Path, broken: dict[str, OSError]) -> str:
    _unlistable(d / "team", broken)
    return f"{d}/team: cannot list: Permission denied"


def _unlistable_directory(d: Path, broken: dict[str, OSError]) -> str:
    _unlistable(d, broken)
    return f"{d}: cannot list: Permission denied"


def _out_of_file_descriptors(d: Path, broken: dict[str, OSError]) -> str:
    broken[str(d)] = OSError(errno.EMFILE, os.strerror(errno.EMFILE))
    return f"{d}: cannot list: Too many open files"


BREAKERS: list[Breaker] = [_emptied, _comments, _replaced_by_a_file, _dangling_symlink, _unlistable_subdirectory,
                           _unlistable_directory, _out_of_file_descriptors]


@pytest.mark.parametrize("brk", BREAKERS, ids=lambda b: b.__name__.strip("_"))
def test_a_set_that_empties_or_cannot_be_read_keeps_the_last_good_one(tmp_path, brk):
    policies = shipped_copy(tmp_path / "policies")
    broken: dict[str, OSError] = {}

    def listdir(path: str) -> list[os.DirEntry[str]]:
        if path in broken:
            raise broken[path]
        return list_dir(path)

    metrics = Metrics()
    store = PolicyStore([DirectorySource([policies], settle=SETTLE, listdir=listdir)], metrics)
    assert store.refresh() is True
    good = store.current
    assert good is not None and "gpu" in [p.key for p in good.policies]
    try:
        expected = brk(policies, broken)
        assert settle(store) is False
        assert store.current is good  # the last good set stays in force
        assert not allowed(store, PRIVILEGED)
        assert not allowed(store, change(SIX_GPUS, WORKER + "/resources/limits/nvidia.com~1gpu", 16))
        assert store.errors and store.errors[0].startswith(expected), store.errors
        _, detail = Service(store, metrics).readiness()
        assert detail["missing"] == ["TLS not ready"]  # the set is loaded: not "no policy set loaded"
        assert detail["policies"]["lastError"] == store.errors and detail["policies"]["generation"] == 1
        assert metrics.policy_reload_errors._value.get() == 1
        assert metrics.policy_last_reload_ok._value.get() == 0
    finally:
        for path in (policies, policies / "team"):
            with contextlib.suppress(OSError):
                path.chmod(0o755)


def test_a_directory_that_fails_to_list_at_start_is_an_error_not_an_empty_set(tmp_path):
    policies = shipped_copy(tmp_path / "policies")

    def listdir(path: str) -> list[os.DirEntry[str]]:
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    store = PolicyStore([DirectorySource([policies], settle=SETTLE, listdir=listdir)])
    assert store.refresh() is False
    assert store.current is None
    assert store.errors == [f"{policies}: cannot list: Too many open files"]


# --- a file caught mid-write is never loaded ----------------------------------------------------


def test_a_half_written_policy_file_is_not_loaded_until_it_settles(tmp_path):
    policy = tmp_path / "gpu.yaml"
    policy.write_text(gpu_policy(8))
    store = PolicyStore([DirectorySource([tmp_path], settle=SETTLE)])
    assert store.refresh() is True  # a file written just now: the first poll waits a settle interval for it
    assert allowed(store, SIX_GPUS) is True

    policy.write_text(gpu_policy(None))  # a writer has written a valid prefix, not yet the gpu.max rule
    assert store.refresh() is False
    time.sleep(SETTLE / 4)
    assert store.refresh() is False  # unchanged, but not for a settle interval
    policy.write_text(gpu_policy(4))  # the write completes
    assert store.refresh() is False  # changed since the last poll
    time.sleep(SETTLE)
    assert store.refresh() is True
    assert store.current is not None and store.current.generation == 2  # the prefix was never a set of its own
    assert allowed(store, SIX_GPUS) is False
    assert store.refresh() is False


def test_the_poller_loads_a_file_written_in_two_steps_once_and_whole(tmp_path):
    policy = tmp_path / "gpu.yaml"
    policy.write_text(gpu_policy(8))
    store = PolicyStore([DirectorySource([tmp_path], settle=0.5)])
    store.refresh()
    generations: list[int] = []

    def check() -> None:
        store.refresh()
        generations.append(store.current.generation if store.current is not None else 0)

    poller = Poller("policies", check, 0.02)
    poller.start()
    try:
        with policy.open("w") as handle:
            handle.write(gpu_policy(None))
            handle.flush()
            seen = len(generations)
            wait_until(lambda: len(generations) >= seen + 5, what="the poller to see the half-written file")
            handle.write(gpu_policy(4)[len(gpu_policy(None)):])
        wait_until(lambda: store.current is not None and store.current.generation == 2, what="the whole file")
        time.sleep(0.1)
    finally:
        poller.stop()
    assert set(generations) == {1, 2}  # no set in between
    assert allowed(store, SIX_GPUS) is False


def test_at_start_a_file_being_written_is_waited_for(tmp_path):
    policy = tmp_path / "gpu.yaml"
    policy.write_text(gpu_policy(None))
    finish = threading.Timer(0.1, lambda: policy.write_text(gpu_policy(4)))
    finish.start()
    store = PolicyStore([DirectorySource([tmp_path], settle=0.5)])
    assert store.refresh() is False  # read, waited, read something else: not settled yet
    finish.join()
    assert store.current is None and store.status()["pending"] == ["files"]
    time.sleep(0.5)
    assert store.refresh() is True
    assert allowed(store, SIX_GPUS) is False


def _configmap(directory: Path, version: str, files: dict[str, str], link: bool = True) -> None:
    """What kubelet does: the files in a new hidden directory, then `..data` swapped to it atomically."""
    data = directory / f"..{version}"
    data.mkdir()
    for name, text in files.items():
        (data / name).write_text(text)
    os.symlink(data.name, directory / "..data_tmp")
    os.replace(directory / "..data_tmp", directory / "..data")
    for name in files if link else ():
        if not (directory / name).is_symlink():
            os.symlink(f"..data/{name}", directory / name)


def test_a_configmap_update_loads_at_the_next_poll_and_whole(tmp_path):
    pod_security = (SHIPPED / "pod-security.yaml").read_text()
    _configmap(tmp_path, "2026_01_01", {"gpu.yaml": gpu_policy(8)})
    swap_while_reading: dict[str, str] = {}

    def listdir(path: str) -> list[os.DirEntry[str]]:
        entries = list_dir(path)
        if Path(path).name in swap_while_reading:  # kubelet swaps again while this one is being read
            _configmap(tmp_path, swap_while_reading.pop(Path(path).name),
                       {"gpu.yaml": gpu_policy(4), "pod-security.yaml": pod_security}, link=False)
        return entries

    store = PolicyStore([DirectorySource([tmp_path], settle=60.0, listdir=listdir)])  # no settle wait for a swap
    assert store.refresh() is True
    assert allowed(store, SIX_GPUS) and allowed(store, PRIVILEGED)

    # a new key: its visible link is not there yet, as just after kubelet's swap; it is read through ..data
    _configmap(tmp_path, "2026_01_02", {"gpu.yaml": gpu_policy(16), "pod-security.yaml": pod_security}, link=False)
    assert store.refresh() is True
    assert [p.key for p in store.current.policies] == ["gpu", "pod-security"]
    assert allowed(store, SIX_GPUS) and not allowed(store, PRIVILEGED)

    swap_while_reading["..2026_01_03"] = "2026_01_04"  # the read of 03 is dropped, 04 is read next
    _configmap(tmp_path, "2026_01_03", {"gpu.yaml": gpu_policy(2)}, link=False)
    assert store.refresh() is False
    assert store.current.generation == 2 and store.errors == []
    assert store.refresh() is True
    assert store.current.generation == 3 and not allowed(store, SIX_GPUS) and not allowed(store, PRIVILEGED)


# --- `mlgate serve`: the flag, and file descriptors exhausted ----------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """`python -m mlgate_webhook serve` as a process, on loopback, with its log in a file.

    Every connection is closed when done with: a connection cap (if the server has one) must not
    count the test's own leftovers."""

    def __init__(self, tls: TLSFiles, directory: Path, *args: str, nofile: int | None = None):
        self.tls = tls
        self.port = free_port()
        self.log = directory / "serve.log"
        command = [sys.executable, "-m", "mlgate_webhook", "serve", "--host", "127.0.0.1", "--port", str(self.port),
                   "--cert-file", str(tls.cert), "--key-file", str(tls.key), "--state-dir", str(directory / "state"),
                   *args]
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        if nofile is not None:  # `ulimit -n`, soft and hard, set while it is still importing (no preexec_fn)
            resource.prlimit(self.process.pid, resource.RLIMIT_NOFILE, (nofile, nofile))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.tls.client_context(), timeout=5)

    def kept(self) -> http.client.HTTPSConnection:
        """A connection with its TLS handshake done (retried while a closed one may still count)."""
        for _ in range(50):
            connection = self.connection()
            try:
                connection.connect()
                return connection
            except OSError:
                connection.close()
                time.sleep(0.1)
        raise AssertionError("no connection accepted")

    def once(self, method: str, path: str, obj: dict | None = None, tries: int = 20) -> tuple[int, dict]:
        """One request on a connection of its own, closed after; retried a while, then (0, {}), when
        refused (a capped server may still count the connection closed just before)."""
        for _ in range(tries):
            connection = self.connection()
            try:
                return self.ask(connection, method, path, obj)
            except (OSError, http.client.HTTPException):
                time.sleep(0.1)
            finally:
                connection.close()
        return 0, {}

    @staticmethod
    def ask(connection: http.client.HTTPSConnection, method: str, path: str, obj: dict | None = None
            ) -> tuple[int, dict]:
        body = encode(review(obj)) if obj is not None else None
        connection.request(method, path, body=body, headers=HEADERS if body else {})
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.once("GET", "/readyz", tries=1)[0] != 200:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def wait_listening(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while self.once("GET", "/healthz", tries=1)[0] != 200:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def open_fds(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/fd"))

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.log.read_text()


@pytest.fixture
def serve(tmp_path: Path, tls_files: TLSFiles) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*args: str, nofile: int | None = None) -> Served:
        served = Served(tls_files, tmp_path, *args, nofile=nofile)
        started.append(served)
        served.wait_listening()
        return served

    yield start
    for served in started:
        served.stop()


@pytest.mark.parametrize("flag", [False, True], ids=["without-flag", "allow-empty-policies"])
def test_serve_runs_an_empty_directory_only_with_allow_empty_policies(tmp_path, serve, flag):
    empty = tmp_path / "empty"
    empty.mkdir()
    served = serve("-p", str(empty), *(["--allow-empty-policies"] if flag else []))
    status, body = served.once("GET", "/readyz")
    verdict_status, verdict = served.once("POST", "/validate", PRIVILEGED)
    log = served.stop()
    if flag:
        assert status == 200, body
        assert verdict_status == 200 and verdict["response"]["allowed"] is True  # deliberately: no policy
    else:
        assert status == 503 and body["missing"] == ["no policy set loaded"], body
        assert verdict_status == 503, verdict
        assert f"mlgate: policy error: {empty}: no policy files" in log


NOFILE = 64  # the serving process holds about 16 descriptors when idle
PRESSURE_SECONDS = 9.0  # three poll intervals and a settle interval (2 s each by default), and some


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts the server's descriptors in /proc")
def test_out_of_file_descriptors_the_set_in_force_stays(tmp_path, serve):
    policies = shipped_copy(tmp_path / "policies")
    served = serve("-p", str(policies), nofile=NOFILE)
    served.wait_ready()
    kept = served.kept()  # kept alive across what follows: it needs no new descriptor
    status, answer = served.ask(kept, "POST", "/validate", PRIVILEGED)
    assert status == 200 and answer["response"]["allowed"] is False

    idle: list[socket.socket] = []
    exhausted = False
    errors: list[str] = []
    try:
        # idle TCP connections (no TLS handshake) until the server holds as many descriptors as it may;
        # with a connection cap it closes them at accept instead, and is never out of descriptors
        for _ in range(NOFILE + 32):
            idle.append(socket.create_connection(("127.0.0.1", served.port), timeout=5))
            time.sleep(0.01)
            if served.open_fds() >= NOFILE:
                exhausted = True
                break
        for _ in range(4 if exhausted else 0):  # a few more waiting in the backlog, for any descriptor freed
            idle.append(socket.create_connection(("127.0.0.1", served.port), timeout=5))
        deadline = time.monotonic() + PRESSURE_SECONDS
        while time.monotonic() < deadline:
            status, answer = served.ask(kept, "POST", "/validate", PRIVILEGED)
            assert status == 503 or (status == 200 and answer["response"]["allowed"] is False), answer
            status, ready = served.ask(kept, "GET", "/readyz")
            assert ready["policies"]["loaded"] and ready["policies"]["generation"] == 1, ready
            errors = ready["policies"]["lastError"]
            if any("Too many open files" in e for e in errors):
                break
            time.sleep(0.25)
        if exhausted:  # the poller could not list the directory: an error, not an empty set
            assert any(e.startswith(f"{policies}: cannot list: Too many open files") for e in errors), errors
    finally:
        for sock in idle:
            sock.close()
    status, answer = served.ask(kept, "POST", "/validate", PRIVILEGED)
    assert status == 200 and answer["response"]["allowed"] is False
    kept.close()
    # descriptors back: the files read again, the same set and no error
    wait_until(lambda: served.once("GET", "/readyz")[1].get("policies", {}).get("lastError") == [],
               what="the error to clear")
    status, answer = served.once("POST", "/validate", PRIVILEGED)
    assert status == 200 and answer["response"]["allowed"] is False
    log = served.stop()
    assert not exhausted or "Too many open files" in log
