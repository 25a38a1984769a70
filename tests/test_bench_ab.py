"""``python -m bench.ab``, the working tree's server against a commit's, runs end to end and cleans up.

Its timings are not judged here (a round of one turn per client says nothing); what is checked
is that both servers served the load, the report has a row per round, and the base commit's
worktree is gone afterwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _worktrees() -> list[str]:
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=_ROOT, capture_output=True, text=True,
                            check=True)
    return [line for line in listed.stdout.splitlines() if line.startswith("worktree ")]


def test_two_servers_take_turns_and_the_base_worktree_is_removed() -> None:
    before = _worktrees()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_") and k != "DATABASE_URL"}
    done = subprocess.run([sys.executable, "-m", "bench.ab", "--base", "HEAD", "--rounds", "2", "--per-client", "1"],
                          cwd=_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rounds = re.findall(r"^\| (\d) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) ms \| ([\d.]+) ms \|$", done.stdout, re.M)
    assert [r[0] for r in rounds] == ["1", "2"], done.stdout
    assert all(float(x) > 0 for r in rounds for x in r[1:]), done.stdout  # both servers served every round
    assert "32 turns each" in done.stdout, done.stdout  # 2 rounds of 16 clients, one turn each
    assert re.search(r"round by round: median [\d.]+ \(middle half [\d.]+ to [\d.]+, 2 rounds\)", done.stdout), done.stdout
    assert _worktrees() == before
    assert not (_ROOT / "var" / "bench" / "ab").exists()
