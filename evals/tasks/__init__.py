"""The tasks eval: multi-step tasks over the built-in tools (``python -m evals.tasks``)."""

from tollgate.evals.tasks.cases import TASKS, Task
from tollgate.evals.tasks.runner import Report, run_tasks_eval

__all__ = ["TASKS", "Report", "Task", "run_tasks_eval"]
