"""Routing eval of the offline picker: ``python -m evals.routing``."""

from tollgate.evals.routing.runner import ACCURACY_FLOOR, Report, run_routing_eval

__all__ = ["ACCURACY_FLOOR", "Report", "run_routing_eval"]
