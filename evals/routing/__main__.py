"""``python -m evals.routing``: run both routing sets, print their tables, fail below a floor."""

from __future__ import annotations

import sys

from tollgate.evals.routing.runner import (
    ACCURACY_FLOOR, INDEPENDENT_FLOOR, PLUGINS_FLOOR, run_independent_eval, run_plugins_eval, run_routing_eval,
)


def main() -> int:
    """Print each set's report; exit 1 below its accuracy floor or on any wrong write."""
    ok = True
    for title, report, floor in (("original set (cases.jsonl)", run_routing_eval(), ACCURACY_FLOOR),
                                 ("independent set (independent.jsonl, web tools on)", run_independent_eval(), INDEPENDENT_FLOOR),
                                 ("plug-in set (plugins.jsonl, tools defined only in the eval)", run_plugins_eval(),
                                  PLUGINS_FLOOR)):
        passed = report.passed(floor)
        ok = ok and passed
        print(f"== {title}: {report.summary()}")
        print(report.table())
        print(f"floor {floor:.1%}, no wrong write: {'PASS' if passed else 'FAIL'}\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
