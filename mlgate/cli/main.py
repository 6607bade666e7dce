"""`mlgate`: the policy engine for CI and terminals.

Exit codes (stable): 0 everything admitted (warnings allowed), 1 something denied or a test
failed, 2 a usage, input, parse or policy-load error, an object the engine could not evaluate at all,
or no manifests at all under the paths given (unless --allow-empty). `validate --warn-exit-code N`
exits N when something warned and nothing was denied or failed, a policy warning included.
Reports go to stdout, diagnostics to stderr.
Heavy imports happen inside commands so that `mlgate --version` starts fast.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, ClassVar, NoReturn

import click

from mlgate import __version__
from mlgate.cli import exceptions as exceptions_cli
from mlgate.cli import facts as facts_cli

if TYPE_CHECKING:
    from mlgate.cli.review import Record, Render
    from mlgate.cli.text import Style
    from mlgate.engine import PolicySet
    from mlgate.loading.schemas import SchemaCatalog
    from mlgate.model.facts import ClusterFacts
    from mlgate.reports import ReportApi

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2


def fail(message: str) -> NoReturn:
    for line in message.splitlines():
        click.echo(f"mlgate: {line}", err=True)
    sys.exit(EXIT_ERROR)


# what load_policies warned of in this run (a kind no description knows): `validate --warn-exit-code` counts them,
# so CI can fail on a policy that would silently match nothing
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
        message = f"CRD schemas not checked: {missing} comes with mlgate[{EXTRA}]: pip install 'mlgate[{EXTRA}]'"
        if paths:
            fail(message)
        click.echo(f"mlgate: {message}", err=True)
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
    from mlgate.model.facts import NO_FACTS, StaticFacts

    if path is None:
        return NO_FACTS
    try:
        documents = list(read_documents([path]))
    except InputError as exc:
        fail(f"facts: {exc}")
    broken = [d for d in documents if d.error]
    if broken:
        fail(f"facts: {broken[0].source}: {broken[0].error}")
    return StaticFacts.from_objects(d.data for d in documents if d.data is not None)


policies_option = click.option(
    "-p", "--policies", "policy_paths", multiple=True, type=click.Path(),
    help="Policy file or directory (repeatable). Default: the shipped policies/.",
)
namespace_option = click.option(
    "-n", "--namespace", default="default", show_default=True,
    help="Namespace for manifests that name none, as kubectl's current context would give them.",
)
allow_empty_option = click.option(
    "--allow-empty", is_flag=True,
    help="Exit 0 when the paths hold no manifests at all (by default a typo'd path or an empty directory exits 2).",
)
color_option = click.option(
    "--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
    help="Colour the text report's verdicts; auto: on a terminal, unless NO_COLOR is set.",
)
crds_option = click.option(
    "--crds", "crd_paths", multiple=True, type=click.Path(exists=True),
    help="CRD file or directory (repeatable), checked like mlgate's own CRDs: objects of their kinds must pass "
         "the openAPIV3Schema and CEL rules, as the API server demands. Needs mlgate[schema] (exit 2 without it).",
)
facts_option = click.option("--facts", type=click.Path(), help="YAML/JSON file of cluster objects: "
                            "Namespaces, PersistentVolumeClaims, PersistentVolumes, StorageClasses, Nodes, "
                            "Trainer runtimes.")


class TransportGroup(click.Group):
    """The CLI's own commands, plus the transports' (`serve`, `certs`, `admission-review` from the webhook,
    `operator` from the reconciler), imported only when one of them is asked for: `mlgate --version` and
    `mlgate validate` never pay for them."""

    TRANSPORTS: ClassVar[dict[str, tuple[str, str, str]]] = {  # command: module, attribute, the extra it needs
        "serve": ("mlgate_webhook.commands", "serve", "server"),
        "certs": ("mlgate_webhook.commands", "certs", "server"),
        "admission-review": ("mlgate_webhook.commands", "admission_review", "server"),
        "webhook": ("mlgate_webhook.lifecycle", "webhook", "server"),
        "operator": ("mlgate_reconciler.command", "operator", "reconciler"),
        "audit": ("mlgate_audit.command", "audit", "server"),
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.TRANSPORTS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.TRANSPORTS:
            import importlib
            import importlib.util

            module, name, extra = self.TRANSPORTS[cmd_name]
            # a light install (`pip install mlgate`) has the CLI only; the transports import their stack late
            missing = next((m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None), None)
            if missing is not None:
                return _needs_extra(cmd_name, extra, missing)
            command: click.Command = getattr(importlib.import_module(module), name)
            return command
        return super().get_command(ctx, cmd_name)


# The modules each extra of pyproject.toml brings, as imported
EXTRAS = {"server": ("fastapi", "uvicorn", "cryptography", "kubernetes", "prometheus_client"),
          "reconciler": ("kubernetes", "prometheus_client", "cryptography"),
          "schema": ("jsonschema", "celpy"), "cluster": ("kubernetes",)}


def _needs_extra(command: str, extra: str, missing: str) -> click.Command:
    """A stand-in for a transport whose dependencies are not installed: it says which extra brings them."""
    message = f"`mlgate {command}` needs {missing}, which comes with mlgate[{extra}]: pip install 'mlgate[{extra}]'"

    def refuse() -> None:
        fail(message)

    return click.Command(command, callback=refuse, help=message, short_help=f"(needs mlgate[{extra}])",
                         context_settings={"ignore_unknown_options": True, "allow_extra_args": True})


@click.group(cls=TransportGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="mlgate")
def cli() -> None:
    """Admission policies for ML workloads on Kubernetes, offline."""


@cli.command()
@policies_option
@facts_option
@crds_option
@exceptions_cli.exceptions_option
@namespace_option
@click.option("-o", "--output", type=click.Choice(["text", "json", "junit", "sarif", "policyreport"]), default="text",
              help="policyreport: the PolicyReports the in-cluster audit would write, as YAML (docs/reports.md).")
@click.option("--report-api", type=click.Choice(["wgpolicyk8s.io/v1alpha2", "openreports.io/v1alpha1"]),
              default="wgpolicyk8s.io/v1alpha2", show_default=True,
              help="-o policyreport: PolicyReport/ClusterPolicyReport, or openreports.io Report/ClusterReport.")
@click.option("-q", "--quiet", is_flag=True, help="Text: only denied and failed objects, and what blocks them.")
@color_option
@click.option("--warn-exit-code", type=click.IntRange(min=0, max=255), default=0, show_default=True,
              help="Exit code when something warned and nothing was denied or failed (CI that fails on warnings); "
                   "a policy warning (a kind no description knows) counts.")
@allow_empty_option
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes (default: one per core).")
@facts_cli.cluster_options
@click.argument("paths", nargs=-1)
def validate(  # click passes options by name
    *, policy_paths: tuple[str, ...], facts: str | None, crd_paths: tuple[str, ...], namespace: str, output: str,
    report_api: ReportApi, quiet: bool, color: str, warn_exit_code: int, allow_empty: bool, jobs: int | None,
    paths: tuple[str, ...],
    exception_paths: tuple[str, ...] = (),
    **cluster_args: Any,
) -> None:
    """Judge manifests as admission would: mutations first, then checks; objects of a CRD's kind (mlgate's own,
    and --crds) also against its schema and CEL rules, as the API server does. PATH may be a file,
    a directory (searched recursively) or - for stdin."""
    from mlgate.cli.report import Reporter

    reporter = Reporter(output, sys.stdout, _style(sys.stdout, color, quiet), report_api=report_api)
    statuses = set()
    live = facts_cli.cluster_review(cluster_args, paths=paths, facts=facts, policy_paths=policy_paths,
                                    crd_paths=crd_paths, namespace=namespace, render=reporter.render,
                                    exception_paths=exception_paths)
    records = live if live is not None else _review(paths, policy_paths, facts, namespace, jobs=jobs,
                                                    render=reporter.render, crds=crd_paths,
                                                    exceptions=exception_paths)
    for record in records:
        reporter.add(record)
        statuses.add(record.status)
    counts = reporter.finish()
    if live is None:  # a cluster that stores none of the kinds is an answer, not a typo
        _refuse_empty(counts["documents"], paths, allow_empty)
    code = _exit_code(statuses)
    sys.exit(warn_exit_code if code == EXIT_OK and (counts["warnings"] or POLICY_WARNINGS) else code)


@cli.command()
@policies_option
@facts_option
@namespace_option
@color_option
@allow_empty_option
@click.argument("paths", nargs=-1, required=True)
def mutate(  # click passes options by name
    *, policy_paths: tuple[str, ...], facts: str | None, namespace: str, color: str, allow_empty: bool,
    paths: tuple[str, ...],
) -> None:
    """Print the manifests as the API server would store them (defaults applied); the
    verdicts go to stderr."""
    from mlgate.cli.report import Reporter
    from mlgate.loading.documents import dump_yaml

    reporter = Reporter("text", sys.stderr, _style(sys.stderr, color))
    statuses = set()
    # the report is on stderr already: an input error there once, not twice
    for record in _review(paths, policy_paths, facts, namespace, keep_mutated=True, jobs=1, echo_errors=False):
        if record.mutated is not None:
            dump_yaml([record.mutated], sys.stdout)
        reporter.add(record)
        statuses.add(record.status)
    counts = reporter.finish()
    _refuse_empty(counts["documents"], paths, allow_empty)
    sys.exit(_exit_code(statuses))


@cli.command("test")
@click.option("-o", "--output", type=click.Choice(["text", "json", "junit"]), default="text")
@click.argument("suites", nargs=-1, required=True, type=click.Path())
def test_command(output: str, suites: tuple[str, ...]) -> None:
    """Run policy test suites (kind: PolicyTest) and compare every expected result."""
    from mlgate.cli.testsuite import SuiteError, render_outcomes, run_suites

    _one_line_logs()
    try:
        outcomes = run_suites(suites)
    except SuiteError as exc:
        fail(str(exc))
    click.echo(render_outcomes(outcomes, output), nl=False)
    sys.exit(EXIT_OK if all(o.passed for o in outcomes) else EXIT_DENIED)


@cli.command()
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
@click.argument("names", nargs=-1)
def rules(output: str, names: tuple[str, ...]) -> None:
    """List every rule with its parameters; with NAMES, each named rule and every parameter described."""
    import json

    from mlgate.rules.registry import catalog

    specs = catalog()
    unknown = [n for n in names if n not in specs]
    if unknown:
        fail(f"no rule {unknown[0]!r}; `mlgate rules` lists them")
    entries = [
        {"id": spec.id, "type": "mutation" if spec.is_mutation else "check", "summary": spec.summary,
         "params": spec.params.model_json_schema(by_alias=True).get("properties", {})}
        for spec in sorted(specs.values(), key=lambda s: s.id) if not names or spec.id in names
    ]
    if output == "json":
        click.echo(json.dumps(entries, indent=2))
    elif names:
        from mlgate.cli.rulehelp import describe_rule

        for name in dict.fromkeys(names):
            click.echo("\n".join(describe_rule(specs[name])))
    else:
        for entry in entries:
            params = ", ".join(entry["params"]) or "-"
            click.echo(f"{entry['id']:<28} {entry['type']:<8} {entry['summary']}  [params: {params}]")


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: `eval "$(mlgate completion bash)"` (or zsh, fish)."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None  # click ships all three
    click.echo(completer(cli, {}, "mlgate", "_MLGATE_COMPLETE").source())


@cli.command("mig-lint")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--driver-before", type=click.Choice(["R510"]), default=None,
              help="The GPUs run drivers older than this; R510: no 4g beside a 3g on A100 and A30.")
def mig_lint(paths: tuple[str, ...], driver_before: str | None) -> None:
    """Lint mig-parted `mig-configs` files, or ConfigMaps holding one, against the per-model MIG tables and
    placements."""
    from mlgate.cli.miglint import lint_paths

    problems, errors = lint_paths(paths, driver_before="R510" if driver_before == "R510" else None)
    for problem in problems:
        click.echo(problem)
    for error in errors:
        click.echo(f"mlgate: {error}", err=True)
    sys.exit(EXIT_ERROR if errors else EXIT_DENIED if any(p.is_error for p in problems) else EXIT_OK)


def _style(out: IO[str], color: str, quiet: bool = False) -> Style:
    from mlgate.cli.text import Style, use_colour

    # an embedder's cli.main(color=...) counts as asked, as it does for click's own output
    asked = {"always": True, "never": False}.get(color, click.get_current_context().color)
    return Style(color=use_colour(asked, out), quiet=quiet)


def _refuse_empty(documents: int, paths: Sequence[str], allow_empty: bool) -> None:
    """No manifest at all is an input error: a mistyped path or an emptied directory must not look green."""
    if not documents and not allow_empty:
        fail(f"no manifests found in {', '.join(paths)} (--allow-empty accepts that)")


def _review(
    paths: Sequence[str], policy_paths: Sequence[str], facts_path: str | None, namespace: str, *,
    keep_mutated: bool = False, jobs: int | None = None, render: Render | None = None, echo_errors: bool = True,
    crds: Sequence[str] | None = None, exceptions: Sequence[str] = (),
) -> Iterator[Record]:
    from mlgate.cli.review import Settings, review
    from mlgate.loading.documents import InputError

    _one_line_logs()
    from mlgate.loading.peers import with_pod_groups

    facts = with_pod_groups(load_facts(facts_path), paths, namespace)  # a Kueue pod group's members judged together
    schemas = load_schemas(crds) if crds is not None else None  # None: `mutate` prints, it does not judge schemas
    policies = load_policies(policy_paths)
    excepted = exceptions_cli.load_exceptions(exceptions, policies)  # judged at this instant, for the whole run
    settings = Settings(policies, facts, namespace, keep_mutated, schemas, exceptions=excepted)
    try:
        for record in review(paths, settings, jobs=jobs, render=render):
            if record.error and echo_errors:
                click.echo(f"mlgate: {record.where}: {record.error}", err=True)
            yield record
    except InputError as exc:
        fail(str(exc))


class _OneLine(logging.Handler):
    """A rule that raised is already in the report as "could not evaluate"; stderr gets one line, no traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        text = f"mlgate: {record.getMessage()}"
        error = record.exc_info[1] if record.exc_info else None
        if error is not None:
            detail = str(error).strip().splitlines()
            text += f": {type(error).__name__}: {detail[0] if detail else ''}"
        click.echo(text, err=True)  # the stderr of the moment, which tests and embedders may swap


def _one_line_logs() -> None:
    """For the offline commands only: `serve` and `operator` configure their own logging."""
    logger = logging.getLogger("mlgate")
    if not any(isinstance(h, _OneLine) for h in logger.handlers):
        # with a handler here, logging's last resort (which prints the traceback) stays silent
        logger.addHandler(_OneLine())


def _exit_code(statuses: set[str]) -> int:
    if "error" in statuses:
        return EXIT_ERROR
    return EXIT_DENIED if "denied" in statuses else EXIT_OK


cli.add_command(facts_cli.facts)
cli.add_command(exceptions_cli.exceptions)


def main() -> None:
    cli(prog_name="mlgate")
