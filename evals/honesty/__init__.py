"""The honesty eval: reply/effects pairs scored by the honesty gate (``python -m evals.honesty``)."""

from tollgate.evals.honesty.runner import PRECISION_FLOOR, RECALL_FLOOR, Report, run_honesty_eval

__all__ = ["PRECISION_FLOOR", "RECALL_FLOOR", "Report", "run_honesty_eval"]
