"""The README's tour works verbatim: its SQL blocks run through psql against a real server."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
# Statements that wait for changes until cancelled are shown in the README but not run here.
INTERACTIVE = ("EMIT CHANGES", "DECLARE ")


def test_readme_tour_runs_in_psql(fresh_server, tmp_path):
    blocks = re.findall(r"```sql\n(.*?)```", README.read_text(), re.S)
    assert blocks
    lines = [ln for b in blocks for ln in b.splitlines() if not any(k in ln for k in INTERACTIVE)]
    script = tmp_path / "tour.sql"
    script.write_text("\\set ON_ERROR_STOP 1\n" + "\n".join(lines) + "\n")
    out = subprocess.run(["psql", "-X", "-h", fresh_server.host, "-p", str(fresh_server.port), "-U", "streamdb",
                          "streamdb", "-f", str(script)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr + out.stdout[-2000:]
    assert "ERROR" not in out.stderr
    # Spot checks on what the tour promises.
    assert " 22 |       80" in out.stdout and " 19 |       91" in out.stdout  # humidity > 70
    assert 'Table "public.users"' in out.stdout
    assert "plan_clicks" in out.stdout
