"""What the CLI's commands share: the exit codes, the one way to fail, loading policies, CRD schemas and facts as
the commands do, and one-line logs. `main` and the command modules import it; it imports none of them."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from mlgate.engine import PolicySet
    from mlgate.loading.schemas import SchemaCatalog
    from mlgate.model.facts import ClusterFacts

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2


def fail(message: str) -> NoReturn:
    for line in message.splitlines():
        click.echo(f"mlgate: {line}", err=True)
    sys.exit(EXIT_ERROR)


# what load_policies warned of in this run (a kind no description knows): `validate --warn-exit-code` counts them,
# so CI can fail on a policy that would silently match nothing; `validate` empties it before it loads
POLICY_WARNINGS: list[str] = []


def load_policies(paths: Sequence[str]) -> PolicySet:
    from mlgate.loading.documents import expand
    from mlgate.loading.policies import PolicyLoadError, default_policy_dir, kind_warnings, load_policy_paths

    chosen = [str(p) for p in paths] or [str(default_policy_dir())]
    try:
        policies = load_policy_paths(chosen)
    except PolicyLoadError as exc:
        for error in exc.errors:
            click.echo(f"mlgate: policy error: {error}", err=True)
        sys.exit(EXIT_ERROR)
    # a policy path that holds nothing would admit everything: a typo must not look like a green run
    empty = [p for p in chosen if not any(True for _ in expand([p]))]
    if empty:
        fail(f"policy error: {empty[0]}: no policy files (.yaml, .yml, .json)")
    if not policies.policies:
        fail(f"policy error: {', '.join(chosen)}: no MLPolicy or ClusterMLPolicy documents")
    for warning in kind_warnings(policies):
        POLICY_WARNINGS.append(str(warning))
        click.echo(f"mlgate: policy warning: {warning}", err=True)
    return policies


def load_schemas(paths: Sequence[str]) -> SchemaCatalog | None:
    """mlgate's own CRDs and those under `paths`; None, said once, when the `schema` extra is missing. CRDs asked
    for by name and not checkable are an error: a green run must not hide that they were never looked at."""
    from mlgate.loading.schemas import EXTRA, SchemaCatalog, SchemaLoadError, default_crd_dir, missing_module

    missing = missing_module()
    if missing is not None:
        install = f"{missing}, which comes with mlgate[{EXTRA}]: pip install 'mlgate[{EXTRA}]'"
        if paths:  # an error, not the note below: nothing is judged
            fail(f"error: --crds needs {install}")
        click.echo(f"mlgate: CRD schemas not checked: they need {install}", err=True)
        return None
    try:
        catalog = SchemaCatalog.from_paths([default_crd_dir()])
        empty = [p for p in paths if not catalog.extend([p])]
    except SchemaLoadError as exc:
        fail(f"crds: {exc}")
    if empty:
        fail(f"crds: {empty[0]}: no CustomResourceDefinition with a schema")
    return catalog


def load_facts(path: str | None) -> ClusterFacts:
    from mlgate.loading.documents import InputError, read_documents
    from mlgate.model.facts import NO_FACTS, StaticFacts, is_fact

    if path is None:
        return NO_FACTS
    try:
        documents = list(read_documents([path]))
    except InputError as exc:
        fail(f"facts: {exc}")
    broken = [d for d in documents if d.error]
    if broken:
        fail(f"facts: {broken[0].source}:{broken[0].error_line or broken[0].line}: {broken[0].error}")
    sources = dict.fromkeys(d.source for d in documents)
    for source in sources:  # workloads given as --facts would otherwise be ignored without a word
        if not any(is_fact(d.data) for d in documents if d.source == source and d.data is not None):
            fail(f"facts: {source}: no cluster facts in it (Namespace, PersistentVolumeClaim, StorageClass, Node, "
                 "...); manifests to judge go in PATHS, `mlgate facts dump` writes a facts file")
    return StaticFacts.from_objects(d.data for d in documents if d.data is not None)


class _OneLine(logging.Handler):
    """A rule that raised is already in the report as "could not evaluate"; stderr gets one line, no traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        text = f"mlgate: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            detail = str(error).strip().splitlines()
            text += f": {type(error).__name__}: {detail[0] if detail else ''}"
        click.echo(text, err=True)  # the stderr of the moment, which tests and embedders may swap


def one_line_logs() -> None:
    """For the offline commands only: `serve` and `operator` configure their own logging."""
    logger = logging.getLogger("mlgate")
    if not any(isinstance(h, _OneLine) for h in logger.handlers):
        # with a handler here, logging's last resort (which prints the traceback) stays silent
        logger.addHandler(_OneLine())


def exit_code(statuses: set[str]) -> int:
    if "error" in statuses:
        return EXIT_ERROR
    return EXIT_DENIED if "denied" in statuses else EXIT_OK
