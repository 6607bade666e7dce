import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # type: ignore[no-untyped-def]
    """The review budget's figures (tests/limits/test_review_budget.py), printed whenever it ran."""
    budget_test = next((m for name, m in list(sys.modules.items()) if name.endswith("limits.test_review_budget")), None)
    measured = getattr(budget_test, "MEASURED", None)
    if not measured:
        return
    terminalreporter.section("review budget: calls per review (tests/limits/review_budget.toml)")
    for case, calls in measured.items():
        name, endpoint = case.split(" /")
        terminalreporter.write_line(f"{case:<24}{calls:>8} calls   budget {budget_test.BUDGETS[name][endpoint]:>8}")
