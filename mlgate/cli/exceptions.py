"""`--exceptions FILE` for `mlgate validate`, and `mlgate exceptions list`: who is excepted from what, until when.

Exceptions are judged at the moment the command starts (`datetime.now(UTC)`): one run, one instant, so
an exception cannot expire half-way through a report. Heavy imports happen inside the functions: this
module is imported whenever `mlgate` starts.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from mlgate.engine import Policy, PolicySet
    from mlgate.model.exceptions import Exceptions, PolicyException

EXIT_ERROR = 2

exceptions_option = click.option(
    "--exceptions", "exception_paths", multiple=True, type=click.Path(),
    help="MLPolicyException file or directory (repeatable): findings they cover are skipped and said to be; "
         "expired ones do nothing. Each must name a policy loaded and a rule it allows exceptions for.",
)


def load_exceptions(paths: Sequence[str], policies: PolicySet, now: datetime | None = None) -> Exceptions:
    """The exceptions under `paths`, checked against `policies`; a load error ends the command (exit 2)."""
    from mlgate.model.exceptions import NO_EXCEPTIONS, Exceptions

    if not paths:
        return NO_EXCEPTIONS
    loaded = _load(paths, policies.policies)
    return Exceptions(tuple(loaded), now=now or datetime.now(UTC))


def _load(paths: Sequence[str], policies: Sequence[Policy] | None) -> list[PolicyException]:
    from mlgate.loading.exceptions import load_exception_paths
    from mlgate.loading.policies import PolicyLoadError

    try:
        return load_exception_paths(paths, policies)
    except PolicyLoadError as exc:
        for error in exc.errors:
            click.echo(f"mlgate: exception error: {error}", err=True)
        sys.exit(EXIT_ERROR)


@click.group("exceptions")
def exceptions() -> None:
    """MLPolicyExceptions: narrow, owned and expiring exceptions to a policy's rules (docs/exceptions.md)."""


@exceptions.command("list")
@click.option("--exceptions", "exception_paths", multiple=True, type=click.Path(), required=True,
              help="MLPolicyException file or directory (repeatable).")
@click.option("-p", "--policies", "policy_paths", multiple=True, type=click.Path(),
              help="Also check each exception against these policies (repeatable): the policy exists, binds the "
                   "rules and allows exceptions for them.")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text")
def list_command(exception_paths: tuple[str, ...], policy_paths: tuple[str, ...], output: str) -> None:
    """Every exception: its namespace and name, the policy and rules, the objects it matches and how it is
    narrowed, until when, and why; expired ones are flagged (they no longer apply)."""
    import json

    from mlgate.cli.common import load_policies

    policies = load_policies(policy_paths).policies if policy_paths else None
    now = datetime.now(UTC)
    loaded = sorted(_load(exception_paths, policies), key=lambda e: (e.namespace, e.name))
    entries = [_entry(e, now) for e in loaded]
    if output == "json":
        click.echo(json.dumps({"exceptions": entries, "expired": sum(e["expired"] for e in entries)}, indent=2))
        return
    for entry in entries:
        click.echo(_text(entry))
    expired = sum(e["expired"] for e in entries)
    click.echo(f"{len(entries)} exception(s), {expired} expired")


def _entry(exception: PolicyException, now: datetime) -> dict[str, Any]:
    from mlgate.model.results import rfc3339

    selector = exception.selector.model_dump(exclude_defaults=True) if exception.selector is not None else None
    return {
        "namespace": exception.namespace, "name": exception.name, "policy": exception.policy,
        "rules": list(exception.rules),
        "match": {"names": sorted(exception.names)} if exception.names else {"selector": selector},
        "containers": sorted(exception.containers), "capabilities": sorted(exception.capabilities),
        "expiresAt": rfc3339(exception.expires_at), "expired": not exception.live(now),
        "reason": exception.reason, "source": exception.source,
    }


def _text(entry: dict[str, Any]) -> str:
    match = entry["match"]
    objects = (f"objects named {', '.join(match['names'])}" if "names" in match
               else f"objects labelled {_selector_text(match['selector'])}")
    narrowed = [f"{field} {', '.join(entry[field])}" for field in ("containers", "capabilities") if entry[field]]
    state = "EXPIRED at" if entry["expired"] else "live until"
    lines = [f"{entry['namespace']}/{entry['name']}: {state} {entry['expiresAt']}",
             f"  excepts {entry['policy']} [{', '.join(entry['rules'])}] for {objects} in {entry['namespace']}",
             *([f"  only {'; '.join(narrowed)}"] if narrowed else []),
             f"  reason: {entry['reason']}",
             f"  from {entry['source']}"]
    return "\n".join(lines)


def _selector_text(selector: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in sorted(selector.get("matchLabels", {}).items())]
    for requirement in selector.get("matchExpressions", []):
        values = requirement.get("values") or []
        parts.append(f"{requirement['key']} {requirement['operator']}" + (f" ({', '.join(values)})" if values else ""))
    return ", ".join(parts)
