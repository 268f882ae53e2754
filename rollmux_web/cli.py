"""`rollmux`: a small command line client of the RollMux API.

    rollmux login [--url URL] [--username U]   store an API token (asks for the password)
    rollmux submit spec.yaml                   submit a job from a YAML or JSON spec
    rollmux jobs [--status S]                  list your tenants' jobs
    rollmux cancel ID                          cancel a job

The token comes from $ROLLMUX_TOKEN or the file written by `login`
(~/.config/rollmux/token, or $ROLLMUX_CONFIG); the server from --url, $ROLLMUX_URL or
the URL of the last login (stored beside the token), default http://127.0.0.1:8000.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path
from typing import IO, Any

import requests
import yaml

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 30.0


class CliError(Exception):
    """A failure to report on stderr with a non-zero exit status."""


def config_path() -> Path:
    """Return where the token is stored: $ROLLMUX_CONFIG or ~/.config/rollmux/token."""
    env = os.environ.get("ROLLMUX_CONFIG")
    return Path(env) if env else Path.home() / ".config" / "rollmux" / "token"


def _url_path() -> Path:
    return config_path().with_name("url")


def _base_url(args: argparse.Namespace) -> str:
    """Return --url, else $ROLLMUX_URL, else the URL of the last login, else the default."""
    url = getattr(args, "url", None) or os.environ.get("ROLLMUX_URL")
    if not url:
        try:
            url = _url_path().read_text().strip()
        except OSError:
            url = ""
    return (url or DEFAULT_URL).rstrip("/")


def _token() -> str:
    token = os.environ.get("ROLLMUX_TOKEN", "").strip()
    if token:
        return token
    path = config_path()
    try:
        token = path.read_text().strip()
    except FileNotFoundError:
        raise CliError(
            f"Not logged in: run `rollmux login` or set ROLLMUX_TOKEN ({path} is missing)"
        ) from None
    if not token:
        raise CliError(f"{path} is empty: run `rollmux login`")
    return token


def _store_token(token: str) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # create with 0600 from the start: the token must never be readable by others
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.chmod(path, 0o600)
    return path


def _format_error(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return f"HTTP {resp.status_code}: {resp.text[:300]}"
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return f"HTTP {resp.status_code}: {json.dumps(body)[:300]}"
    details = [
        f"{field}: {message}"
        for field, messages in (err.get("fields") or {}).items()
        for message in messages
    ]
    message = str(err.get("message", ""))
    if message in details:  # the summary repeats the first field's error: say it once
        message = f"{len(details)} field error{'s' if len(details) != 1 else ''}"
    lines = [f"error ({err.get('code', resp.status_code)}): {message}"]
    lines += [f"  {d}" for d in details]
    return "\n".join(lines)


def _fit(text: str, width: int) -> str:
    """Shorten text to width with an ellipsis in the middle (a name's suffix tells jobs apart)."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


def _utc(stamp: str) -> str:
    """Return an API timestamp as 'YYYY-MM-DD HH:MM:SSZ' (UTC)."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%d %H:%M:%S}Z"


def _request(method: str, url: str, *, token: str | None = None, **kwargs: Any) -> Any:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        resp = requests.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
    except requests.RequestException as exc:
        raise CliError(f"Cannot reach {url}: {exc}") from None
    if resp.status_code >= 400:
        raise CliError(_format_error(resp))
    return resp.json()


def cmd_login(args: argparse.Namespace, out: IO[str]) -> int:
    base = _base_url(args)
    username = args.username or input("Username: ").strip()
    password = getpass.getpass("Password: ")
    body = _request(
        "POST", f"{base}/api/v1/auth/token/", json={"username": username, "password": password}
    )
    token = body.get("token") or body.get("key")
    if not token:
        raise CliError("The server answered without a token")
    path = _store_token(token)
    _url_path().write_text(base + "\n")  # later commands talk to the server we logged in to
    print(f"Logged in to {base} as {username}; token stored in {path}", file=out)
    return 0


def load_spec(path: str) -> dict[str, Any]:
    """Return the job spec in a YAML or JSON file (YAML is a superset of JSON)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"Cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise CliError(f"{path} is not UTF-8 text") from None
    try:
        spec = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML or JSON: {str(exc).splitlines()[0]}") from None
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold one object of field names to values")
    return spec


def cmd_submit(args: argparse.Namespace, out: IO[str]) -> int:
    spec = load_spec(args.spec)
    job = _request("POST", f"{_base_url(args)}/api/v1/jobs/", token=_token(), json=spec)
    print(
        f"Submitted job {job['id']} ({job['name']}) for {job['tenant']}: {job['status']}", file=out
    )
    return 0


def cmd_jobs(args: argparse.Namespace, out: IO[str]) -> int:
    params: dict[str, Any] = {"page_size": args.limit}
    if args.status:
        params["status"] = args.status
    body = _request("GET", f"{_base_url(args)}/api/v1/jobs/", token=_token(), params=params)
    rows = body.get("results", [])
    width = min(48, max([4, *(len(job["name"]) for job in rows)]))
    header = (
        f"{'ID':>6}  {'NAME':<{width}} {'TENANT':<12} {'STATUS':<10} {'ITER':>9}  "
        f"{'GROUP':>6}  SUBMITTED (UTC)"
    )
    print(header, file=out)
    for job in rows:
        done = f"{job['iterations_done']}/{job['iterations']}"
        group = job["group"] if job["group"] is not None else "-"
        print(
            f"{job['id']:>6}  {_fit(job['name'], width):<{width}} {_fit(job['tenant'], 12):<12} "
            f"{job['status']:<10} {done:>9}  {group!s:>6}  {_utc(job['submitted_at'])}",
            file=out,
        )
    if body.get("count", len(rows)) > len(rows):
        print(f"({len(rows)} of {body['count']} shown; use --limit)", file=out)
    return 0


def cmd_cancel(args: argparse.Namespace, out: IO[str]) -> int:
    job = _request("POST", f"{_base_url(args)}/api/v1/jobs/{args.id}/cancel/", token=_token())
    if job["status"] == "cancelled":
        print(f"Cancelled job {job['id']} ({job['name']})", file=out)
    else:
        print(
            f"Cancel requested for job {job['id']} ({job['name']}, {job['status']}): "
            "it stops at its next phase boundary",
            file=out,
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rollmux", description="RollMux command line client")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--url", help=f"server URL (default $ROLLMUX_URL or {DEFAULT_URL})")
        return p

    p = add("login", "get an API token and store it")
    p.add_argument("--username", "-u")
    p.set_defaults(func=cmd_login)
    p = add("submit", "submit a job from a YAML or JSON spec file")
    p.add_argument("spec")
    p.set_defaults(func=cmd_submit)
    p = add("jobs", "list jobs")
    p.add_argument(
        "--status",
        choices=["queued", "placed", "running", "completed", "failed", "cancelled"],
    )
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_jobs)
    p = add("cancel", "cancel a job")
    p.add_argument("id", type=int)
    p.set_defaults(func=cmd_cancel)
    return parser


def main(argv: list[str] | None = None, out: IO[str] | None = None) -> int:
    """Run one command; return the exit status (0 ok, 1 refused or failed, 2 usage)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args, out or sys.stdout))
    except CliError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
