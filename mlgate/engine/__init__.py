"""The policy engine: pure functions from (object, policies, facts) to a Decision."""

from mlgate.engine.evaluate import evaluate
from mlgate.engine.policyset import Binding, Policy, PolicySet
from mlgate.rules.registry import DeadlineExceeded

__all__ = ["Binding", "DeadlineExceeded", "Policy", "PolicySet", "evaluate"]
