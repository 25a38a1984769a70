"""``python -m evals.routing``: run the routing eval, print the table, fail below the floor."""

from __future__ import annotations

import sys

from evals.routing.runner import run_routing_eval


def main() -> int:
    """Print the report; exit 1 below the accuracy floor or on any wrong write."""
    report = run_routing_eval()
    print(report.table())
    return 0 if report.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
