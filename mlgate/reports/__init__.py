"""Engine results as PolicyReports (wgpolicyk8s.io/v1alpha2) or OpenReports (openreports.io/v1alpha1)."""

from mlgate.reports.compare import digest, dumps, settle, stale, unchanged
from mlgate.reports.policyreport import (
    OPENREPORTS,
    REPORT_APIS,
    WGPOLICY,
    Judged,
    ObjectRef,
    ReportApi,
    build_reports,
    list_everything,
    listed_by_default,
    timestamp,
)

__all__ = [
    "OPENREPORTS",
    "REPORT_APIS",
    "WGPOLICY",
    "Judged",
    "ObjectRef",
    "ReportApi",
    "build_reports",
    "digest",
    "dumps",
    "list_everything",
    "listed_by_default",
    "settle",
    "stale",
    "timestamp",
    "unchanged",
]
