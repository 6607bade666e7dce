"""Launch rules: torchrun's processes and nodes, the env an operator sets, MPI slots, required checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
from builders import change, decide, job, outcome, pytorchjob, trainingjob

from mlgate.model.results import Outcome
from mlgate.rules.launch import launcher_flags, tokens

MASTER = "/spec/pytorchReplicaSpecs/Master/template/spec/containers/0"
WORKER = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0"


def torch_job(command: list[str], workers: int = 3, gpus: int = 1) -> dict[str, Any]:
    """A PyTorchJob (a master and `workers` workers) whose every pod runs `command`."""
    obj = change(pytorchjob(workers=workers, gpus=gpus), MASTER + "/command", command)
    return change(obj, WORKER + "/command", command)


def reasons(obj: dict[str, Any], rule: str, params: dict[str, Any] | None = None) -> list[str]:
    return [f.reason for r in decide(obj, rule, params).results for f in r.findings]


@pytest.mark.parametrize("command", [
    ["torchrun", "--nproc-per-node=8", "train.py"],
    ["torchrun", "--nproc_per_node", "8", "train.py"],
    ["bash", "-c", "pip install -r req.txt && torchrun --nproc-per-node 8 --nnodes 4 train.py"],
    ["/usr/bin/python3", "-m", "torch.distributed.run", "--nproc-per-node=8", "train.py"],
])
def test_torchrun_with_more_processes_than_gpus_is_refused(command: list[str]):
    assert reasons(torch_job(command), "launch.torchrun")[:1] == ["torchrun processes differ from gpus"]


@pytest.mark.parametrize("nproc", ["1", "auto", "gpu"])
def test_torchrun_with_one_process_per_gpu_or_auto_passes(nproc: str):
    obj = torch_job(["torchrun", f"--nproc-per-node={nproc}", "--nnodes=4", "train.py"])
    assert outcome(obj, "launch.torchrun") is Outcome.PASS


def test_torchrun_on_a_cpu_pod_may_start_any_number_of_processes():
    assert outcome(torch_job(["torchrun", "--nproc-per-node=8", "train.py"], gpus=0), "launch.torchrun") \
        is Outcome.PASS


def test_pet_nproc_per_node_counts_like_the_flag():
    obj = change(job(parallelism=1, gpus=4), "/spec/template/spec/containers/0/command", ["torchrun", "t.py"])
    obj = change(obj, "/spec/template/spec/containers/0/env", [{"name": "PET_NPROC_PER_NODE", "value": "1"}])
    (finding,) = decide(obj, "launch.torchrun").results[0].findings
    assert finding.detail == 'container "main" runs torchrun with 1 process(es) per pod but asks for 4 GPU(s)'
    assert finding.fix == "set --nproc-per-node=4 (or auto), or ask for 1 GPU(s)"


@pytest.mark.parametrize(("nnodes", "fits"), [("4", True), ("2", False), ("2:8", True), ("5:8", False)])
def test_torchrun_nodes_match_the_pods_that_run_it(nnodes: str, fits: bool):
    found = reasons(torch_job(["torchrun", "--nproc-per-node=1", f"--nnodes={nnodes}", "train.py"]),
                    "launch.torchrun")
    assert ("torchrun nodes differ from pods" in found) is not fits


def test_a_job_without_torchrun_is_skipped():
    assert outcome(pytorchjob(), "launch.torchrun") is Outcome.SKIP


def test_flags_end_at_the_program_torchrun_runs():
    words = tokens({"command": ["sh", "-c", "torchrun --nnodes 2 train.py --nproc-per-node 9"]})
    assert launcher_flags(words, ("torchrun",)) == {"--nnodes": "2"}


# --- launch.reserved-env -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["MASTER_ADDR", "WORLD_SIZE", "PET_NNODES"])
def test_env_the_training_operator_sets_is_refused_with_its_name(name: str):
    obj = change(pytorchjob(), WORKER + "/env", [{"name": "LR", "value": "1e-4"}, {"name": name, "value": "x"}])
    (finding,) = decide(obj, "launch.reserved-env").results[0].findings
    assert finding.path == WORKER + "/env/1/name"
    assert finding.detail == (f'container "pytorch" sets {name}, which Kubeflow training-operator sets in every '
                              "PyTorchJob pod")


def test_tf_config_is_the_training_operators_under_a_tfjob():
    spec = {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "tensorflow", "image": "tf:2", "env": [{"name": "TF_CONFIG", "value": "{}"}]}]}}}
    tfjob = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "t", "namespace": "ml"},
             "spec": {"tfReplicaSpecs": {"Worker": spec}}}
    assert reasons(tfjob, "launch.reserved-env") == ["env set by operator"]


def test_a_plain_job_has_no_operator_env_to_protect():
    obj = change(job(), "/spec/template/spec/containers/0/env", [{"name": "MASTER_ADDR", "value": "x"}])
    assert outcome(obj, "launch.reserved-env") is Outcome.SKIP


@pytest.mark.parametrize(("key", "refused"), [("CHECKPOINT_DIR", True), ("MASTER_PORT", True),
                                              ("PET_NNODES", True), ("LEARNING_RATE", False)])
def test_a_trainingjob_hyperparameter_the_reconciler_would_drop_is_refused(key: str, refused: bool):
    obj = change(trainingjob(), "/spec/hyperparameters", {key: "1"})
    found = decide(obj, "launch.reserved-env").results[0].findings
    assert bool(found) is refused
    if refused:
        assert found[0].path == f"/spec/hyperparameters/{key}"


# --- launch.mpi-slots ----------------------------------------------------------------------------------------


def mpijob(slots: int | None, gpus: int = 8, np: str = "16") -> dict[str, Any]:
    launcher = {"name": "launcher", "image": "mpi:1", "command": ["mpirun", "-np", np, "--bind-to", "none",
                                                                     "python", "train.py"]}
    worker = {"name": "worker", "image": "mpi:1", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    spec: dict[str, Any] = {"mpiReplicaSpecs": {
        "Launcher": {"replicas": 1, "template": {"spec": {"containers": [launcher]}}},
        "Worker": {"replicas": 2, "template": {"spec": {"containers": [worker]}}}}}
    if slots is not None:
        spec["slotsPerWorker"] = slots
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "nccl", "namespace": "ml"},
            "spec": spec}


def test_mpi_slots_equal_to_each_workers_gpus_and_np_to_all_slots_pass():
    assert outcome(mpijob(slots=8), "launch.mpi-slots") is Outcome.PASS


def test_mpi_with_the_default_one_slot_on_eight_gpu_workers_is_refused():
    (finding,) = decide(mpijob(slots=None, np="2"), "launch.mpi-slots").results[0].findings
    assert (finding.path, finding.reason) == ("/spec/slotsPerWorker", "mpi slots differ from gpus")


def test_mpirun_np_other_than_all_slots_is_refused():
    assert reasons(mpijob(slots=8, np="8"), "launch.mpi-slots") == ["mpirun processes differ from slots"]


def test_a_job_without_mpi_slots_is_skipped():
    assert outcome(pytorchjob(), "launch.mpi-slots") is Outcome.SKIP


# --- launch.checkpoint-required -------------------------------------------------------------------------------


def test_a_large_job_without_a_checkpoint_is_refused():
    assert reasons(trainingjob(replicas=16), "launch.checkpoint-required", {"minPods": 8}) == ["checkpoint missing"]


def test_a_large_job_with_a_checkpoint_passes():
    obj = change(trainingjob(replicas=16), "/spec/checkpoint", {"claimName": "ckpt", "mountPath": "/ckpt"})
    assert outcome(obj, "launch.checkpoint-required", {"minPods": 8}) is Outcome.PASS


def test_a_job_mounting_a_read_write_claim_in_every_pod_counts_as_checkpointed():
    claim = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt"}}]
    mount = [{"name": "ckpt", "mountPath": "/ckpt"}]
    obj = pytorchjob(workers=15)
    for role in ("Master", "Worker"):
        obj = change(obj, f"/spec/pytorchReplicaSpecs/{role}/template/spec/volumes", claim)
        obj = change(obj, f"/spec/pytorchReplicaSpecs/{role}/template/spec/containers/0/volumeMounts", mount)
    assert outcome(obj, "launch.checkpoint-required", {"minPods": 8}) is Outcome.PASS


def test_a_long_job_without_a_checkpoint_is_refused_and_a_small_short_one_skipped():
    long = change(trainingjob(), "/spec/runPolicy/activeDeadlineSeconds", 86400)
    params = {"minPods": 8, "minDeadlineSeconds": 3600}
    assert reasons(long, "launch.checkpoint-required", params) == ["checkpoint missing"]
    assert outcome(trainingjob(), "launch.checkpoint-required", params) is Outcome.SKIP


def trainjob(procs: Any) -> dict[str, Any]:
    trainer = {"image": "registry.example/train:1.0", "numNodes": 2, "numProcPerNode": procs,
               "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "llm", "namespace": "ml"},
            "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer}}


def test_a_trainjobs_processes_per_node_match_its_gpus_per_node():
    (finding,) = decide(trainjob(8), "launch.torchrun").results[0].findings
    assert (finding.path, finding.detail) == ("/spec/trainer/numProcPerNode",
                                              "spec.trainer.numProcPerNode is 8 but the pods ask for 4 GPU(s)")
    assert outcome(trainjob(4), "launch.torchrun") is Outcome.PASS
    assert outcome(trainjob("auto"), "launch.torchrun") is Outcome.PASS


def test_a_pod_its_job_made_is_not_judged_as_a_job_of_one_pod():
    from builders import pod
    worker = change(pod(), "/spec/containers/0/command", ["torchrun", "--nproc-per-node=1", "--nnodes=2", "train.py"])
    assert outcome(worker, "launch.torchrun") is Outcome.FAIL  # alone, it is the whole job: one pod, not two
    owned = change(worker, "/metadata/ownerReferences", [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "mnist", "uid": "u", "controller": True}])
    assert outcome(owned, "launch.torchrun") is Outcome.PASS  # one of the PyTorchJob's two: judged on the job
