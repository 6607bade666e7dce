"""`mlgate`: the policy engine for CI and terminals.

Exit codes (stable): 0 everything admitted (warnings allowed), 1 something denied or a test
failed, 2 a usage, input, parse or policy-load error, an object the engine could not evaluate at all,
or no manifests at all under the paths given (unless --allow-empty). `validate --warn-exit-code N`
exits N when something warned and nothing was denied or failed, a policy warning included.
Reports go to stdout, diagnostics to stderr.
Heavy imports happen inside commands so that `mlgate --version` starts fast.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any, ClassVar

import click

from mlgate import __version__
from mlgate.cli import exceptions as exceptions_cli
from mlgate.cli import facts as facts_cli
from mlgate.cli.common import (
    EXIT_DENIED,
    EXIT_ERROR,
    EXIT_OK,
    POLICY_WARNINGS,
    exit_code,
    fail,
    load_facts,
    load_policies,
    load_schemas,
    one_line_logs,
)

if TYPE_CHECKING:
    from mlgate.cli.review import Record, Render
    from mlgate.cli.text import Style
    from mlgate.reports import ReportApi


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
    # What a command imports when it needs less than its whole extra, so the missing module it names is its own:
    # `certs` makes certificates only; `webhook uninstall` and `rotate-ca` talk to the API server, and rotate-ca
    # makes certificates. Neither serves anything (no fastapi, no uvicorn).
    NEEDS: ClassVar[dict[str, tuple[str, ...]]] = {"certs": ("cryptography",),
                                                   "webhook": ("kubernetes", "cryptography")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.TRANSPORTS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.TRANSPORTS:
            import importlib
            import importlib.util

            module, name, extra = self.TRANSPORTS[cmd_name]
            # a light install (`pip install mlgate`) has the CLI only; the transports import their stack late
            needs = self.NEEDS.get(cmd_name, EXTRAS[extra])
            missing = next((m for m in needs if importlib.util.find_spec(m) is None), None)
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


def _docs_url(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    from mlgate.cli.ci import DOCS_URL, absolute_url

    if value is None:
        return DOCS_URL
    if (problem := absolute_url(value)) is not None:
        raise click.BadParameter(problem)
    return value


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
@click.option("--docs-url", envvar="MLGATE_DOCS_URL", callback=_docs_url, show_envvar=True,
              help="-o sarif: the absolute URL docs/ is published at, the base of each rule's helpUri "
                   "(default: docs/ where the repository is hosted).")
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
    report_api: ReportApi, docs_url: str, quiet: bool, color: str, warn_exit_code: int, allow_empty: bool,
    jobs: int | None, paths: tuple[str, ...],
    exception_paths: tuple[str, ...] = (),
    **cluster_args: Any,
) -> None:
    """Judge manifests as admission would: mutations first, then checks; objects of a CRD's kind (mlgate's own,
    and --crds) also against its schema and CEL rules, as the API server does. PATH may be a file,
    a directory (searched recursively) or - for stdin."""
    from mlgate.cli.report import Reporter

    POLICY_WARNINGS.clear()  # this run's only (tests and embedders call the command more than once)
    reporter = Reporter(output, sys.stdout, _style(sys.stdout, color, quiet), report_api=report_api,
                        docs_url=docs_url)
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
    code = exit_code(statuses)
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
    verdicts go to stderr. A denied object is printed too, as mutated, after a `# mlgate: DENIED` comment line
    (stdout stays YAML), and the exit code is 1."""
    from mlgate.cli.report import Reporter
    from mlgate.loading.documents import dump_yaml

    reporter = Reporter("text", sys.stderr, _style(sys.stderr, color))
    statuses = set()
    # the report is on stderr already: an input error there once, not twice
    for record in _review(paths, policy_paths, facts, namespace, keep_mutated=True, jobs=1, echo_errors=False):
        if record.mutated is not None:
            if record.status == "denied":  # a reader of stdout alone must not take it for an admitted object
                name = f"{record.namespace}/{record.name}" if record.namespace else record.name
                sys.stdout.write(f"# mlgate: DENIED {record.kind} {name} ({record.source}:{record.line}): admission "
                                 "would refuse it; why is on stderr\n")
            dump_yaml([record.mutated], sys.stdout)
        reporter.add(record)
        statuses.add(record.status)
    counts = reporter.finish()
    if counts["denied"]:
        click.echo(f"mlgate: {counts['denied']} denied object(s) printed on stdout after a `# mlgate: DENIED` "
                   "line: admission would refuse them", err=True)
    _refuse_empty(counts["documents"], paths, allow_empty)
    sys.exit(exit_code(statuses))


@cli.command("test")
@click.option("-o", "--output", type=click.Choice(["text", "json", "junit"]), default="text")
@click.argument("suites", nargs=-1, required=True, type=click.Path())
def test_command(output: str, suites: tuple[str, ...]) -> None:
    """Run policy test suites (kind: PolicyTest) and compare every expected result."""
    from mlgate.cli.testsuite import SuiteError, render_outcomes, run_suites

    one_line_logs()
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
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def cel(output: str) -> None:
    """List the variables and functions CEL validations and mutations may use (docs/authoring.md)."""
    import json

    from mlgate.cli.celhelp import listing, render_text

    data = listing()
    click.echo(json.dumps(data, indent=2) if output == "json" else render_text(data))


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
    placements. PATHS are files, directories (their YAML files) or `-` for stdin. The problems go to stdout,
    a one-line summary to stderr."""
    from mlgate.cli.miglint import lint_paths, mig_files, summary

    files, missing = mig_files(paths)
    problems, errors = lint_paths(files, driver_before="R510" if driver_before == "R510" else None)
    errors = missing + errors
    for problem in problems:
        click.echo(problem)
    for error in errors:
        click.echo(f"mlgate: {error}", err=True)
    click.echo(f"mlgate: {summary(len(files) - len(errors) + len(missing), problems)}", err=True)
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
    from mlgate.loading.builtin_schemas import shipped
    from mlgate.loading.documents import InputError

    one_line_logs()
    from mlgate.loading.peers import with_pod_groups

    facts = with_pod_groups(load_facts(facts_path), paths, namespace)  # a Kueue pod group's members judged together
    schemas = load_schemas(crds) if crds is not None else None  # None: `mutate` prints, it does not judge schemas
    policies = load_policies(policy_paths)
    excepted = exceptions_cli.load_exceptions(exceptions, policies)  # judged at this instant, for the whole run
    settings = Settings(policies, facts, namespace, keep_mutated, schemas, exceptions=excepted, builtins=shipped())
    try:
        for record in review(paths, settings, jobs=jobs, render=render):
            if record.error and echo_errors:
                click.echo(f"mlgate: {record.where}: {record.error}", err=True)
            yield record
    except InputError as exc:
        fail(str(exc))


cli.add_command(facts_cli.facts)
cli.add_command(exceptions_cli.exceptions)


def main() -> None:
    cli(prog_name="mlgate")
