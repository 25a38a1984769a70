"""Tollgate evals."""
