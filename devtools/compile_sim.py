"""Build the scheduling core's compiled modules (`scheduler.compiled`) into `.compiled/`.

    .venv/bin/python devtools/compile_sim.py [--out .compiled]

mypyc compiles `scheduler.compiled.MODULES` (C extension modules, gcc and the Python
headers) into the output directory, never beside the sources, and writes the manifest
`scheduler.compiled.activate` checks: the interpreter, the module list, a hash of the
package's sources. A build that fails leaves no manifest (nothing is loaded from it).
Takes about two minutes on two cores; skipped when the manifest already matches.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from scheduler import compiled  # noqa: E402


def build(out: Path) -> dict[str, str]:
    """Compile `MODULES` into `out`; return each module's file (relative to `out`)."""
    from mypyc.build import mypycify  # (a developer tool: mypy's compiler)
    from setuptools import Distribution

    paths = [str(compiled.source_path(m, REPO).relative_to(REPO)) for m in compiled.MODULES]
    cwd = os.getcwd()
    os.chdir(REPO)  # mypyc names modules by their paths from here
    try:
        with tempfile.TemporaryDirectory(prefix="rollmux-mypyc-") as tmp:
            ext = mypycify(paths, opt_level="3", target_dir=str(Path(tmp) / "c"))
            dist = Distribution({"name": "rollmux-compiled", "ext_modules": ext})
            cmd = dist.get_command_obj("build_ext")
            cmd.build_lib = str(out)  # type: ignore[attr-defined]
            cmd.build_temp = str(Path(tmp) / "o")  # type: ignore[attr-defined]
            cmd.ensure_finalized()
            cmd.run()
            # (the group's shared library, `<hash>__mypyc`, is a top-level module the
            # others import)
            files = {e.name: cmd.get_ext_filename(e.name) for e in ext}  # type: ignore[attr-defined]
    finally:
        os.chdir(cwd)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=compiled.BUILD)
    parser.add_argument("--force", action="store_true", help="build even when up to date")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    manifest_path = out / compiled.MANIFEST
    if not args.force and manifest_path.is_file():
        try:
            if compiled.stale_reason(json.loads(manifest_path.read_text()), REPO) is None:
                print(f"compile_sim: {out} is up to date")
                manifest_path.touch()  # (make compares its time with the sources')
                return 0
        except ValueError:
            pass
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    digest = compiled.sources_digest(REPO)
    files = build(out)
    missing = [m for m in compiled.MODULES if m not in files]
    if missing:
        print(f"compile_sim: mypyc built no module for {missing}", file=sys.stderr)
        return 1
    manifest = {
        "toolchain": compiled.toolchain(),
        "modules": list(compiled.MODULES),
        "sources": digest,
        "files": files,
    }
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    print(f"compile_sim: {len(compiled.MODULES)} modules compiled into {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
