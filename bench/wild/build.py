"""Build, convert and check bench/wild's corpus of other projects' Triton kernels.

Usage (from the repository root):
  python bench/wild/build.py fetch                 download the pinned wheels into bench/wild/.cache
  python bench/wild/build.py build [--only RE]     write bench/wild/build/released/NN_<lib>_<op>.py
  python bench/wild/build.py convert               write bench/wild/build/first_conversion/ from them
  python bench/wild/build.py check [-j N] [--only RE] [--set released|first_conversion|both]
                                                   upload-validate and interpreter-check the modules
  python bench/wild/build.py rewrites [-j N] [--only RE] [--set ...]
                                                   every rule's rewrite of every module, checked so
  python bench/wild/build.py all                   fetch, build, convert, check
  python bench/wild/build.py list                  the corpus: lib, op, style features, skipped kernels

The build needs the wheels (network once, for `fetch`) and nothing else of the libraries: their
sources are read from the zips. The GPU machine gets the built folder.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as `python bench/wild/build.py` from anywhere
    sys.path.insert(0, str(ROOT))

from bench.wild import wheels  # noqa: E402
from bench.wild.corpus import CORPUS, SKIPPED  # noqa: E402
from bench.wild.extract import ExtractError, extract  # noqa: E402
from bench.wild.features import features  # noqa: E402
from bench.wild.libs import RULES  # noqa: E402
from bench.wild.spec import Kernel, render  # noqa: E402

BUILD = Path(__file__).resolve().parent / "build"
RELEASED = "released"
FIRST = "first_conversion"


def module_name(number: int, kernel: Kernel) -> str:
    return f"{number:02d}_{kernel.stem}.py"


def build(out: Path = BUILD, only: str | None = None, cache: Path = wheels.CACHE) -> dict:
    """Write the released modules; returns the manifest (also written as out/manifest.json)."""
    sources = {pin.lib: wheels.WheelSource(wheels.wheel_path(pin, cache), pin.package) for pin in wheels.PINS}
    target = out / RELEASED
    if target.exists() and not only:
        shutil.rmtree(target)
    target.mkdir(parents=True, exist_ok=True)
    manifest: dict = {
        "pins": {p.lib: f"{p.project}=={p.version} sha256:{p.sha256}" for p in wheels.PINS},
        "modules": {},
        "failed": {},
    }
    previous = out / "manifest.json"
    if only and previous.exists():  # a partial build updates the entries it rebuilt
        manifest["modules"] = json.loads(previous.read_text())["modules"]
    for number, kernel in enumerate(CORPUS, 1):
        name = module_name(number, kernel)
        if only and not re.search(only, name):
            continue
        try:
            names = kernel.entry + kernel.refs
            extracted = extract(sources[kernel.lib], RULES[kernel.lib], kernel.module, names)
            text = render(kernel, number, extracted, wheels.pin_for(kernel.lib))
        except ExtractError as exc:
            manifest["failed"][name] = str(exc)
            print(f"FAILED {name}: {exc}", file=sys.stderr)
            continue
        (target / name).write_text(text)
        manifest["modules"][name] = {
            "lib": kernel.lib,
            "op": kernel.op,
            "entry": list(kernel.entry),
            "features": features(text),
            "shims": [s for s, _ in extracted.shims],
            "sources": {f: list(lines) for f, lines in extracted.sources},
        }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["fetch", "build", "convert", "check", "rewrites", "all", "list"])
    parser.add_argument("--only", help="regex over module file names")
    parser.add_argument("--out", type=Path, default=BUILD)
    parser.add_argument("-j", "--jobs", type=int, default=1)
    parser.add_argument("--set", choices=[RELEASED, FIRST, "both"], default="both")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)

    if args.command in ("fetch", "all"):
        for path in wheels.fetch():
            print(f"ok {path.name}")
    if args.command in ("build", "all"):
        manifest = build(args.out, args.only)
        print(
            f"{len(manifest['modules'])} modules in {args.out / RELEASED}, {len(manifest['failed'])} failed"
        )
        if manifest["failed"]:
            return 1
    if args.command in ("convert", "all"):
        from bench.wild.convert import convert_dir

        table = convert_dir(args.out / RELEASED, args.out / FIRST, args.only)
        print(table)
    if args.command in ("check", "all"):
        from bench.wild.check import check_sets

        sets = [RELEASED, FIRST] if args.set == "both" else [args.set]
        return check_sets([args.out / s for s in sets], args.only, args.jobs, args.timeout)
    if args.command == "rewrites":
        from bench.wild.check import check_sets, write_rewrites

        sets = [RELEASED, FIRST] if args.set == "both" else [args.set]
        folders = [args.out / "rewrites" / s for s in sets]
        for s, folder in zip(sets, folders, strict=True):
            print(f"{write_rewrites(args.out / s, folder, args.only)} rewrites of {s} in {folder}")
        return check_sets(folders, None, args.jobs, args.timeout)
    if args.command == "list":
        manifest_path = args.out / "manifest.json"
        manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"modules": {}}
        print("| module | launch function | style features |\n|---|---|---|")
        for name, info in manifest["modules"].items():
            print(f"| {name[:-3]} | {', '.join(info['entry'])} | {', '.join(info['features'])} |")
        print("\n| skipped | why |\n|---|---|")
        for (lib, op), reason in SKIPPED.items():
            print(f"| {lib} {op} | {reason} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
