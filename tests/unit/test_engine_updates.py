"""UPDATE requests are judged on what they change: ratcheting, and objects being deleted."""

from __future__ import annotations

from builders import change, decide, pytorchjob

from mlgate.model.results import PRE_EXISTING, Outcome

GPU = "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0/resources/limits/nvidia.com~1gpu"
MAX_4 = {"perContainer": 4}
STORED = change(pytorchjob(), GPU, 8)  # stored before the policy existed


def update(new: dict, old: dict = STORED):
    return decide(new, "gpu.max", MAX_4, operation="UPDATE", old_obj=old)


def test_an_update_that_keeps_an_existing_violation_warns_instead_of_denying():
    decision = update(change(STORED, "/metadata/labels", {"queue": "gold"}))
    assert decision.allowed
    (result,) = decision.results
    assert (result.outcome, result.note) == (Outcome.WARN, PRE_EXISTING)
    (warning,) = decision.warnings
    assert warning.endswith(f"({PRE_EXISTING})") and "the limit is 4" in warning


def test_an_update_that_makes_a_violation_worse_is_denied():
    assert not update(change(STORED, GPU, 16)).allowed


def test_a_create_of_the_same_object_is_denied():
    assert not decide(STORED, "gpu.max", MAX_4).allowed


def test_an_update_that_brings_a_new_violation_is_denied():
    assert not update(change(pytorchjob(), GPU, 8), old=pytorchjob()).allowed


def test_an_object_being_deleted_is_not_judged():
    finalizing = change(change(STORED, GPU, 16), "/metadata/deletionTimestamp", "2026-11-22T10:00:00Z")
    decision = update(finalizing)
    assert decision.allowed and decision.note.startswith("being deleted") and not decision.results
