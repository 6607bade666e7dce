from pathlib import Path
from typing import get_args

import pytest

from mlgate.loading.linemap import compose_with_lines, line_for
from mlgate.rules.devices import BUILT_IN
from mlgate.rules.mig_layout import LayoutProblem, lint_mig_config, placeable, render, with_lines
from mlgate.rules.mig_tables import MODELS, GpuModel, ModelKey, profile_of_resource, resource_name

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mig-configs"
A100_40 = "0x20B010DE"
A100_80 = "0x20B210DE"
H100_80 = "0x233010DE"
A30 = "0x20B710DE"
H200 = "0x233510DE"
B200 = "0x290110DE"
H100_NVL = "0x232110DE"
DEVICES = "/mig-configs/c/0/mig-devices"


def entry(mig_devices: dict, device_filter: str | list | None = None, enabled: bool = True) -> dict:
    item: dict = {"devices": "all", "mig-enabled": enabled, "mig-devices": mig_devices}
    if device_filter is not None:
        item["device-filter"] = device_filter
    return item


def config(*entries: dict) -> dict:
    return {"version": "v1", "mig-configs": {"c": list(entries)}}


def lint(mig_devices: dict, device_filter: str | list | None = None, enabled: bool = True) -> list[LayoutProblem]:
    return lint_mig_config(config(entry(mig_devices, device_filter, enabled)))


def device_filter(model: GpuModel) -> list[str]:
    """mig-parted's spelling of every device id of `model`."""
    return [f"0x{i:04X}10DE" for i in model.device_ids]


def lint_mig_file(path: Path) -> list[str]:
    """What `mlgate mig-lint FILE` prints: the rules-layer linter plus the loading layer's line map."""
    data, lines = compose_with_lines(path.read_text())
    return render(with_lines(lint_mig_config(data), lambda p: line_for(lines, p)), path.name)


def test_allow_every_layout_in_mig_parteds_default_config():
    data = compose_with_lines((FIXTURES / "config-default.yaml").read_text())[0]
    assert [p for p in lint_mig_config(data) if p.is_error] == []


@pytest.mark.parametrize(
    ("mig_devices", "device_filter"),
    [
        ({"3g.20gb": 2}, A100_40),
        ({"3g.20gb": 1, "2g.10gb": 2}, A100_40),
        ({"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}, A100_40),
        ({"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}, A100_40),
        ({"4g.20gb": 1, "1g.5gb": 3}, A100_40),
        ({"2g.10gb": 3, "1g.5gb": 1}, A100_40),
        ({"2g.10gb": 2, "1g.5gb": 3}, A100_40),
        ({"2g.10gb": 1, "1g.5gb": 5}, A100_40),
        ({"1g.5gb": 7}, A100_40),
        ({"1g.5gb": 6, "1g.5gb+me": 1}, A100_40),
        ({"2g.10gb": 3, "1g.10gb": 1}, A100_40),
        ({"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, A100_40),
        ({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, A100_80),
        ({"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}, H100_80),
        ({"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, H100_80),
        ({"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}, H200),
        ({"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}, B200),
        ({"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}, H100_NVL),
        ({"4g.24gb": 1}, A30),
        ({"2g.12gb": 2}, A30),
        ({"2g.12gb": 1, "1g.6gb": 2}, A30),
        ({"1g.6gb": 4}, A30),
        ({"1g.6gb": 2, "2g.12gb": 1}, [A30]),
    ],
)
def test_allow_known_good_geometry(mig_devices, device_filter):
    assert lint(mig_devices, device_filter) == []


def test_allow_good_geometry_without_a_device_filter():
    assert lint({"3g.20gb": 1, "2g.10gb": 2}) == []


SEVEN_SLICE = [m for m in MODELS.values() if m.compute_slices == 7]


def four_and_three(model: GpuModel) -> dict[str, int]:
    """One 4g and one 3g instance, named as `model` names them."""
    first = {p.shape.compute: name for name, p in reversed(model.profiles.items()) if not p.media}
    return {first[4]: 1, first[3]: 1}


@pytest.mark.parametrize("model", SEVEN_SLICE, ids=[m.key for m in SEVEN_SLICE])
def test_allow_a_4g_next_to_a_3g_on_every_seven_slice_model(model):
    assert lint(four_and_three(model), device_filter(model)) == []


def test_deny_a_4g_next_to_a_3g_on_an_a100_when_asked_for_drivers_before_r510():
    problems = lint_mig_config(config(entry({"4g.20gb": 1, "3g.20gb": 1}, A100_40)), driver_before="R510")
    assert [(p.path, p.message) for p in problems] == [(DEVICES, (
        "a 4g and a 3g instance cannot share one GPU on drivers before R510 (NVIDIA MIG User Guide) "
        "(on A100/A800-40GB)"))]


@pytest.mark.parametrize("model", [m for m in SEVEN_SLICE if m.key not in ("a100-40gb", "a100-80gb")],
                         ids=[m.key for m in SEVEN_SLICE if m.key not in ("a100-40gb", "a100-80gb")])
def test_the_pre_r510_rule_leaves_gpus_that_never_ran_such_drivers_alone(model):
    assert lint_mig_config(config(entry(four_and_three(model), device_filter(model))), driver_before="R510") == []


def test_without_a_filter_the_pre_r510_rule_names_only_the_ampere_models():
    (problem,) = lint_mig_config(config(entry({"4g.40gb": 1, "3g.40gb": 1})), driver_before="R510")
    assert problem.message.endswith("(on A100/A800-80GB)")


def test_deny_7g_with_anything_else():
    (problem,) = lint({"7g.40gb": 1, "1g.5gb": 1}, A100_40)
    assert "cannot be placed on one GPU" in problem.message


def test_deny_layout_whose_memory_slices_run_out_while_compute_is_left():
    (problem,) = lint({"1g.10gb": 4, "2g.10gb": 1}, A100_40)  # 6 compute slices, 10 memory slices
    assert problem.message.startswith("4 x 1g.10gb + 1 x 2g.10gb cannot be placed")


def test_deny_two_media_extension_instances_on_one_gpu():
    (problem,) = lint({"1g.6gb+me": 1, "2g.12gb+me": 1}, A30)
    assert problem.path == DEVICES
    assert "2 +me instances asked for; a GPU has at most 1" in problem.message


def test_deny_more_media_instances_of_one_profile_than_fit():
    problems = lint({"1g.5gb+me": 2}, A100_40)
    assert f"{DEVICES}/1g.5gb+me" in [p.path for p in problems]


def test_deny_eight_1g_instances():
    (problem,) = lint({"1g.5gb": 8}, A100_40)
    assert problem.path == f"{DEVICES}/1g.5gb"
    assert problem.message == "8 x 1g.5gb is more than the 7 that fit on one GPU (on A100/A800-40GB)"


def test_deny_four_2g_instances():
    (problem,) = lint({"2g.10gb": 4}, A100_40)
    assert "4 x 2g.10gb is more than the 3" in problem.message


def test_deny_a30_with_a_3g_profile_and_suggest_its_own_profiles():
    (problem,) = lint({"3g.20gb": 1}, A30)
    assert problem.path == f"{DEVICES}/3g.20gb"
    assert problem.message == (
        "3g.20gb is not a profile of this GPU; closest: 4g.24gb, 2g.12gb, 2g.12gb+me (on A30-24GB)"
    )


def test_1g_10gb_means_four_instances_on_a100_40gb_but_seven_on_80gb():
    assert lint({"1g.10gb": 4}, A100_40) == []
    assert lint({"1g.10gb": 7}, [A100_80, H100_80]) == []
    (problem,) = lint({"1g.10gb": 5}, A100_40)
    assert "5 x 1g.10gb is more than the 4" in problem.message


def test_without_a_filter_1g_10gb_times_5_is_only_wrong_for_a100_40gb():
    (problem,) = lint({"1g.10gb": 5})
    assert problem.message.endswith("(on A100/A800-40GB)")


def test_deny_profile_unknown_to_every_model():
    (problem,) = lint({"1g.7gb": 1})
    assert problem.path == f"{DEVICES}/1g.7gb"
    assert problem.message == "unknown MIG profile '1g.7gb'; closest: 1g.6gb, 1g.5gb, 1g.10gb"


def test_deny_profiles_of_different_models_in_one_unfiltered_entry():
    (problem,) = lint({"1g.5gb": 1, "1g.6gb": 1})
    assert problem.path == DEVICES
    assert "no GPU model offers all of 1g.5gb, 1g.6gb" in problem.message


def test_deny_mig_devices_when_mig_is_disabled():
    (problem,) = lint({"1g.5gb": 7}, enabled=False)
    assert problem.message == "MIG devices are listed but mig-enabled is false"


def test_allow_mig_disabled_without_devices():
    assert lint({}, enabled=False) == []


def test_warn_about_device_id_mlgate_has_no_table_for():
    (problem,) = lint({"4g.48gb": 1}, ["0x2BB310DE"])
    assert (problem.path, problem.severity) == ("/mig-configs/c/0/device-filter/0", "warning")
    assert "is not in mlgate's MIG tables" in problem.message


def test_allow_device_id_mlgate_has_no_table_for_when_mig_is_disabled():
    assert lint({}, ["0x1FB010DE"], enabled=False) == []


def test_deny_malformed_file_structure():
    data = {"version": "v2", "mig-configs": {"c": [{"mig-enabled": "yes", "mig-devices": {"1g.5gb": "seven"}}]}}
    found = {(p.path, p.message) for p in lint_mig_config(data)}
    assert ("/version", "version must be 'v1', got 'v2'") in found
    assert ("/mig-configs/c/0", "missing required field 'devices'") in found
    assert ("/mig-configs/c/0/mig-enabled", "must be true or false, got 'yes'") in found
    assert ("/mig-configs/c/0/mig-devices/1g.5gb", "count must be a whole number >= 0, got 'seven'") in found


def test_deny_enabled_entry_without_mig_devices():
    data = {"version": "v1", "mig-configs": {"c": [{"devices": "all", "mig-enabled": True}]}}
    assert [p.path for p in lint_mig_config(data)] == ["/mig-configs/c/0"]


def test_deny_non_mapping_document():
    assert lint_mig_config(["not", "a", "config"])[0].path == ""


def test_broken_file_reports_file_line_path_and_message():
    assert lint_mig_file(FIXTURES / "broken-layouts.yaml") == [
        "broken-layouts.yaml:9: /mig-configs/eight-small/0/mig-devices/1g.5gb: 8 x 1g.5gb is more than the 7 "
        "that fit on one GPU (on A100/A800-40GB)",
        "broken-layouts.yaml:15: /mig-configs/a30-with-3g/0/mig-devices/3g.20gb: 3g.20gb is not a profile of this "
        "GPU; closest: 4g.24gb, 2g.12gb, 2g.12gb+me (on A30-24GB)",
        "broken-layouts.yaml:19: /mig-configs/disabled-with-devices/0/mig-devices: MIG devices are listed but "
        "mig-enabled is false",
    ]


def test_problem_without_a_line_renders_without_one():
    assert LayoutProblem("/version", "bad").render("f.yaml") == "f.yaml: /version: bad"


def test_warning_renders_with_its_severity_and_an_error_without():
    assert LayoutProblem("/x", "odd", 3, "warning").render("f.yaml") == "f.yaml:3: /x: warning: odd"
    assert LayoutProblem("/x", "bad", 3).render("f.yaml") == "f.yaml:3: /x: bad"


def test_allow_device_filter_with_subsystem_id():
    assert lint({"1g.5gb": 7}, f"{A100_40}:0x145F10DE") == []


def test_every_model_key_is_in_the_literal_that_policies_validate_against():
    assert set(get_args(ModelKey)) == set(MODELS)


@pytest.mark.parametrize("model", list(MODELS.values()), ids=list(MODELS))
def test_table_maxima_agree_with_placements(model):
    for profile in model.profiles.values():
        if profile.media:
            continue  # one +me per GPU is a rule of its own, not a placement limit
        assert placeable({profile: profile.max_count}, model), profile.name
        assert not placeable({profile: profile.max_count + 1}, model), profile.name


def test_resource_names_write_plus_as_dot_and_read_back():
    assert resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert profile_of_resource("nvidia.com/mig-1g.10gb.me") == "1g.10gb+me"
    assert profile_of_resource("nvidia.com/gpu") is None


PROFILES = [(m, p) for m in MODELS.values() for p in m.profiles.values()]
PROFILE_IDS = [f"{m.key}:{p.name}" for m, p in PROFILES]


@pytest.mark.parametrize(("model", "profile"), PROFILES, ids=PROFILE_IDS)
def test_every_profile_of_every_model_fits_its_maximum_on_that_model_and_not_one_more(model, profile):
    assert lint({profile.name: profile.max_count}, device_filter(model)) == []
    too_many = lint({profile.name: profile.max_count + 1}, device_filter(model))
    assert f"{DEVICES}/{profile.name}" in [p.path for p in too_many]


@pytest.mark.parametrize(("model", "profile"), PROFILES, ids=PROFILE_IDS)
def test_every_profile_round_trips_through_its_resource_name_which_counts_as_a_gpu(model, profile):
    resource = resource_name(profile.name)
    assert profile_of_resource(resource) == profile.name
    assert resource in BUILT_IN


@pytest.mark.parametrize(("profile", "resource"), [
    ("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"),
    ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"),
    ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
    ("1g.34gb+me", "nvidia.com/mig-1g.34gb.me"),
])
def test_blackwell_profile_variants_are_written_as_the_device_plugin_writes_them(profile, resource):
    assert (resource_name(profile), profile_of_resource(resource)) == (resource, profile)


@pytest.mark.parametrize(("mig_devices", "device_filter"), [
    ({"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}, "0x318210DE"),  # mig-parted all-balanced, B300
    ({"1g.34gb+me": 1, "1g.34gb": 6}, "0x318210DE"),
    ({"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}, "0x31C210DE"),  # all-balanced, GB300
    ({"1g.35gb+me": 1}, "0x31C210DE"),
    ({"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}, "0x294110DE"),  # all-balanced, GB200 as mig-parted names it
    ({"1g.24gb": 2, "2g.47gb": 1, "3g.95gb": 1}, "0x294110DE"),  # and as GPU Operator 25.3.0 names it
    ({"7g.189gb": 1}, "0x294110DE"),
    ({"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}, "0x234810DE"),  # all-balanced, GH200 144G HBM3e
    ({"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}, "0x234210DE"),  # all-balanced, H100-96GB / GH200
    ({"1g.24gb": 2, "2g.48gb": 1}, "0x2BB510DE"),  # all-balanced, RTX PRO 6000 Blackwell
    ({"1g.24gb+me.all": 1, "1g.24gb-me": 3}, "0x2BB510DE"),
    ({"2g.48gb+gfx": 1, "1g.24gb+gfx": 2}, "0x2BB510DE"),
])
def test_allow_the_layouts_nvidia_gives_its_newer_gpus(mig_devices, device_filter):
    assert lint(mig_devices, device_filter) == []


def test_deny_two_media_instances_when_one_takes_every_media_engine():
    (problem,) = lint({"1g.24gb+me": 1, "2g.48gb+me.all": 1}, "0x2BB510DE")
    assert problem.message == "2 +me instances asked for; a GPU has at most 1 (on RTX PRO 6000 Blackwell)"


def test_deny_a_gb200_layout_that_overfills_the_gpu_across_both_name_sets():
    (problem,) = lint({"1g.23gb": 4, "1g.24gb": 4}, "0x294110DE")
    assert problem.message.endswith("cannot be placed on one GPU: memory or compute slices run out (on GB200)")


def test_deny_more_rtx_pro_6000_instances_than_its_four_slices_hold():
    (problem,) = lint({"2g.48gb": 1, "1g.24gb-me": 3}, "0x2BB510DE")
    assert "cannot be placed on one GPU" in problem.message


def test_suggest_the_rtx_pro_6000s_own_variant_for_a_variant_it_lacks():
    (problem,) = lint({"4g.96gb-me": 1}, "0x2BB510DE")
    assert problem.message == ("4g.96gb-me is not a profile of this GPU; closest: 4g.96gb, 4g.96gb+gfx, 2g.48gb-me "
                               "(on RTX PRO 6000 Blackwell)")
