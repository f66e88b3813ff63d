"""The lowest version of every requirement the project admits, as pip constraints.

Reads pyproject.toml's dependencies and its ``test`` extra and prints ``name==lowest`` for each one
with a ``>=`` floor (extras dropped: the constraint is on the distribution). ``make test-floor``
installs the project under these constraints into a venv of its own and runs the suite there, so a
floor in pyproject.toml is a version the tests have passed on, not a guess.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import tomllib

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$")


def floors(pyproject: Path) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    out: dict[str, str] = {}
    for text in wanted:
        match = REQUIREMENT.match(text.split(";")[0])
        if match is None:
            raise SystemExit(f"{pyproject}: cannot read the requirement {text!r}")
        name, _, spec = match.groups()
        low = re.search(r">=\s*([0-9][^,\s]*)", spec)
        if low is None:
            raise SystemExit(f"{pyproject}: {text!r} has no >= floor; give every requirement one")
        out[name.lower()] = low.group(1)
    return [f"{name}=={version}" for name, version in sorted(out.items())]


if __name__ == "__main__":
    print("\n".join(floors(Path(sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"))))
