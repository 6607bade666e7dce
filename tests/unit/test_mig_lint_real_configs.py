"""`mlgate mig-lint` on NVIDIA's own mig-parted configs, and on the three situations they turned up: MIG kept off
on a GPU the tables lack (no problem), MIG on for such a GPU (a warning, exit 0), and a profile the GPU does not
have (still an error, exit 1). Sources of the fixtures: tests/fixtures/mig-configs/SOURCES.md."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.cli.miglint import lint_paths
from mlgate.rules import mig_layout
from mlgate.rules.mig_layout import lint_mig_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mig-configs"
NVIDIA_CONFIGS = ["mig-parted-examples-config.yaml", "mig-parted-dgx-station-80gb-config.yaml", "config-default.yaml"]
UNLISTED = "is not in mlgate's MIG tables; whether it takes this layout is not checked"
RTX_PRO_WARNING = ("config-default.yaml:247: /mig-configs/all-balanced/1/device-filter/0: warning: device id "
                   f"0x2BB510DE {UNLISTED}")
UNLISTED_GPU_WARNING = ("enabled-unknown-gpu.yaml:6: /mig-configs/unlisted-gpu/0/device-filter: warning: device id "
                        f"0x2BB510DE {UNLISTED}")
BAD_PROFILE_ERROR = ("bad-profile-known-gpu.yaml:9: /mig-configs/a100-40gb-with-an-80gb-profile/0/mig-devices/"
                     "3g.40gb: 3g.40gb is not a profile of this GPU; closest: 3g.20gb, 4g.20gb, 2g.10gb "
                     "(on A100/A800-40GB)")


@pytest.fixture(autouse=True)
def _in_fixtures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIXTURES)  # report lines then name files as the expectations do


def report(*names: str) -> tuple[list[str], list[str]]:
    """(error lines, warning lines) of `mlgate mig-lint NAMES...`."""
    problems, unreadable = lint_paths(names)
    assert unreadable == []
    return [str(p) for p in problems if p.is_error], [str(p) for p in problems if not p.is_error]


class _NoLookups(Mapping[int, object]):
    """Device-id table that fails a test which looks anything up in it."""

    def __getitem__(self, key: int) -> object:
        raise AssertionError(f"device id {key:#06x} was looked up")

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_every_nvidia_config_lints_without_errors() -> None:
    assert {name: report(name)[0] for name in NVIDIA_CONFIGS} == {name: [] for name in NVIDIA_CONFIGS}


def test_the_only_warning_in_nvidias_configs_is_the_rtx_pro_6000_the_tables_lack() -> None:
    assert report(*NVIDIA_CONFIGS)[1] == [RTX_PRO_WARNING]


def test_the_dgx_station_display_gpu_kept_out_of_mig_draws_no_problem() -> None:
    assert report("mig-parted-dgx-station-80gb-config.yaml") == ([], [])


def test_mig_kept_off_on_a_gpu_the_tables_lack_draws_no_problem() -> None:
    assert report("disabled-unknown-gpu.yaml") == ([], [])


def test_an_entry_that_keeps_mig_off_looks_up_no_gpu_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mig_layout, "BY_DEVICE_ID", _NoLookups())
    entry = {"device-filter": ["0x20B010DE", "0x1FB010DE"], "devices": "all", "mig-enabled": False}
    assert lint_mig_config({"version": "v1", "mig-configs": {"off": [entry]}}) == []


def test_mig_on_for_a_gpu_the_tables_lack_is_a_warning_not_an_error() -> None:
    assert report("enabled-unknown-gpu.yaml") == ([], [UNLISTED_GPU_WARNING])


def test_a_filter_mixing_listed_and_unlisted_gpus_checks_the_listed_and_warns_about_the_rest() -> None:
    entry = {"device-filter": ["0x20B010DE", "0x2BB510DE"], "devices": "all", "mig-enabled": True,
             "mig-devices": {"1g.5gb": 8}}
    problems = lint_mig_config({"version": "v1", "mig-configs": {"c": [entry]}})
    assert [(p.severity, p.path) for p in problems] == [
        ("warning", "/mig-configs/c/0/device-filter/1"),
        ("error", "/mig-configs/c/0/mig-devices/1g.5gb"),
    ]


def test_a_profile_a_listed_gpu_does_not_have_is_still_an_error() -> None:
    assert report("bad-profile-known-gpu.yaml") == ([BAD_PROFILE_ERROR], [])


def test_mig_lint_prints_the_warning_for_a_gpu_the_tables_lack_and_exits_0() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", "enabled-unknown-gpu.yaml"])
    assert (result.exit_code, result.stdout.splitlines(), result.stderr) == (0, [UNLISTED_GPU_WARNING], "")


def test_mig_lint_passes_nvidias_configs_with_their_one_warning() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", *NVIDIA_CONFIGS])
    assert (result.exit_code, result.stdout.splitlines()) == (0, [RTX_PRO_WARNING])


def test_mig_lint_still_exits_1_for_a_bad_profile_when_another_file_only_warns() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", "enabled-unknown-gpu.yaml", "bad-profile-known-gpu.yaml"])
    assert (result.exit_code, result.stdout.splitlines()) == (1, [UNLISTED_GPU_WARNING, BAD_PROFILE_ERROR])


def test_mig_lint_still_sends_an_unparsable_file_to_stderr_with_exit_2_next_to_a_warning(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("version: v1\nmig-configs: [\n")
    result = CliRunner().invoke(cli, ["mig-lint", "enabled-unknown-gpu.yaml", str(broken)])
    assert (result.exit_code, result.stdout.splitlines()) == (2, [UNLISTED_GPU_WARNING])
    assert result.stderr.startswith(f"mlgate: {broken}:") and "invalid YAML" in result.stderr


def test_every_mig_config_fixture_names_its_source() -> None:
    listed = set(re.findall(r"^## `([^`]+)`$", (FIXTURES / "SOURCES.md").read_text(), re.MULTILINE))
    assert sorted(p.name for p in FIXTURES.glob("*.yaml")) == sorted(listed)
