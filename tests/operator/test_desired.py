import copy
import json
from typing import Any

import pytest
from builders import change, trainingjob

from mlgate_reconciler.client import PATHS
from mlgate_reconciler.desired import desired_children
from mlgate_reconciler.desired_inference import canary_split, desired_inference_children


def by_name(children: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in children}


def pods(job: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods, an MPI launcher Job as the pod its template makes."""
    return [c if c["kind"] == "Pod" else {**c, "spec": c["spec"]["template"]["spec"]}
            for c in desired_children(job) if c["kind"] in ("Pod", "Job")]


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}


def isvc(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "mlgate.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "sent", "namespace": "ml", "uid": "u-2"},
        "spec": {"modelUri": "s3://m/v3", "runtime": "triton", "resources": {"cpu": "2"}, **spec},
    }


# --- TrainingJob: names, order, metadata -------------------------------------------------------------


def test_pytorch_job_gets_a_headless_service_then_one_pod_per_replica_in_rank_order():
    children = desired_children(trainingjob(replicas=3))
    assert [f"{c['kind']}/{c['metadata']['name']}" for c in children] == [
        "Service/llm", "Pod/llm-master-0", "Pod/llm-worker-0", "Pod/llm-worker-1"]


def test_the_headless_service_selects_every_pod_and_publishes_not_ready_addresses():
    service = by_name(desired_children(trainingjob()))["Service/llm"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"mlgate.dev/job-name": "llm"}
    port = {"name": "pytorchjob-port", "port": 23456, "targetPort": 23456, "protocol": "TCP"}
    assert service["spec"]["ports"] == [port]


def test_every_child_is_controlled_by_the_job_with_its_uid():
    job = change(trainingjob(), "/metadata/uid", "u-1")
    for child in desired_children(job):
        assert child["metadata"]["namespace"] == "ml"
        assert child["metadata"]["ownerReferences"] == [{
            "apiVersion": "mlgate.dev/v1alpha1", "kind": "TrainingJob", "name": "llm", "uid": "u-1",
            "controller": True, "blockOwnerDeletion": True}]


def test_pods_carry_replica_labels_template_labels_and_stable_dns_names():
    meta = {"labels": {"team": "nlp"}, "annotations": {"a": "b"}}
    job = change(trainingjob(replicas=2), "/spec/template/metadata", meta)
    worker = pods(job)[1]
    assert worker["metadata"]["labels"] == {"team": "nlp", "mlgate.dev/job-name": "llm",
                                            "mlgate.dev/replica-type": "worker", "mlgate.dev/replica-index": "0"}
    assert worker["metadata"]["annotations"] == {"a": "b"}
    assert (worker["spec"]["hostname"], worker["spec"]["subdomain"]) == ("llm-worker-0", "llm")
    assert worker["spec"]["restartPolicy"] == "Never"


def test_pods_keep_the_rendered_template_and_resources():
    master = pods(trainingjob(gpu=2))[0]
    main = master["spec"]["containers"][0]
    assert main["image"] == "registry.example/train:1.0"
    assert main["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert main["securityContext"]["allowPrivilegeEscalation"] is False
    assert master["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_same_job_gives_identical_children_and_is_not_modified():
    job = change(trainingjob(replicas=4), "/spec/hyperparameters", {"LR": "0.1", "BATCH": "32"})
    before = copy.deepcopy(job)
    assert desired_children(job) == desired_children(job)
    assert job == before


def test_editing_one_pod_does_not_leak_into_another_or_the_job():
    job = trainingjob(replicas=2)
    first, second = pods(job)
    first["spec"]["containers"][0]["securityContext"]["privileged"] = True
    assert "privileged" not in second["spec"]["containers"][0]["securityContext"]
    assert "privileged" not in job["spec"]["template"]["spec"]["containers"][0]["securityContext"]


# --- framework environment ---------------------------------------------------------------------------


def test_pytorch_env_gives_each_replica_its_rank_and_the_shared_master():
    envs = [env(p) for p in pods(trainingjob(replicas=3))]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["PET_NODE_RANK"] for e in envs] == ["0", "1", "2"]
    for e in envs:
        assert e["MASTER_ADDR"] == e["PET_MASTER_ADDR"] == "llm-master-0.llm"
        assert e["MASTER_PORT"] == e["PET_MASTER_PORT"] == "23456"
        assert e["WORLD_SIZE"] == e["PET_NNODES"] == "3"
        assert e["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize(("resources", "procs"), [({"gpu": 4}, "4"), ({"gpu": 1}, "1"), ({"mig": "1g.10gb"}, "1"),
                                                   ({"cpu": "8"}, "1")])
def test_pytorch_runs_one_torchrun_process_per_whole_gpu_of_the_pod(resources, procs):
    job = change(trainingjob(replicas=2), "/spec/resources", resources)
    for e in map(env, pods(job)):
        assert e["PET_NPROC_PER_NODE"] == procs
        assert e["WORLD_SIZE"] == "2"  # pods, as upstream with nprocPerNode "auto": torchrun sets its own


def test_pytorch_port_the_user_declared_is_used_and_not_duplicated():
    ports = [{"name": "pytorchjob-port", "containerPort": 29500}]
    job = change(trainingjob(), "/spec/template/spec/containers/0/ports", ports)
    master = pods(job)[0]
    assert env(master)["MASTER_PORT"] == "29500"
    assert master["spec"]["containers"][0]["ports"] == ports


def test_tensorflow_tf_config_lists_every_role_and_names_the_task():
    job = change(trainingjob(replicas=2), "/spec/framework", "tensorflow")
    job = change(job, "/spec/tensorflow", {"parameterServers": 1})
    names = [p["metadata"]["name"] for p in pods(job)]
    assert names == ["llm-chief-0", "llm-worker-0", "llm-ps-0"]
    configs = [json.loads(env(p)["TF_CONFIG"]) for p in pods(job)]
    cluster = {"chief": ["llm-chief-0.llm.ml.svc:2222"], "worker": ["llm-worker-0.llm.ml.svc:2222"],
               "ps": ["llm-ps-0.llm.ml.svc:2222"]}
    assert configs == [
        {"cluster": cluster, "task": {"type": "chief", "index": 0}, "environment": "cloud"},
        {"cluster": cluster, "task": {"type": "worker", "index": 0}, "environment": "cloud"},
        {"cluster": cluster, "task": {"type": "ps", "index": 0}, "environment": "cloud"},
    ]


def test_xgboost_env_numbers_workers_after_the_master_and_lists_worker_addresses():
    job = change(trainingjob(replicas=3), "/spec/framework", "xgboost")
    envs = [env(p) for p in pods(job)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert envs[2]["MASTER_ADDR"] == "llm-master-0.llm"
    assert envs[2]["MASTER_PORT"] == envs[2]["WORKER_PORT"] == "9999"
    assert envs[2]["WORLD_SIZE"] == "3"
    assert envs[0]["WORKER_ADDRS"] == "llm-worker-0.llm,llm-worker-1.llm"
    assert all(e["PYTHONUNBUFFERED"] == "1" for e in envs)


def test_xgboost_with_one_replica_gets_no_worker_port_or_addresses():
    job = change(trainingjob(replicas=1), "/spec/framework", "xgboost")
    (master,) = map(env, pods(job))
    assert "WORKER_PORT" not in master
    assert "WORKER_ADDRS" not in master
    assert master["WORLD_SIZE"] == "1"


def test_mpi_job_gets_a_hostfile_with_one_line_per_worker_and_gpu_slots():
    job = change(trainingjob(replicas=2, gpu=4), "/spec/framework", "mpi")
    config = by_name(desired_children(job))["ConfigMap/llm-config"]
    assert config["data"]["hostfile"].splitlines() == ["llm-worker-0.llm.ml.svc slots=4",
                                                       "llm-worker-1.llm.ml.svc slots=4"]


def test_mpi_launcher_mounts_the_hostfile_and_gets_openmpi_env_but_no_gpu():
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    launcher, worker = pods(job)[0], pods(job)[1]
    assert launcher["metadata"]["name"] == "llm-launcher-0"
    main = launcher["spec"]["containers"][0]
    assert {"name": "mlgate-mpi", "configMap": {"name": "llm-config"}} in launcher["spec"]["volumes"]
    assert {"name": "mlgate-mpi", "mountPath": "/etc/mpi", "readOnly": True} in main["volumeMounts"]
    assert env(launcher)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env(launcher)["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert "nvidia.com/gpu" not in main["resources"]["limits"]
    assert "OMPI_MCA_orte_default_hostfile" not in env(worker)


def test_mpi_launcher_gets_the_slots_and_no_visible_gpus_and_each_pod_its_role():
    job = change(trainingjob(replicas=2, gpu=4), "/spec/framework", "mpi")
    launcher, worker = map(env, pods(job)[:2])
    assert launcher["OMPI_MCA_orte_set_default_slots"] == "4"
    assert launcher["NVIDIA_VISIBLE_DEVICES"] == launcher["NVIDIA_DRIVER_CAPABILITIES"] == ""
    assert (launcher["K_MPI_JOB_ROLE"], worker["K_MPI_JOB_ROLE"]) == ("launcher", "worker")
    assert "NVIDIA_VISIBLE_DEVICES" not in worker


def test_mpi_job_gets_an_ssh_secret_mounted_at_root_ssh_in_every_pod():
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    secret = by_name(desired_children(job))["Secret/llm-ssh"]
    assert secret["type"] == "kubernetes.io/ssh-auth"
    assert "data" not in secret  # keys are made once, when the reconciler creates it
    for pod in pods(job):
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "ssh-auth")
        assert volume["secret"]["secretName"] == "llm-ssh"
        assert volume["secret"]["defaultMode"] == 0o600
        assert [i["path"] for i in volume["secret"]["items"]] == ["id_rsa", "id_rsa.pub", "authorized_keys"]
        assert {"name": "ssh-auth", "mountPath": "/root/.ssh"} in pod["spec"]["containers"][0]["volumeMounts"]


def test_mpi_workers_run_sshd_and_the_launcher_runs_the_jobs_command():
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    job = change(job, "/spec/command", ["mpirun", "python", "train.py"])
    launcher, *workers = pods(job)
    assert launcher["spec"]["containers"][0]["command"] == ["mpirun", "python", "train.py"]
    for worker in workers:
        assert worker["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd", "-De"]
        assert "args" not in worker["spec"]["containers"][0]


def test_only_mpi_jobs_get_an_ssh_secret():
    assert not [c for c in desired_children(trainingjob(replicas=2)) if c["kind"] == "Secret"]


def test_mpi_hostfile_slots_default_to_one_without_gpus():
    job = change(trainingjob(replicas=1, gpu=0), "/spec/framework", "mpi")
    config = by_name(desired_children(job))["ConfigMap/llm-config"]
    assert config["data"]["hostfile"] == "llm-worker-0.llm.ml.svc slots=1\n"


def test_jax_env_points_every_process_at_worker_zero():
    job = change(trainingjob(replicas=2), "/spec/framework", "jax")
    envs = [env(p) for p in pods(job)]
    assert [e["JAX_PROCESS_ID"] for e in envs] == [e["PROCESS_ID"] for e in envs] == ["0", "1"]
    assert envs[1]["JAX_COORDINATOR_ADDRESS"] == "llm-worker-0.llm:6666"
    assert envs[1]["COORDINATOR_ADDRESS"] == "llm-worker-0.llm"
    assert envs[1]["JAX_NUM_PROCESSES"] == envs[1]["NUM_PROCESSES"] == "2"
    assert envs[1]["PYTHONUNBUFFERED"] == "1"


# --- hyperparameters and checkpoint ------------------------------------------------------------------


def test_hyperparameters_become_env_vars_named_by_their_keys_in_sorted_order():
    job = change(trainingjob(), "/spec/hyperparameters", {"lr": "0.1", "BATCH_SIZE": "32"})
    names = [e["name"] for e in pods(job)[0]["spec"]["containers"][0]["env"]]
    assert names[-2:] == ["BATCH_SIZE", "lr"]
    assert env(pods(job)[0])["lr"] == "0.1"


def test_a_hyperparameter_never_overrides_a_framework_variable():
    job = change(trainingjob(replicas=2), "/spec/hyperparameters", {"RANK": "7", "EPOCHS": "3"})
    worker = env(pods(job)[1])
    assert worker["RANK"] == "1"
    assert worker["EPOCHS"] == "3"


def test_framework_variables_replace_the_same_names_written_in_the_template():
    job = change(trainingjob(), "/spec/template/spec/containers/0/env", [{"name": "RANK", "value": "9"},
                                                                          {"name": "KEEP", "value": "1"}])
    entries = pods(job)[0]["spec"]["containers"][0]["env"]
    assert [e for e in entries if e["name"] == "RANK"] == [{"name": "RANK", "value": "0"}]
    assert entries[0] == {"name": "KEEP", "value": "1"}


def test_checkpoint_claim_is_mounted_in_every_pod_with_checkpoint_dir():
    job = change(trainingjob(replicas=2), "/spec/checkpoint", {"claimName": "ckpt", "mountPath": "/ckpt"})
    for pod in pods(job):
        assert {"name": "mlgate-checkpoint", "persistentVolumeClaim": {"claimName": "ckpt"}} in pod["spec"]["volumes"]
        assert {"name": "mlgate-checkpoint", "mountPath": "/ckpt"} in pod["spec"]["containers"][0]["volumeMounts"]
        assert env(pod)["CHECKPOINT_DIR"] == "/ckpt"


def test_checkpoint_uri_is_only_an_env_var():
    job = change(trainingjob(), "/spec/checkpoint", {"uri": "s3://b/run1"})
    master = pods(job)[0]
    assert env(master)["CHECKPOINT_URI"] == "s3://b/run1"
    assert "volumes" not in master["spec"]
    assert "CHECKPOINT_DIR" not in env(master)


# --- gang scheduling ---------------------------------------------------------------------------------


def test_volcano_gang_gets_a_podgroup_for_every_pod_first():
    job = change(trainingjob(replicas=3), "/spec/scheduling", {"gang": True, "scheduler": "volcano", "queue": "q1"})
    children = desired_children(job)
    group = children[0]
    assert (group["apiVersion"], group["kind"], group["metadata"]["name"]) == (
        "scheduling.volcano.sh/v1beta1", "PodGroup", "llm")
    assert group["spec"] == {"minMember": 3, "queue": "q1"}
    for pod in pods(job):
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "llm"
        assert pod["metadata"]["annotations"]["scheduling.volcano.sh/queue-name"] == "q1"


def test_volcano_podgroup_takes_min_member_priority_and_the_default_queue():
    job = change(trainingjob(replicas=4), "/spec/scheduling",
                 {"gang": True, "scheduler": "volcano", "minMember": 2, "priorityClassName": "high"})
    group = desired_children(job)[0]
    assert group["spec"] == {"minMember": 2, "queue": "default", "priorityClassName": "high"}
    assert pods(job)[0]["spec"]["priorityClassName"] == "high"


def test_mpi_podgroup_counts_the_workers_only_since_the_launcher_waits_for_them():
    job = change(trainingjob(replicas=2), "/spec/framework", "mpi")
    job = change(job, "/spec/scheduling", {"gang": True, "scheduler": "volcano"})
    assert desired_children(job)[0]["spec"]["minMember"] == 2
    job = change(job, "/spec/scheduling/minMember", 3)
    assert desired_children(job)[0]["spec"]["minMember"] == 2


def test_coscheduling_gang_gets_a_scheduler_plugins_podgroup_and_pod_label():
    job = change(trainingjob(replicas=2), "/spec/scheduling", {"gang": True, "scheduler": "coscheduling"})
    group = desired_children(job)[0]
    assert (group["apiVersion"], group["kind"], group["spec"]) == (
        "scheduling.x-k8s.io/v1alpha1", "PodGroup", {"minMember": 2})
    pod = pods(job)[0]
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llm"
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_no_podgroup_without_gang():
    job = change(trainingjob(), "/spec/scheduling", {"gang": False, "scheduler": "volcano"})
    assert [c["kind"] for c in desired_children(job)] == ["Service", "Pod", "Pod"]


# --- InferenceService --------------------------------------------------------------------------------


def test_inference_service_gets_a_predictor_deployment_and_a_service_on_port_80():
    children = by_name(desired_inference_children(isvc()))
    assert list(children) == ["Deployment/sent-predictor", "Service/sent"]
    deployment = children["Deployment/sent-predictor"]
    assert deployment["spec"]["replicas"] == 1
    main = deployment["spec"]["template"]["spec"]["containers"][0]
    assert main["name"] == "predictor"
    assert {"name": "http", "containerPort": 8080, "protocol": "TCP"} in main["ports"]
    assert main["image"] == "nvcr.io/nvidia/tritonserver:23.05-py3"  # KServe v0.20.0's pinned Triton
    assert children["Service/sent"]["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"},
        {"name": "grpc", "port": 9000, "targetPort": 9000, "protocol": "TCP", "appProtocol": "kubernetes.io/h2c"}]
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == "u-2"


def test_inference_service_scaling_adds_a_cpu_hpa_on_the_predictor():
    children = by_name(desired_inference_children(isvc(scaling={"minReplicas": 2, "maxReplicas": 5,
                                                                "targetUtilization": 70})))
    hpa = children["HorizontalPodAutoscaler/sent"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sent-predictor"},
        "minReplicas": 2, "maxReplicas": 5,
        "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                      "target": {"type": "Utilization", "averageUtilization": 70}}}]}
    assert children["Deployment/sent-predictor"]["spec"]["replicas"] == 2


@pytest.mark.parametrize(("total", "pct", "split"), [
    (10, 10, (9, 1)), (4, 50, (2, 2)), (3, 25, (2, 1)), (1, 10, (1, 1)), (2, 100, (0, 2)), (0, 10, (1, 1)),
    (20, 1, (19, 1)), (8, 30, (6, 2)), (5, 50, (2, 3)), (9, 30, (6, 3)),
])
def test_canary_replicas_realize_the_split_by_pod_ratio(total, pct, split):
    spec = isvc(scaling={"minReplicas": total}, canaryTrafficPercent=pct, canary={"modelUri": "s3://m/v4"})["spec"]
    assert canary_split(spec) == split


def test_canary_deployment_serves_the_canary_model_behind_the_same_service():
    obj = isvc(scaling={"minReplicas": 10, "maxReplicas": 10}, canaryTrafficPercent=10,
               canary={"modelUri": "s3://m/v4"})
    children = by_name(desired_inference_children(obj))
    primary, canary = children["Deployment/sent-predictor"], children["Deployment/sent-canary"]
    assert (primary["spec"]["replicas"], canary["spec"]["replicas"]) == (9, 1)
    canary_main = canary["spec"]["template"]["spec"]["containers"][0]
    (init,) = canary["spec"]["template"]["spec"]["initContainers"]
    assert init["args"] == ["s3://m/v4", "/mnt/models"]  # the storage initializer fetches the canary's model
    assert {"name": "kserve-provision-location", "mountPath": "/mnt/models", "readOnly": True} in \
        canary_main["volumeMounts"]
    selector = children["Service/sent"]["spec"]["selector"]
    for deployment in (primary, canary):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()
        assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert primary["spec"]["selector"] != canary["spec"]["selector"]


def test_no_canary_deployment_at_zero_percent():
    obj = isvc(canaryTrafficPercent=0, canary={"image": "srv:2"})
    assert "Deployment/sent-canary" not in by_name(desired_inference_children(obj))


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow", "xgboost", "mpi", "jax"])
@pytest.mark.parametrize("scheduler", ["volcano", "coscheduling"])
def test_the_client_knows_the_api_path_of_every_child_a_job_can_have(framework, scheduler):
    job = change(trainingjob(replicas=2), "/spec/framework", framework)
    job = change(job, "/spec/scheduling", {"gang": True, "scheduler": scheduler})
    for child in desired_children(job):
        assert (child["apiVersion"], child["kind"]) in PATHS, child["kind"]
