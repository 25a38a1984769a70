"""``python -m evals.honesty``: score the honesty gate, print the table, fail below its floors."""

from __future__ import annotations

import sys

from tollgate.evals.honesty.runner import run_honesty_eval


def main() -> int:
    """Print the report; exit 1 below a floor."""
    report = run_honesty_eval()
    print(report.table())
    return 0 if report.passed() else 1


if __name__ == "__main__":
    sys.exit(main())
