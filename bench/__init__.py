"""Benchmarks: Tollgate's governed turn measured side by side with a bare agent, as ratios."""
