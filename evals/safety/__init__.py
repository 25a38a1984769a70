"""The adversarial safety eval: a fully compromised picker on the real graph (``python -m evals.safety``)."""

from tollgate.evals.safety.runner import SafetyReport, load_cases, run_safety_eval

__all__ = ["SafetyReport", "load_cases", "run_safety_eval"]
