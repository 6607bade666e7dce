"""`mlgate mig-lint` on NVIDIA's own mig-parted configs, unmodified (mig-parted's default and example configs, and the
GPU Operator's ConfigMap): no finding at all. Then the situations they turned up: MIG kept off on a GPU the tables
lack (no problem), MIG on for such a GPU (a warning, exit 0), a profile the GPU does not have (still an error,
exit 1), and one-change layouts for what NVIDIA's own configs rely on. Sources of the fixtures:
tests/fixtures/mig-configs/SOURCES.md."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from mlgate.cli.main import cli
from mlgate.cli.miglint import lint_paths
from mlgate.rules import mig_layout
from mlgate.rules.mig_layout import lint_mig_config

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mig-configs"
NVIDIA_CONFIGS = ["mig-parted-examples-config.yaml", "mig-parted-dgx-station-80gb-config.yaml", "config-default.yaml",
                  "gpu-operator-mig-manager-configmap.yaml"]
UNLISTED = "is not in mlgate's MIG tables; whether it takes this layout is not checked"
UNLISTED_GPU_WARNING = ("enabled-unknown-gpu.yaml:7: /mig-configs/unlisted-gpu/0/device-filter: warning: device id "
                        f"0x2BB310DE {UNLISTED}")
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


@pytest.mark.parametrize("name", NVIDIA_CONFIGS)
def test_every_nvidia_config_lints_without_a_single_finding(name: str) -> None:
    assert report(name) == ([], [])


def test_mig_lint_on_nvidias_default_config_prints_nothing_and_exits_0() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", "config-default.yaml"])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "mlgate: mig-lint: 1 file checked: "
                                                                       "no problems\n")


def test_the_default_config_fixture_is_nvidias_file_unmodified() -> None:
    text = (FIXTURES / "config-default.yaml").read_bytes()
    assert hashlib.sha1(b"blob %d\0" % len(text) + text).hexdigest() == "85d51174763f1de8b35695909a725534db481984"


def test_the_rtx_pro_6000_entry_of_the_default_config_is_checked_against_its_table() -> None:
    balanced = yaml.safe_load((FIXTURES / "config-default.yaml").read_text())["mig-configs"]["all-balanced"]
    (rtx,) = [e for e in balanced if e["device-filter"] == ["0x2BB510DE"]]
    rtx["mig-devices"]["2g.48gb"] = 2  # 2 + 2 x 2 slices: one more than the GPU's four
    (problem,) = lint_mig_config({"version": "v1", "mig-configs": {"all-balanced": [rtx]}})
    assert (problem.severity, problem.message.endswith("(on RTX PRO 6000 Blackwell)")) == ("error", True)


def test_a_problem_in_the_gpu_operators_configmap_points_into_its_data_at_the_files_line(tmp_path: Path) -> None:
    changed = tmp_path / "configmap.yaml"
    changed.write_text((FIXTURES / "gpu-operator-mig-manager-configmap.yaml").read_text()
                       .replace('"1g.5gb": 7', '"1g.5gb": 8', 1))
    (problem,) = lint_paths([str(changed)])[0]
    assert str(problem) == (f"{changed}:24: /data/config.yaml/mig-configs/all-1g.5gb/0/mig-devices/1g.5gb: 8 x 1g.5gb "
                            "is more than the 7 that fit on one GPU (on A100/A800-40GB)")


def test_a_configmap_without_a_mig_parted_config_is_an_error(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  hooks.yaml: 'version: v1'\n")
    (problem,) = lint_paths([str(other)])[0]
    assert (problem.is_error, problem.problem.path, problem.problem.line) == (True, "/data", 3)


def test_a_4g_beside_a_3g_on_an_a100_lints_clean() -> None:
    assert report("valid-4g-3g.yaml") == ([], [])


def test_a_4g_beside_a_3g_is_an_error_for_a100s_on_drivers_before_r510() -> None:
    (problem,) = lint_paths(["valid-4g-3g.yaml"], driver_before="R510")[0]
    assert str(problem) == ("valid-4g-3g.yaml:9: /mig-configs/four-and-three/0/mig-devices: a 4g and a 3g instance "
                            "cannot share one GPU on drivers before R510 (NVIDIA MIG User Guide) (on A100/A800-40GB)")


def test_the_b300_media_extension_profile_lints_clean() -> None:
    assert report("b300-media.yaml") == ([], [])


def test_two_media_extension_instances_on_one_gpu_are_still_an_error() -> None:
    devices = "/mig-configs/b300-two-media/0/mig-devices"
    assert report("two-media-one-gpu.yaml") == ([
        f"two-media-one-gpu.yaml:10: {devices}/1g.34gb+me: 2 x 1g.34gb+me is more than the 1 that fit on one GPU "
        "(on B300)",
        f"two-media-one-gpu.yaml:9: {devices}: 2 +me instances asked for; a GPU has at most 1 (on B300)",
    ], [])


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
    entry = {"device-filter": ["0x20B010DE", "0x2BB310DE"], "devices": "all", "mig-enabled": True,
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
    assert (result.exit_code, result.stdout.splitlines(), result.stderr) == (
        0, [UNLISTED_GPU_WARNING], "mlgate: mig-lint: 1 file checked: 1 warning\n")


def test_mig_lint_passes_all_of_nvidias_configs_silently() -> None:
    result = CliRunner().invoke(cli, ["mig-lint", *NVIDIA_CONFIGS])
    assert (result.exit_code, result.stdout) == (0, "")


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


def test_mig_lint_refuses_a_4g_beside_a_3g_only_when_told_the_drivers_predate_r510():
    layout = str(FIXTURES / "valid-4g-3g.yaml")
    assert CliRunner().invoke(cli, ["mig-lint", layout]).exit_code == 0
    old = CliRunner().invoke(cli, ["mig-lint", "--driver-before", "R510", layout])
    assert old.exit_code == 1 and "a 4g and a 3g instance cannot share one GPU on drivers before R510" in old.output
    assert CliRunner().invoke(cli, ["mig-lint", "--driver-before", "R470", layout]).exit_code == 2
