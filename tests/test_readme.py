"""The README's Python example runs as printed (only the owner and thread are the test's own)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from tollgate.graph._env import child_environment
from tollgate.graph.services import utc_now
from tollgate.graph.settings import Settings
from tollgate.graph.store.db import Database
from tollgate.graph.store.owner_scope import owner_transaction
from tests.readme_blocks import blocks_run_by
from tollgate.tools.demo import seed_demo


async def test_the_python_example_lists_then_cancels_with_an_approval(
    settings: Settings, db: Database, owner: str, tmp_path: Path
) -> None:
    [code] = blocks_run_by("tests/test_readme.py")
    async with owner_transaction(db.pool, owner) as conn:
        await seed_demo(conn, owner, utc_now(), "Europe/Paris")
    script = tmp_path / "example.py"
    script.write_text(code.replace('owner_id="demo"', f'owner_id="{owner}"').replace('"thread-1"', f'"{uuid.uuid4()}"'))
    done = subprocess.run([sys.executable, str(script)], env=child_environment(settings), cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("executed Cancelled “Lunch with Sam”"), done.stdout
