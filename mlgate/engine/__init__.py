"""The policy engine: pure functions from (object, policies, facts) to a Decision."""

from mlgate.engine.evaluate import evaluate
from mlgate.engine.policyset import Binding, Policy, PolicySet

__all__ = ["Binding", "Policy", "PolicySet", "evaluate"]
