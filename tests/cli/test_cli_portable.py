"""`mlgate validate` as it runs on macOS, Windows and Alpine, proven on Linux: no `sched_getaffinity`, workers
started with `spawn` and `forkserver` instead of `fork`, manifests written on Windows (CRLF, a byte order mark) and
Windows path separators. Every mode must print the same bytes."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlgate.cli import workers
from mlgate.cli.ci import artifact_uri
from mlgate.loading.documents import InputError

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "tests" / "fixtures" / "real"
sys.path.insert(0, str(ROOT / "bench"))
from corpus import write_corpus  # noqa: E402

# 16 files of 4 manifests: two workers' worth (review.FILES_PER_WORKER_MIN is 8 files a worker), small enough
# that the run is mostly the workers' start, which is what differs between the start methods
CORPUS_MANIFESTS, PER_FILE = 64, 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("corpus")
    write_corpus(directory, CORPUS_MANIFESTS, per_file=PER_FILE)
    return directory


def validate(*args: str | Path, method: str | None = None, python_code: str = "",
             cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    """`python -m mlgate validate ARGS` in a process of its own, `python_code` run before the CLI's main()."""
    env = {k: v for k, v in os.environ.items() if k != workers.START_METHOD_ENV}
    if method:
        env[workers.START_METHOD_ENV] = method
    code = f"import sys\n{python_code}\nfrom mlgate.cli.main import main\nsys.argv[0] = 'mlgate'\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, "validate", *map(str, args)], capture_output=True,
                          env=env, cwd=cwd, check=False)


def test_usable_cpus_prefers_process_cpu_count_where_python_has_it(monkeypatch):
    monkeypatch.setattr(os, "process_cpu_count", lambda: 7, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert workers.usable_cpus() == 7


def test_usable_cpus_counts_the_affinity_mask_before_python_3_13(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert workers.usable_cpus() == 3


def test_usable_cpus_falls_back_to_cpu_count_where_there_is_no_affinity_call(monkeypatch):
    monkeypatch.delattr(os, "process_cpu_count", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 5)
    assert workers.usable_cpus() == 5
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # "undetermined", as the documentation allows
    assert workers.usable_cpus() == 1


def test_fork_is_chosen_on_linux_only(monkeypatch):
    monkeypatch.delenv(workers.START_METHOD_ENV, raising=False)
    linux = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"  # run on Windows: no fork
    for platform, expected in (("linux", linux), ("darwin", "spawn"), ("win32", "spawn")):
        monkeypatch.setattr(sys, "platform", platform)
        assert workers.start_method() == expected


def test_a_start_method_the_platform_lacks_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(workers.START_METHOD_ENV, "thread")
    with pytest.raises(InputError, match=r"^MLGATE_START_METHOD: 'thread' is not a start method this platform "
                                         r"offers \(.*spawn.*\)$"):
        workers.start_method()


def test_the_cli_runs_in_parallel_where_os_has_no_sched_getaffinity(corpus):
    # as on macOS and Windows: neither the 3.13 counter nor the affinity call, only os.cpu_count()
    absent = "import os\nfor name in ('sched_getaffinity', 'process_cpu_count'):\n" \
             "    if hasattr(os, name): delattr(os, name)\nos.cpu_count = lambda: 2"
    parallel = validate(corpus, method="spawn", python_code=absent)
    serial = validate(corpus, "-j", "1")
    assert b"Traceback" not in parallel.stderr, parallel.stderr.decode()
    assert parallel.returncode == serial.returncode == 1  # the corpus holds denials
    assert parallel.stdout == serial.stdout


@pytest.mark.parametrize(("fmt", "methods"), [("text", ("spawn", "forkserver")), ("json", ("spawn",))])
def test_spawn_and_forkserver_print_what_fork_prints_byte_for_byte(corpus, fmt, methods):
    # where there is no fork (Windows), what one process prints is the reference
    offered = multiprocessing.get_all_start_methods()
    reference = validate(corpus, "-j", "2", "-o", fmt, method="fork") if "fork" in offered \
        else validate(corpus, "-j", "1", "-o", fmt)
    assert reference.returncode == 1, reference.stderr.decode()
    assert reference.stdout.count(b"DENIED" if fmt == "text" else b'"denied"') > 0
    for method in (m for m in methods if m in offered):
        started = validate(corpus, "-j", "2", "-o", fmt, method=method)
        assert (started.returncode, started.stdout, started.stderr) == \
               (1, reference.stdout, reference.stderr), method


def test_an_unknown_start_method_is_a_one_line_error(corpus):
    result = validate(corpus, "-j", "2", method="threads")
    assert result.returncode == 2
    # the light install says first, on a line of its own, that it cannot check CRD schemas
    offered = ", ".join(multiprocessing.get_all_start_methods())
    assert result.stderr.decode().splitlines()[-1:] == [
        f"mlgate: MLGATE_START_METHOD: 'threads' is not a start method this platform offers ({offered})"]


def windows_copy(source: Path, target: Path) -> None:
    """The file as a Windows editor saves it: a UTF-8 byte order mark, then CRLF line endings."""
    text = source.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    target.write_bytes(b"\xef\xbb\xbf" + text)


def test_crlf_line_endings_and_a_byte_order_mark_give_the_same_verdicts_and_lines(tmp_path):
    unix, windows = tmp_path / "unix-files", tmp_path / "windows-files"
    shutil.copytree(REAL, unix, ignore=shutil.ignore_patterns("*.md"))
    windows.mkdir()
    for path in sorted(unix.iterdir()):
        windows_copy(path, windows / path.name)
    assert (windows / "kubeflow-pytorchjob-simple.yaml").read_bytes().startswith(b"\xef\xbb\xbf")
    for fmt in ("text", "json"):
        as_unix = validate(unix.name, "-o", fmt, cwd=tmp_path)
        as_windows = validate(windows.name, "-o", fmt, cwd=tmp_path)
        assert as_unix.returncode in (0, 1), as_unix.stderr.decode()
        assert as_windows.returncode == as_unix.returncode
        assert as_windows.stdout.replace(b"windows-files", b"unix-files") == as_unix.stdout
    # lines counted, not only equal: a multi-document file's later documents start where the file has them
    results = json.loads(as_windows.stdout)["results"]
    assert any(r["line"] > 1 for r in results)
    assert sum(r["status"] == "denied" for r in results) > 0


def test_sarif_names_a_file_found_under_windows_separators_as_linux_would():
    assert artifact_uri(r"manifests\team a\job#1.yaml", sep="\\") == "manifests/team%20a/job%231.yaml"
    assert artifact_uri("manifests/team a/job#1.yaml", sep="\\") == "manifests/team%20a/job%231.yaml"
    assert artifact_uri(r"C:\work\ml jobs\job.yaml", sep="\\") == "file:///C:/work/ml%20jobs/job.yaml"
    assert artifact_uri("<stdin>", sep="\\") == "%3Cstdin%3E"
    # on POSIX a backslash is part of a file name, not a separator
    assert artifact_uri(r"odd\name.yaml", sep="/") == "odd%5Cname.yaml"


class OneLine(logging.Handler):
    """Stands for the CLI's one-line handler: a class a worker can rebuild with no arguments."""

    def emit(self, record: logging.LogRecord) -> None:
        pass


def handlers_and_state(_: int) -> tuple[list[str], list[int]]:
    return [type(h).__name__ for h in logging.getLogger(workers.LOGGER).handlers], STARTED


STARTED: list[int] = []


def remember(value: int) -> None:
    STARTED.append(value)


@pytest.mark.parametrize("method", [m for m in ("fork", "spawn") if m in multiprocessing.get_all_start_methods()])
def test_each_worker_starts_once_with_the_parents_log_handlers(monkeypatch, method):
    # a spawned worker starts with logging unconfigured: without its handler, a rule that raised would print a
    # traceback there where the CLI prints one line
    monkeypatch.setenv(workers.START_METHOD_ENV, method)
    monkeypatch.setattr(logging.getLogger(workers.LOGGER), "handlers", [OneLine()])
    results = list(workers.pool_map(handlers_and_state, range(6), 2, initializer=remember, initargs=(7,)))
    assert results == [(["OneLine"], [7])] * 6


def test_what_a_spawned_worker_receives_pickles_after_the_parent_has_used_it():
    # spawn pickles the settings once per worker; a compiled validator or program held in them must not stop it
    import pickle

    from mlgate.cli.main import load_facts, load_policies, load_schemas
    from mlgate.cli.review import Settings, review_document
    from mlgate.loading.documents import read_documents
    from mlgate.loading.schemas import missing_module

    schemas = load_schemas(()) if missing_module() is None else None
    settings = Settings(load_policies([]), load_facts(None), "default", schemas=schemas)
    for document in read_documents([str(ROOT / "examples")]):
        review_document(document, settings)  # compiles what is compiled on first use
    copy = pickle.loads(pickle.dumps(settings))
    before = [r.status for d in read_documents([str(REAL)]) for r in review_document(d, settings)]
    after = [r.status for d in read_documents([str(REAL)]) for r in review_document(d, copy)]
    assert after == before and "denied" in before


def test_cel_validations_reach_a_spawned_worker_and_judge_as_fork_does(corpus, tmp_path):
    # cel-cpp's compiled programs do not pickle: each is sent as its text and compiled again in the worker
    pytest.importorskip("cel_expr_python")
    library = tmp_path / "library"
    library.mkdir()
    for policy in (ROOT / "examples" / "library").glob("*.yaml"):
        shutil.copy(policy, library)
    offered = multiprocessing.get_all_start_methods()
    reference = validate(corpus, "-p", library, "-j", "2", "-q", method="fork" if "fork" in offered else None)
    assert reference.returncode == 1 and b"DENY [" in reference.stdout, reference.stderr.decode()
    started = validate(corpus, "-p", library, "-j", "2", "-q", method="spawn")
    assert (started.returncode, started.stdout, started.stderr) == (1, reference.stdout, reference.stderr)
