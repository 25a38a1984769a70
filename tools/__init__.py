"""Tollgate tools."""
