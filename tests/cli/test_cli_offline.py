"""The `rollmux` CLI without a database: readable errors for an unreachable or foreign
server, shell completion and the table cells (no live server, no database to flush)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from rollmux_cli import views
from tests.cli.test_cli import run


def test_an_unreachable_or_foreign_server_gets_a_readable_error(
    monkeypatch: Any, tmp_path: Path
) -> None:
    import http.server
    import socket
    import threading

    monkeypatch.setenv("ROLLMUX_TOKEN", "rmx_whatever")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    code, _, err = run(["get", "jobs", "--url", f"http://127.0.0.1:{closed}"])
    assert code == 1
    assert err.strip() == (
        f"Cannot reach the RollMux server at http://127.0.0.1:{closed}: connection refused "
        "(is the server running on that port?). Set --url or ROLLMUX_URL."
    )
    code, _, err = run(["get", "jobs", "--url", f"127.0.0.1:{closed}"])
    assert code == 1 and "not a valid URL" in err

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # a proxy's HTML error page, not the API
            self.send_response(502)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html><body>Bad gateway</body></html>")

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, _, err = run(["get", "nodes", "--url", f"http://127.0.0.1:{server.server_port}"])
    finally:
        server.shutdown()
    assert code == 1 and "HTTP 502" in err and "text/html, not the API's JSON" in err
    for internal in ("HTTPConnectionPool", "urllib3", "Errno", "Traceback", "object at 0x"):
        assert internal not in err


def test_shell_completion_scripts_know_the_commands(tmp_path: Path) -> None:
    code, script, _ = run(["completion", "bash"])
    assert code == 0
    for word in ("get", "describe", "submit", "--dry-run", "--watch", "groups", "nodes"):
        assert word in script
    path = tmp_path / "rollmux.bash"
    path.write_text(script)
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # bash parses it
    code, script, _ = run(["completion", "zsh"])
    assert code == 0 and "#compdef rollmux" in script


def test_long_names_keep_their_distinguishing_end() -> None:
    a = views._fit("agentic-qwen2.5-7b-swe-d1-with-a-very-long-suffix-1", 24)
    b = views._fit("agentic-qwen2.5-7b-swe-d1-with-a-very-long-suffix-2", 24)
    assert len(a) == 24 and a != b and a.endswith("-1") and "…" in a
    assert views._fit("short", 24) == "short"
    assert views._utc("2026-11-29T23:05:43.123+01:00") == "2026-11-29 22:05:43Z"
