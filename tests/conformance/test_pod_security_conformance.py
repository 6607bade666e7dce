"""Every fixture k8s.io/pod-security-admission ships, judged by pod-security.baseline and pod-security.restricted
at the fixture's own version: pass fixtures allowed, fail fixtures denied.

One test per level and version (one PolicySet each, built once); the session's last line gives the count.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from psa_fixtures import LEVELS, NEWEST_MINOR, TALLY, VERDICTS, judge, rule_set

VERSIONS = range(NEWEST_MINOR + 1)


@pytest.mark.parametrize(("level", "minor"), [(level, minor) for level in LEVELS for minor in VERSIONS],
                         ids=[f"{level}-v1.{minor}" for level in LEVELS for minor in VERSIONS])
def test_upstream_fixtures_are_judged_as_upstream_judges_them(upstream_testdata: Path, level: str, minor: int):
    rules = rule_set(level, minor)
    mismatches = []
    for verdict in VERDICTS:
        folder = upstream_testdata / level / f"v1.{minor}" / verdict
        assert folder.is_dir(), f"{folder} is missing"
        count, differ = judge(folder, verdict, rules)
        TALLY.judged += count
        TALLY.mismatches.extend(differ)
        mismatches.extend(differ)
    assert not mismatches, "\n".join(map(str, mismatches))


def test_every_upstream_fixture_is_in_a_folder_these_tests_judge(upstream_testdata: Path):
    layout = re.compile(rf"^({'|'.join(LEVELS)})/v1\.(\d+)/({'|'.join(VERDICTS)})/[^/]+\.yaml$")
    files = [p.relative_to(upstream_testdata).as_posix() for p in upstream_testdata.rglob("*.yaml")]
    assert files, f"no fixtures under {upstream_testdata}"
    outside = [f for f in files if not (m := layout.match(f)) or int(m.group(2)) not in VERSIONS]
    assert not outside, f"fixtures no test judges: {outside}"


def test_each_level_and_version_has_passing_and_failing_fixtures(upstream_testdata: Path):
    empty = [f"{level}/v1.{minor}/{verdict}" for level in LEVELS for minor in VERSIONS for verdict in VERDICTS
             if not any((upstream_testdata / level / f"v1.{minor}" / verdict).glob("*.yaml"))]
    assert not empty, f"empty fixture folders: {empty}"


def test_the_harness_reports_fixtures_a_weaker_profile_allows(upstream_testdata: Path):
    # baseline lets restricted's fail fixtures through (those of restricted-only checks), and judge() says so
    count, mismatches = judge(upstream_testdata / "restricted" / f"v1.{NEWEST_MINOR}" / "fail", "fail",
                              rule_set("baseline", NEWEST_MINOR))
    assert count > 0
    assert {re.sub(r"\d+\.yaml$", "", Path(m.fixture).name) for m in mismatches} >= {
        "allowprivilegeescalation", "runasnonroot", "seccompprofile_restricted", "restrictedvolumes"}
    assert all(m.reasons == () and "mlgate allowed" in str(m) for m in mismatches)
