import pytest
from builders import change, decide, outcome, pod, trainingjob

from mlgate.loading.policies import compile_policy
from mlgate.model.facts import StaticFacts
from mlgate.model.results import Outcome
from mlgate.rules.mig_tables import MODELS, model_of_product, resource_name

RESOURCES = "/spec/containers/0/resources"
MIG_1G = "nvidia.com/mig-1g.5gb"
SELECTOR = "/spec/nodeSelector"
PRODUCT = "nvidia.com/gpu.product"
A100_40_ONLY = {"gpuModels": ["a100-40gb"]}


def mig_pod(resource: str = MIG_1G, count: int = 1) -> dict:
    """The builder pod, asking for MIG devices instead of whole GPUs."""
    return change(pod(), RESOURCES, {"limits": {resource: count}})


def limit(resource: str) -> str:
    return f"{RESOURCES}/limits/{resource.replace('/', '~1')}"


def node(name: str, allocatable: dict, labels: dict | None = None) -> dict:
    return {"kind": "Node", "metadata": {"name": name, "labels": labels or {}}, "status": {"allocatable": allocatable}}


def facts(*nodes: dict) -> StaticFacts:
    return StaticFacts.from_objects(nodes)


A100_NODE = node("a100-0", {"cpu": "96", MIG_1G: "7"}, {"nvidia.com/mig.strategy": "mixed"})
BALANCED_NODE = node("a100-1", {MIG_1G: "2", "nvidia.com/mig-2g.10gb": "1", "nvidia.com/mig-3g.20gb": "1"})


# mig.profile-exists


def test_allow_profile_that_the_named_model_offers():
    assert outcome(mig_pod(), "mig.profile-exists", A100_40_ONLY) is Outcome.PASS


def test_deny_profile_the_named_model_lacks_and_suggest_its_closest_profiles():
    decision = decide(mig_pod("nvidia.com/mig-1g.6gb"), "mig.profile-exists", A100_40_ONLY)
    (finding,) = decision.violations[0].findings
    assert finding.reason == "unknown mig profile"
    assert finding.path == limit("nvidia.com/mig-1g.6gb")
    assert finding.fix == "use one of: nvidia.com/mig-1g.5gb, nvidia.com/mig-1g.10gb, nvidia.com/mig-1g.5gb.me"


def test_allow_a30_profile_when_every_model_is_allowed():
    assert outcome(mig_pod("nvidia.com/mig-1g.6gb"), "mig.profile-exists") is Outcome.PASS


def test_media_extension_resource_is_checked_per_model():
    obj = mig_pod("nvidia.com/mig-1g.10gb.me")
    assert outcome(obj, "mig.profile-exists", {"gpuModels": ["a100-80gb"]}) is Outcome.PASS
    assert outcome(obj, "mig.profile-exists", A100_40_ONLY) is Outcome.FAIL


def test_deny_profile_no_model_has():
    assert outcome(mig_pod("nvidia.com/mig-1g.7gb"), "mig.profile-exists") is Outcome.FAIL


def test_unknown_gpu_model_key_is_a_load_error():
    document = {
        "apiVersion": "mlgate.dev/v1alpha1", "kind": "ClusterMLPolicy", "metadata": {"name": "p"},
        "spec": {"rules": [{"rule": "mig.profile-exists", "params": {"gpuModels": ["a100-40gb", "v100"]}}]},
    }
    policy, errors = compile_policy(document, "<test>")
    assert policy is None
    assert errors[0].field == "spec.rules[0].params.gpuModels[1]"
    assert "'a100-40gb'" in errors[0].message


def test_skip_pod_without_mig_devices_or_mig_selectors():
    assert outcome(pod(), "mig.profile-exists") is Outcome.SKIP


def test_deny_mig_resource_under_single_strategy():
    decision = decide(mig_pod(), "mig.profile-exists", {"strategy": "single"})
    assert decision.violations[0].findings[0].reason == "mig resource under single strategy"
    assert outcome(mig_pod(), "mig.profile-exists", {"strategy": "mixed"}) is Outcome.PASS


def test_allow_single_strategy_product_selector_naming_a_real_profile():
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    assert outcome(obj, "mig.profile-exists", {"strategy": "single", **A100_40_ONLY}) is Outcome.PASS


def test_deny_single_strategy_product_selector_naming_a_missing_profile():
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.6gb"})
    decision = decide(obj, "mig.profile-exists", {"strategy": "single", **A100_40_ONLY})
    (finding,) = decision.violations[0].findings
    assert finding.path == "/spec/nodeSelector/nvidia.com~1gpu.product"
    assert "1g.5gb" in finding.fix


def test_deny_single_strategy_product_in_required_node_affinity_at_the_value():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["NVIDIA-A30-MIG-3g.20gb"]}]}]}}}
    decision = decide(change(pod(), "/spec/affinity", affinity), "mig.profile-exists", {"gpuModels": ["a30-24gb"]})
    assert decision.violations[0].findings[0].path.endswith("/matchExpressions/0/values/0")


def test_deny_single_strategy_selector_under_mixed_strategy():
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb"})
    decision = decide(obj, "mig.profile-exists", {"strategy": "mixed"})
    (finding,) = decision.violations[0].findings
    assert finding.reason == "mig strategy mismatch"
    assert "nvidia.com/mig-3g.40gb" in finding.fix


def test_deny_mig_resource_together_with_single_strategy_selector():
    obj = change(mig_pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"})
    assert decide(obj, "mig.profile-exists").violations[0].findings[0].reason == "mig strategies mixed"


def test_trainingjob_mig_sugar_finding_points_at_the_sugar_field():
    decision = decide(change(trainingjob(), "/spec/resources/mig", "1g.6gb"), "mig.profile-exists", A100_40_ONLY)
    assert [f.path for f in decision.violations[0].findings] == ["/spec/resources/mig"]


# mig.node-inventory


def test_skip_inventory_without_cluster_facts():
    assert outcome(mig_pod(), "mig.node-inventory") is Outcome.SKIP


def test_skip_inventory_when_facts_hold_no_nodes():
    assert outcome(mig_pod(), "mig.node-inventory", facts=facts()) is Outcome.SKIP


def test_allow_mig_devices_a_node_advertises():
    assert outcome(mig_pod(count=7), "mig.node-inventory", facts=facts(A100_NODE)) is Outcome.PASS


def test_deny_mig_profile_no_node_advertises():
    decision = decide(mig_pod("nvidia.com/mig-3g.20gb"), "mig.node-inventory", facts=facts(A100_NODE))
    (finding,) = decision.violations[0].findings
    assert finding.reason == "mig devices not offered"
    assert finding.path == limit("nvidia.com/mig-3g.20gb")
    assert MIG_1G in finding.fix


def test_deny_more_instances_than_any_node_offers():
    decision = decide(mig_pod(count=8), "mig.node-inventory", facts=facts(A100_NODE, BALANCED_NODE))
    (finding,) = decision.violations[0].findings
    assert finding.detail == 'container "main" asks for 8 nvidia.com/mig-1g.5gb; the most any node offers is 7'


def test_deny_pod_whose_containers_together_need_more_than_one_node_has():
    sidecar = {"name": "side", "image": "registry.example/side:1", "resources": {"limits": {MIG_1G: 4}}}
    obj = change(mig_pod(count=4), "/spec/containers/-", sidecar)
    decision = decide(obj, "mig.node-inventory", facts=facts(A100_NODE))
    (finding,) = decision.violations[0].findings
    assert finding.reason == "no node fits the pod's mig devices"
    assert finding.path == "/spec/containers"


def test_init_containers_count_one_at_a_time():
    init = {"name": "warm", "image": "registry.example/warm:1", "resources": {"limits": {MIG_1G: 7}}}
    obj = change(mig_pod(count=7), "/spec/initContainers", [init])
    assert outcome(obj, "mig.node-inventory", facts=facts(A100_NODE)) is Outcome.PASS


def test_deny_when_the_pods_node_selector_rules_out_every_node_with_the_profile():
    obj = change(mig_pod(), SELECTOR, {"pool": "inference"})
    cluster = facts(A100_NODE, node("cpu-0", {"cpu": "64"}, {"pool": "inference"}))
    decision = decide(obj, "mig.node-inventory", facts=cluster)
    assert "no node the pod may run on (1 of 2) advertises" in decision.deny_message()


def test_allow_single_strategy_pod_on_a_node_with_that_product():
    product = "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    cluster = facts(node("dgx-0", {"nvidia.com/gpu": "56"}, {PRODUCT: product, "nvidia.com/mig.strategy": "single"}))
    assert outcome(change(pod(), SELECTOR, {PRODUCT: product}), "mig.node-inventory", facts=cluster) is Outcome.PASS


def test_deny_single_strategy_pod_when_no_node_has_that_product():
    cluster = facts(node("dgx-0", {"nvidia.com/gpu": "56"}, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"}))
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-2g.10gb"})
    decision = decide(obj, "mig.node-inventory", facts=cluster)
    (finding,) = decision.violations[0].findings
    assert finding.reason == "no node has mig product"
    assert finding.path == "/spec/nodeSelector/nvidia.com~1gpu.product"


def test_skip_inventory_for_whole_gpu_pods():
    assert outcome(pod(), "mig.node-inventory", facts=facts(A100_NODE)) is Outcome.SKIP


# mig.profile-exists: a single-strategy product names its GPU model, whose own profiles count


@pytest.mark.parametrize("product", [
    "NVIDIA-A100-SXM4-80GB-MIG-1g.5gb",  # an A100-40GB profile
    "NVIDIA-H100-80GB-HBM3-MIG-7g.40gb",  # the H100's whole-GPU profile is 7g.80gb
    "NVIDIA-A30-MIG-3g.20gb",  # the A30 has no 3g profile
])
def test_deny_product_selector_naming_a_profile_its_own_model_lacks(product):
    decision = decide(change(pod(), SELECTOR, {PRODUCT: product}), "mig.profile-exists")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "unknown mig profile"
    assert finding.path == "/spec/nodeSelector/nvidia.com~1gpu.product"


@pytest.mark.parametrize("product", [
    "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", "NVIDIA-H100-80GB-HBM3-MIG-7g.80gb", "NVIDIA-A30-MIG-2g.12gb",
    "A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA-H100-80GB-HBM3-MIG-3g.40gb-SHARED",
])
def test_allow_product_selector_naming_a_profile_of_its_model(product):
    assert outcome(change(pod(), SELECTOR, {PRODUCT: product}), "mig.profile-exists") is Outcome.PASS


def test_deny_product_in_node_affinity_whose_model_lacks_the_profile_at_the_value():
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3-MIG-7g.40gb"]}]}]}}}
    decision = decide(change(pod(), "/spec/affinity", affinity), "mig.profile-exists")
    (finding,) = decision.violations[0].findings
    assert finding.path.endswith("/matchExpressions/0/values/0")
    assert "which H100/H800-80GB does not offer" in finding.detail
    assert finding.fix.endswith("one of: 7g.80gb, 4g.40gb, 3g.40gb")


def test_deny_product_of_a_model_outside_the_policys_gpu_models():
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"})
    decision = decide(obj, "mig.profile-exists", A100_40_ONLY)
    assert decision.violations[0].findings[0].reason == "mig gpu model not allowed"


def test_deny_product_value_with_a_plus_no_label_can_hold():
    obj = change(pod(), SELECTOR, {PRODUCT: "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb+me"})
    (finding,) = decide(obj, "mig.profile-exists").violations[0].findings
    assert finding.reason == "mig product not a label value"
    assert "nvidia.com/mig-1g.5gb.me" in finding.fix


def test_deny_media_extension_resource_written_with_a_plus():
    decision = decide(mig_pod("nvidia.com/mig-1g.5gb+me"), "mig.profile-exists")
    (finding,) = decision.violations[0].findings
    assert finding.reason == "mig resource name invalid"
    assert finding.path == limit("nvidia.com/mig-1g.5gb+me")
    assert finding.fix.startswith("ask for nvidia.com/mig-1g.5gb.me")
    assert outcome(mig_pod("nvidia.com/mig-1g.5gb.me"), "mig.profile-exists") is Outcome.PASS


def test_a_native_sidecars_mig_devices_count_beside_the_main_containers():
    sidecar = {"name": "side", "image": "registry.example/side:1", "restartPolicy": "Always",
               "resources": {"limits": {MIG_1G: 4}}}
    obj = change(mig_pod(count=4), "/spec/initContainers", [sidecar])
    decision = decide(obj, "mig.node-inventory", facts=facts(A100_NODE))
    (finding,) = decision.violations[0].findings
    assert finding.reason == "no node fits the pod's mig devices"
    assert finding.detail.startswith("the pod needs 8 x nvidia.com/mig-1g.5gb on one node")


# mig.profile-exists: the GPU model a pod selects, for every model in the tables

PRODUCTS = {  # GPU feature discovery's nvidia.com/gpu.product for one GPU of each model
    "a30-24gb": "NVIDIA-A30", "a100-40gb": "NVIDIA-A100-SXM4-40GB", "a100-80gb": "NVIDIA-A100-SXM4-80GB",
    "h100-80gb": "NVIDIA-H100-80GB-HBM3", "h100-nvl-94gb": "NVIDIA-H100-NVL", "h100-96gb": "NVIDIA-GH200-480GB",
    "gh200-144gb": "NVIDIA-GH200-144G-HBM3e", "h200-141gb": "NVIDIA-H200", "b200-180gb": "NVIDIA-B200",
    "gb200": "NVIDIA-GB200", "b300": "NVIDIA-B300-SXM6-AC", "gb300": "NVIDIA-GB300",
    "rtx-pro-6000": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
}
PROFILES = [(key, name) for key, model in MODELS.items() for name in model.profiles]
H100_PRODUCT = PRODUCTS["h100-80gb"]
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def on_product(obj: dict, product: str) -> dict:
    return change(obj, SELECTOR, {PRODUCT: product})


def product_affinity(*terms: list[str]) -> dict:
    """Required node affinity with one term per list: `In` on the product label over its values (none: no product)."""
    return {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": PRODUCT, "operator": "In", "values": values} if values else
                              {"key": "pool", "operator": "In", "values": ["gpu"]}]} for values in terms]}}}


def lacking(key: str) -> str:
    """A profile of another model that model `key` does not offer."""
    return next(name for other in MODELS.values() for name in other.profiles if name not in MODELS[key].profiles)


def test_every_model_in_the_tables_has_a_product_label_these_tests_select_it_by():
    assert {key: model_of_product(product).key for key, product in PRODUCTS.items()} == {k: k for k in MODELS}


@pytest.mark.parametrize(("key", "profile"), PROFILES, ids=[f"{k}:{p}" for k, p in PROFILES])
def test_allow_every_profile_of_the_model_the_pods_node_selector_names(key, profile):
    assert outcome(on_product(mig_pod(resource_name(profile)), PRODUCTS[key]), "mig.profile-exists") is Outcome.PASS


@pytest.mark.parametrize(("key", "profile"), PROFILES, ids=[f"{k}:{p}" for k, p in PROFILES])
def test_allow_every_profile_of_a_model_as_its_single_strategy_product_writes_it(key, profile):
    obj = on_product(pod(), f"{PRODUCTS[key]}-MIG-{profile.replace('+', '')}")  # the label sanitiser drops '+'
    assert outcome(obj, "mig.profile-exists") is Outcome.PASS


@pytest.mark.parametrize("key", list(MODELS))
def test_deny_a_profile_the_model_the_pod_selects_lacks(key):
    resource = resource_name(lacking(key))
    decision = decide(on_product(mig_pod(resource), PRODUCTS[key]), "mig.profile-exists")
    (finding,) = decision.violations[0].findings
    assert (finding.reason, finding.path) == ("mig profile not on selected gpu", limit(resource))


def test_deny_an_a100_40gb_profile_on_a_pod_that_selects_h100s():
    decision = decide(on_product(mig_pod(MIG_1G), H100_PRODUCT), "mig.profile-exists")
    (finding,) = decision.violations[0].findings
    assert finding.detail == (
        f'container "main" asks for {MIG_1G}, but the pod selects {PRODUCT}={H100_PRODUCT} (H100/H800-80GB), '
        "which has no 1g.5gb profile, so no node it may run on offers it")
    assert finding.fix == ("ask for one of: nvidia.com/mig-1g.10gb, nvidia.com/mig-1g.20gb, "
                           "nvidia.com/mig-1g.10gb.me, or select a GPU model that has 1g.5gb")


def test_deny_a_profile_the_model_in_required_node_affinity_lacks():
    obj = change(mig_pod(MIG_1G), "/spec/affinity", product_affinity([H100_PRODUCT]))
    assert decide(obj, "mig.profile-exists").violations[0].findings[0].reason == "mig profile not on selected gpu"


def test_allow_a_profile_one_of_the_models_in_node_affinity_offers():
    obj = change(mig_pod(MIG_1G), "/spec/affinity", product_affinity([H100_PRODUCT, PRODUCTS["a100-40gb"]]))
    assert outcome(obj, "mig.profile-exists") is Outcome.PASS


def test_allow_any_profile_when_one_node_affinity_term_leaves_the_model_open():
    obj = change(mig_pod(MIG_1G), "/spec/affinity", product_affinity([H100_PRODUCT], []))
    assert outcome(obj, "mig.profile-exists") is Outcome.PASS


def test_allow_any_known_profile_under_a_product_mlgate_cannot_place():
    assert outcome(on_product(mig_pod(MIG_1G), "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"),
                   "mig.profile-exists") is Outcome.PASS


def test_gh200_480gb_is_the_96gb_gh200():
    assert outcome(on_product(mig_pod("nvidia.com/mig-1g.12gb"), "NVIDIA-GH200-480GB"),
                   "mig.profile-exists") is Outcome.PASS
    assert outcome(on_product(mig_pod("nvidia.com/mig-1g.18gb"), "NVIDIA-GH200-480GB"),
                   "mig.profile-exists") is Outcome.FAIL


@pytest.mark.parametrize("resource", [
    "nvidia.com/mig-1g.24gb.me.all", "nvidia.com/mig-1g.24gb-me", "nvidia.com/mig-1g.24gb.gfx",
    "nvidia.com/mig-1g.34gb.me", "nvidia.com/mig-1g.35gb.me", "nvidia.com/mig-7g.189gb",
])
def test_allow_the_blackwell_resource_names_the_device_plugin_advertises(resource):
    assert outcome(mig_pod(resource), "mig.profile-exists") is Outcome.PASS


def test_deny_a_graphics_profile_resource_written_with_a_plus():
    (finding,) = decide(mig_pod("nvidia.com/mig-1g.24gb+gfx"), "mig.profile-exists").violations[0].findings
    assert finding.reason == "mig resource name invalid"
    assert finding.fix.startswith("ask for nvidia.com/mig-1g.24gb.gfx;")
