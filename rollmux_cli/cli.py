"""`rollmux`: a kubectl-style command line client of the RollMux API.

    rollmux login [--username U]              store an API token (asks for the password)
    rollmux get jobs|groups|nodes             list them (jobs: --status, --tenant, --limit)
    rollmux describe job ID                   status, reason, place in the queue, placement,
                                              estimates, phases, training metrics, cost
    rollmux submit SPEC [--dry-run]           submit a YAML/JSON spec, or print the planner's
                                              answer for it without submitting (sbatch --test-only)
    rollmux submit --example                  print an example spec with every field explained
    rollmux cancel ID                         cancel a job
    rollmux jobs                              the same as `rollmux get jobs`
    rollmux completion bash|zsh|tcsh          print a shell completion script

`get` and `describe` take `-o table|json|yaml` and `--watch` (redraw every `--interval`
seconds until Ctrl-C; `describe job --watch` stops when the job ends; `--count N` stops
after N updates). The token comes from $ROLLMUX_TOKEN or the file written by `login`
(~/.config/rollmux/token, or $ROLLMUX_CONFIG); the server from --url, $ROLLMUX_URL or
the URL of the last login (stored beside the token), default http://127.0.0.1:8000.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import requests
import yaml

from rollmux_cli.views import (
    LISTINGS,
    describe_text,
    dry_run_text,
    dump,
    render_table,
)
from rollmux_web.jobs import spec as job_spec
from rollmux_web.jobs.spec_yaml import load_spec_text

DEFAULT_URL = "http://127.0.0.1:8000"
TIMEOUT_S = 30.0
OUTPUTS = ("table", "json", "yaml")
SHELLS = ("bash", "zsh", "tcsh")


class CliError(Exception):
    """A failure to report on stderr with a non-zero exit status."""


# --- configuration -------------------------------------------------------------------------


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


# --- talking to the server -----------------------------------------------------------------


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """Yield an exception and everything it wraps (requests -> urllib3 -> socket)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        for nxt in (getattr(e, "reason", None), e.__cause__, e.__context__, *e.args):
            if isinstance(nxt, BaseException):
                todo.append(nxt)


def unreachable_message(base: str, exc: requests.RequestException) -> str:
    """Say in words why the server did not answer (never the library's internals)."""
    causes = list(_causes(exc))
    invalid = (
        requests.exceptions.InvalidURL
        | requests.exceptions.MissingSchema
        | requests.exceptions.InvalidSchema
    )
    if isinstance(exc, invalid):
        why = "that is not a valid URL (use e.g. http://127.0.0.1:8000)"
    elif isinstance(exc, requests.exceptions.SSLError):
        why = "the TLS handshake failed (wrong port, or a certificate this machine does not trust)"
    elif isinstance(exc, requests.exceptions.Timeout):
        why = f"no answer within {TIMEOUT_S:g} s"
    elif any(isinstance(c, socket.gaierror) for c in causes):
        why = "its host name does not resolve"
    elif any(isinstance(c, ConnectionRefusedError) for c in causes):
        why = "connection refused (is the server running on that port?)"
    elif any(isinstance(c, ConnectionResetError) for c in causes):
        why = "the connection was reset"
    else:
        why = "could not connect"
    return f"Cannot reach the RollMux server at {base}: {why}. Set --url or ROLLMUX_URL."


def _format_error(resp: requests.Response, *, options: dict[str, str] | None = None) -> str:
    """Return the API's error as lines for stderr; `options` names a query parameter by the
    command-line option the user typed for it (page_size: --limit)."""
    try:
        body = resp.json()
    except ValueError:
        kind = resp.headers.get("Content-Type", "").split(";")[0] or "no content type"
        return (
            f"HTTP {resp.status_code} from {resp.url} ({kind}, not the API's JSON): "
            "is --url the RollMux server?"
        )
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        return f"HTTP {resp.status_code}: {json.dumps(body)[:300]}"
    options = options or {}
    fields = [
        (field, message)
        for field, messages in (err.get("fields") or {}).items()
        for message in messages
    ]
    details = [f"{options.get(field, field)}: {message}" for field, message in fields]
    message = str(err.get("message", ""))
    if message in {f"{field}: {m}" for field, m in fields}:
        # the summary repeats the first field's error: say it once
        message = f"{len(details)} field error{'s' if len(details) != 1 else ''}"
    lines = [f"error ({err.get('code', resp.status_code)}): {message}"]
    lines += [f"  {d}" for d in details]
    if resp.status_code == 401:
        lines.append("  (run `rollmux login`, or check ROLLMUX_TOKEN)")
    return "\n".join(lines)


def _request(
    method: str,
    url: str,
    *,
    token: str | None = None,
    options: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    base = url.split("/api/", 1)[0]
    try:
        resp = requests.request(method, url, headers=headers, timeout=TIMEOUT_S, **kwargs)
    except requests.RequestException as exc:
        raise CliError(unreachable_message(base, exc)) from None
    if resp.status_code >= 400:
        raise CliError(_format_error(resp, options=options))
    try:
        return resp.json()
    except ValueError:
        raise CliError(
            f"{base} answered HTTP {resp.status_code} with something that is not JSON: "
            "is --url the RollMux server?"
        ) from None


def _api(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return _request(method, f"{_base_url(args)}/api/v1/{path}", token=_token(), **kwargs)


# --- commands ------------------------------------------------------------------------------


def _server_answers(base: str) -> None:
    """Raise CliError unless the RollMux API answers at `base` (before asking a password:
    a typo in --url should not cost the user their typing)."""
    try:
        resp = requests.get(
            f"{base}/api/v1/me/", headers={"Accept": "application/json"}, timeout=TIMEOUT_S
        )
    except requests.RequestException as exc:
        raise CliError(unreachable_message(base, exc)) from None
    try:
        resp.json()  # 401 without a token: the API's JSON error is the answer wanted
    except ValueError:
        raise CliError(_format_error(resp)) from None


def _ask(prompt: str, *, secret: bool = False) -> str:
    """Read one answer from the terminal; a closed stdin is a clear error, not EOFError."""
    try:
        return getpass.getpass(prompt) if secret else input(prompt).strip()
    except EOFError:
        print(file=sys.stderr)  # (end the prompt's line)
        what = "password" if secret else "username"
        raise CliError(
            f"No {what} given: stdin is closed. Run `rollmux login` in a terminal"
            + ("" if secret else ", or pass --username")
            + ", or set ROLLMUX_TOKEN to an API token instead."
        ) from None


def cmd_login(args: argparse.Namespace, out: IO[str]) -> int:
    base = _base_url(args)
    _server_answers(base)
    username = args.username or _ask("Username: ")
    password = _ask("Password: ", secret=True)
    try:  # the token of the last login is sent along: the server replaces it
        previous = config_path().read_text().strip() or None
    except OSError:
        previous = None
    body = _request(
        "POST",
        f"{base}/api/v1/auth/token/",
        token=previous,
        json={"username": username, "password": password},
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
        spec = load_spec_text(text)  # refuses aliases, deep nesting and huge documents
    except yaml.YAMLError as exc:
        why = job_spec.parse_error_text(exc)
        raise CliError(f"{path} is not valid YAML or JSON: {why}") from None
    if not isinstance(spec, dict):
        raise CliError(f"{path} must hold one object of field names to values")
    # the server refuses unknown fields too; saying so here needs no login or network
    unknown = job_spec.unknown_field_errors(spec)
    if unknown:
        details = "\n".join(f"  {k}: {m}" for k, msgs in unknown.items() for m in msgs)
        raise CliError(f"{path}: {len(unknown)} unknown field(s)\n{details}")
    return spec


def example_spec() -> str:
    """Return the example job spec as YAML, every field with its help as a comment."""
    lines = ["# A RollMux job spec: `rollmux submit this.yaml` (docs/spec/trace-format.md)."]
    for f in job_spec.SPEC:
        need = "required" if f.required else "optional"
        lines.append(f"# {f.name} ({need}): {f.help}")
        value = f.example if f.example is not None else f.default
        if value is None:
            lines.append(f"# {f.name}:")
        else:
            lines.append(yaml.safe_dump({f.name: value}, default_flow_style=False).rstrip())
    return "\n".join(lines)


def cmd_submit(args: argparse.Namespace, out: IO[str]) -> int:
    if args.example:
        print(example_spec(), file=out)
        return 0
    if not args.spec:
        raise CliError("rollmux submit: give a spec file (or --example to print one)")
    spec = load_spec(args.spec)
    if args.dry_run:
        answer = _api(args, "POST", "jobs/dry-run/", json=spec)
        print(
            dry_run_text(answer) if args.output == "table" else dump(answer, args.output), file=out
        )
        # like `sbatch --test-only`: succeed only when the job would be admitted (a job
        # without phase times is: its profiling run comes first)
        return 0 if answer["status"] in ("FIT", "RETRY", "PROFILE") else 1
    job = _api(args, "POST", "jobs/", json=spec)
    if args.output != "table":
        print(dump(job, args.output), file=out)
    else:
        print(
            f"Submitted job {job['id']} ({job['name']}) for {job['tenant']}: {job['status']}",
            file=out,
        )
    return 0


def _list(args: argparse.Namespace, path: str, params: dict[str, Any]) -> tuple[list[Any], int]:
    body = _api(args, "GET", path, params=params, options={"page_size": "--limit"})
    if isinstance(body, list):
        return body, len(body)
    rows = body.get("results", [])
    return rows, int(body.get("count", len(rows)))


def _get_view(args: argparse.Namespace) -> Callable[[], tuple[str, bool]]:
    """Return a function that fetches and renders what `get`/`describe` asked for, and
    says whether a watch may stop (a described job that ended)."""
    output = args.output
    if args.command in ("jobs", "get"):
        kind = getattr(args, "kind", "jobs")
        path, columns = LISTINGS[kind]
        params: dict[str, Any] = {"page_size": args.limit}
        if kind == "jobs":
            params |= {k: v for k in ("status", "tenant") if (v := getattr(args, k))}
        if kind == "groups" and not args.all:
            params["active"] = "true"

        def listing() -> tuple[str, bool]:
            rows, count = _list(args, path, params)
            if output != "table":
                return dump(rows, output), False
            text = render_table(columns, rows)
            if count > len(rows):
                text += f"\n({len(rows)} of {count} shown; use --limit)"
            return text, False

        return listing

    def describe() -> tuple[str, bool]:
        body = _api(args, "GET", f"jobs/{args.id}/describe/")
        ended = body["job"]["status"] in ("completed", "failed", "cancelled")
        return (describe_text(body) if output == "table" else dump(body, output)), ended

    return describe


def cmd_view(args: argparse.Namespace, out: IO[str]) -> int:
    """Run `get` / `describe` once, or redraw it with --watch."""
    view = _get_view(args)
    if not args.watch:
        print(view()[0], file=out)
        return 0
    tty = out.isatty() if hasattr(out, "isatty") else False
    updates = 0
    while True:
        text, ended = view()
        updates += 1
        if tty:
            stamp = datetime.now(UTC).strftime("%H:%M:%SZ")
            out.write(
                f"\x1b[H\x1b[2JEvery {args.interval:g} s: rollmux {' '.join(sys.argv[1:])}  {stamp}\n\n"
            )
        elif updates > 1:
            out.write("---\n" if args.output == "yaml" else "\n")
        print(text, file=out)
        out.flush()
        if ended or (args.count and updates >= args.count):
            return 0
        time.sleep(args.interval)


def cmd_cancel(args: argparse.Namespace, out: IO[str]) -> int:
    job = _api(args, "POST", f"jobs/{args.id}/cancel/")
    if job["status"] == "cancelled":
        print(f"Cancelled job {job['id']} ({job['name']})", file=out)
    else:
        print(
            f"Cancel requested for job {job['id']} ({job['name']}, {job['status']}): "
            "it stops at its next phase boundary",
            file=out,
        )
    return 0


def cmd_completion(args: argparse.Namespace, out: IO[str]) -> int:
    import shtab

    print(shtab.complete(build_parser(), shell=args.shell), file=out)
    return 0


# --- the parser ----------------------------------------------------------------------------


def _positive_float(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{raw!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rollmux",
        description="RollMux command line client",
        epilog='Shell completion: eval "$(rollmux completion bash)" (or zsh, tcsh).',
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str, **kw: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text, **kw)
        p.add_argument("--url", help=f"server URL (default $ROLLMUX_URL or {DEFAULT_URL})")
        return p

    def outputs(p: argparse.ArgumentParser, *, watch: bool = True) -> None:
        p.add_argument("-o", "--output", choices=OUTPUTS, default="table", help="output format")
        if watch:
            p.add_argument("-w", "--watch", action="store_true", help="redraw until Ctrl-C")
            p.add_argument("--interval", type=_positive_float, default=2.0, metavar="SECONDS",
                           help="seconds between redraws with --watch (default 2)")  # fmt: skip
            p.add_argument("--count", type=int, default=0, metavar="N",
                           help="with --watch: stop after N updates")  # fmt: skip

    def job_filters(p: argparse.ArgumentParser) -> None:
        p.add_argument("--status", help="only jobs in this state (queued, running, ...)")
        p.add_argument("--tenant", help="only this tenant's jobs")
        p.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")

    p = add("login", "get an API token and store it")
    p.add_argument("--username", "-u")
    p.set_defaults(func=cmd_login)

    p = add("get", "list jobs, the queue (position and why), co-execution groups or nodes")
    p.add_argument(
        "kind", choices=("jobs", "queue", "groups", "nodes"), metavar="jobs|queue|groups|nodes"
    )
    job_filters(p)
    p.add_argument("--all", action="store_true", help="groups: released ones too")
    outputs(p)
    p.set_defaults(func=cmd_view)

    p = add(
        "describe", "show one job: status, reason, placement, estimates, phases, training, cost"
    )
    p.add_argument("kind", choices=("job",), metavar="job")
    p.add_argument("id", type=int)
    outputs(p)
    p.set_defaults(func=cmd_view)

    p = add("submit", "submit a job from a YAML or JSON spec file")
    p.add_argument("spec", nargs="?", help="the spec file (see --example)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the planner's answer for it now; submit nothing")  # fmt: skip
    p.add_argument("--example", action="store_true", help="print an example spec and exit")
    outputs(p, watch=False)
    p.set_defaults(func=cmd_submit)

    p = add("jobs", "list jobs (the same as `get jobs`)")
    job_filters(p)
    outputs(p)
    p.set_defaults(func=cmd_view, kind="jobs", all=False)

    p = add("cancel", "cancel a job")
    p.add_argument("id", type=int)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("completion", help="print a shell completion script")
    p.add_argument("shell", choices=SHELLS)
    p.set_defaults(func=cmd_completion)
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
    except BrokenPipeError:  # `rollmux get jobs | head`: the reader left; say nothing
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
