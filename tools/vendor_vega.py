"""Copy Vega, Vega-Lite and Vega-Embed into the book, so that its interactive charts draw offline.

    python tools/vendor_vega.py           # fetch the versions below with `npm pack`, write book/_static/vega/
    python tools/vendor_vega.py --check   # only check that the files there are the ones listed in README.md

The book's charts are Altair (Vega-Lite 5) outputs in the chapters; tools/sphinx_ext/vega_charts.py
draws them in the built pages with these three scripts, from the book's own _static folder: no
page asks a CDN for anything (`make browser-test` runs with the network cut off). Each package's
minified browser build (a UMD script that defines the globals `vega`, `vegaLite`, `vegaEmbed`) is
copied with its LICENSE (all three BSD-3-Clause), and book/_static/vega/README.md records the
versions and the SHA-256 of every file.

The Vega-Lite version is the one Altair's schema names (`altair.VEGALITE_VERSION`: a chart's spec
and the library that draws it must agree); Vega and Vega-Embed are the last releases of the
majors Altair names (`altair.VEGA_VERSION`, `altair.VEGAEMBED_VERSION`). Run this script again
after changing the altair requirement in pyproject.toml's [dev] extra.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "book" / "_static" / "vega"
# package -> (version, its browser build in the npm tarball)
PACKAGES = {
    "vega": ("5.33.0", "build/vega.min.js"),
    "vega-lite": ("5.20.1", "build/vega-lite.min.js"),
    "vega-embed": ("6.29.0", "build/vega-embed.min.js"),
}
README = """# Vega, Vega-Lite and Vega-Embed, for the book's interactive charts

Copied by `tools/vendor_vega.py` from the npm packages below (their minified browser builds and
their LICENSE files, unchanged), so that the charts draw with no network. Each is BSD-3-Clause
(Copyright the University of Washington Interactive Data Lab); the minified builds also contain
code of the packages they depend on (d3 modules, ISC; vega-tooltip and vega-themes, BSD-3-Clause;
fast-json-patch and json-stringify-pretty-compact, MIT; semver, ISC), as their npm releases do.

| file | npm package | version | license | bytes | SHA-256 |
|---|---|---|---|---|---|
"""


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def files() -> list[tuple[str, str, str, str]]:
    """(file name, package, version, license) of every file the folder holds."""
    rows = []
    for package, (version, build) in PACKAGES.items():
        rows.append((Path(build).name, package, version, "BSD-3-Clause"))
        rows.append((f"{package}.LICENSE", package, version, "BSD-3-Clause"))
    return rows


def readme() -> str:
    lines = [README.rstrip("\n")]
    for name, package, version, license_ in files():
        path = TARGET / name
        lines.append(f"| {name} | {package} | {version} | {license_} | {path.stat().st_size:,} | "
                     f"{sha256(path)} |")
    return "\n".join(lines) + "\n"


def vendor() -> None:
    TARGET.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="vendor-vega-") as tmp:
        for package, (version, build) in PACKAGES.items():
            pack = subprocess.run(["npm", "pack", f"{package}@{version}", "--silent"], cwd=tmp,
                                  capture_output=True, text=True, check=True)
            tarball = Path(tmp) / pack.stdout.strip().splitlines()[-1]
            with tarfile.open(tarball) as archive:
                for member, name in ((build, Path(build).name), ("LICENSE", f"{package}.LICENSE")):
                    source = archive.extractfile(f"package/{member}")
                    if source is None:
                        raise SystemExit(f"{package}@{version} has no {member}")
                    (TARGET / name).write_bytes(source.read())
            print(f"{package}@{version}: {Path(build).name}, LICENSE")
    (TARGET / "README.md").write_text(readme(), encoding="utf-8")


def check() -> list[str]:
    """What is missing or different from README.md's table (empty: the folder is as recorded)."""
    problems = [f"{name} is missing" for name, *_ in files() if not (TARGET / name).is_file()]
    if problems:
        return problems
    recorded = (TARGET / "README.md").read_text(encoding="utf-8") if (TARGET / "README.md").is_file() else ""
    if recorded != readme():
        problems.append("README.md does not match the files (versions, sizes or SHA-256): "
                        "run tools/vendor_vega.py")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="check the copied files, fetch nothing")
    args = parser.parse_args(argv)
    if not args.check:
        vendor()
    problems = check()
    for problem in problems:
        print(f"book/_static/vega: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
