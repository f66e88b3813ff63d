"""The README's promises: it opens with the two commands, and both are what the Makefile and CI run;
and every page's promises: each `nccl-tune` command line it shows is one the CLI accepts, and each
relative link resolves."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def first_block() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:bash)?\n(.*?)```", text, re.S)
    assert block and text.index("```") < 200, "README.md must open with its commands"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_make_demo_and_make_test_and_ci_runs_the_test_command():
    assert first_block() == ["make demo", "make test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M)


@pytest.mark.timeout(300)
def test_make_demo_as_written_tunes_the_twin_and_writes_the_tuned_yaml(tmp_path):
    """`make demo`, shrunk to two trials through its variables, into a temporary results folder."""
    if not (ROOT / ".venv" / ".installed").exists():
        pytest.skip("make demo runs from the repository's .venv (created by make test / make demo)")
    env = {**os.environ, "COLUMNS": "160"}
    proc = subprocess.run(
        ["make", "-s", "demo", f"RESULTS={tmp_path}", "DEMO_TRIALS=2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 2), out  # 2: no stable config in two trials is an honest answer
    assert "trial 0 baseline" in out and "nccl-tune new study demo" in out  # a fresh results folder
    if proc.returncode == 0:
        doc = yaml.safe_load((tmp_path / "demo-tuned.yaml").read_text())
        assert doc["overrides"]["trainer"] and doc["study"]["name"] == "demo"
        assert f"tuned YAML: {tmp_path}/demo-tuned.yaml" in out.replace("\n", "")
    summary = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "nccl-tune"), "report", "--results", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = json.loads(summary.stdout)["trials"]
    assert rows[0]["kind"] == "baseline" and rows[0]["status"] == "ok", rows[0]


# -- every page's commands and links -------------------------------------------------------------

PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").rglob("*.md")])
"""The pages a user reads: their `nccl-tune` command lines are checked against the real CLI, and
their relative links must resolve."""
NOT_SHELL = {"yaml", "yml", "json", "python", "text", "toml"}
"""Fenced blocks in these languages hold no command line; every other fenced block (bash, cron, ini,
console, untagged) is read as shell."""
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def shell_blocks(text: str) -> list[str]:
    """The shell of a page: its shell blocks, and the ``run:`` steps of CI workflows in YAML blocks."""
    out = []
    for m in FENCE.finditer(text):
        lang = m.group(1).strip().lower()
        if lang not in NOT_SHELL:
            out.append(m.group(2))
        elif lang in ("yaml", "yml"):
            out += run_steps(m.group(2))
    return out


def run_steps(block: str) -> list[str]:
    """The ``run:`` values of a YAML block (a GitHub Actions workflow's steps)."""
    try:
        doc = yaml.safe_load(block)
    except yaml.YAMLError:
        assert not re.search(r"^\s*(?:- )?run:", block, re.M), f"a workflow that is not YAML:\n{block}"
        return []
    found: list[str] = []
    nodes = [doc]
    while nodes:
        node = nodes.pop()
        if isinstance(node, dict):
            found += [v for k, v in node.items() if k == "run" and isinstance(v, str)]
            nodes += [v for k, v in node.items() if k != "run"]
        elif isinstance(node, list):
            nodes += node
    return found


SHELL_OPERATORS = set(";&|()<>")
ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
"""``NAME=value`` where a command starts: an environment variable for the command that follows, or
a systemd unit's ``ExecStart=COMMAND`` (``Exec*`` keys hold a command)."""


def invocations(block: str) -> list[list[str]]:
    """The argument lists of every ``nccl-tune`` command in a block of shell lines (continuation
    lines joined, comments dropped): a word naming the program (``nccl-tune``,
    ``/srv/venv/bin/nccl-tune``) where a command starts, and what follows it up to the next shell
    operator."""
    found = []
    for line in block.replace("\\\n", " ").splitlines():
        lex = shlex.shlex(line.strip().removeprefix("$ "), posix=True, punctuation_chars=True)
        lex.whitespace_split = True
        tokens = list(lex)
        for tok in tokens:
            assert not re.search(r"nccl-tune\s", tok), (
                f"a nccl-tune command hidden in one shell word ({tok!r}): write it as a command of its own"
            )
        starts = True  # at a command's first word
        for i, tok in enumerate(tokens):
            if set(tok) <= SHELL_OPERATORS:
                starts = True
                continue
            assignment = ASSIGNMENT.fullmatch(tok) if starts else None
            if assignment and not assignment.group(1).startswith("Exec"):
                continue  # a variable for the command still to come
            word = assignment.group(2) if assignment else tok
            if starts and Path(word).name == "nccl-tune":
                found.append(list(itertools.takewhile(lambda t: not set(t) <= SHELL_OPERATORS, tokens[i + 1 :])))
            starts = False
    return found


def cli_problem(args: list[str]) -> str | None:
    """Why ``nccl-tune ARGS`` would be refused by the real CLI's parser (None when it parses): an
    unknown subcommand, an option the subcommand does not take, a bad value, a word before ``--``."""
    import typer
    from typer.main import get_command

    from nccl_tune.cli import app

    cmd = get_command(app)
    path = ["nccl-tune"]
    args = list(args)
    while getattr(cmd, "commands", None):  # a group: the next word names its subcommand
        if not args or args[0].startswith("-"):
            return f"{' '.join(path)} needs a subcommand: {', '.join(cmd.commands)}"
        name = args.pop(0)
        if name not in cmd.commands:
            return f"{' '.join(path)} has no subcommand {name!r}; it has: {', '.join(cmd.commands)}"
        cmd, path = cmd.commands[name], [*path, name]
    try:
        ctx = cmd.make_context(" ".join(path), list(args))
    except typer.TyperException as exc:  # the parser's usage errors, as `nccl-tune` itself catches them
        return f"{' '.join(path)}: {exc.format_message()}"
    command = list(ctx.params.get("command") or ())  # the parser's value: a tuple in some typer versions
    if command and ("--" not in args or command != args[args.index("--") + 1 :]):
        return f"{' '.join(path)}: {command[0]!r} comes before --"
    return None


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_nccl_tune_command_on_the_page_is_one_the_cli_accepts(page):
    commands = [args for block in shell_blocks(page.read_text()) for args in invocations(block)]
    problems = [f"nccl-tune {shlex.join(args)}\n    -> {why}" for args in commands if (why := cli_problem(args))]
    assert not problems, f"{rel(page)}:\n" + "\n".join(problems)


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return out


def links(page: Path) -> list[str]:
    prose = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    return [t for t in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_every_relative_link_on_the_page_resolves(page):
    dead = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or ROOT not in (dest, *dest.parents):
            dead.append(f"{target}: no file {rel(dest) if ROOT in dest.parents else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: {rel(dest)} has no heading #{anchor}")
    assert not dead, f"{rel(page)}: dead links:\n" + "\n".join(dead)


def test_the_checks_read_the_pages_commands_and_links():
    """The page checks find what they check: a command of each kind the README shows, and links."""
    readme = [args[0] for block in shell_blocks((ROOT / "README.md").read_text()) for args in invocations(block)]
    assert {"run", "export", "apply", "report", "diagnose", "doctor"} <= set(readme)
    assert len(PAGES) >= 10 and all(links(page) for page in PAGES if page.parent.name == "docs")
    workflow = "steps:\n  - run: |\n      cd /srv\n      nccl-tune report --series s --format md >> out.md\n"
    assert [args for block in shell_blocks(f"```yaml\n{workflow}```\n") for args in invocations(block)] == [
        ["report", "--series", "s", "--format", "md"]
    ]
    unit = "Description=nccl-tune nightly\nExecStart=/srv/venv/bin/nccl-tune history --json\n"
    assert invocations(unit) == [["history", "--json"]]
    assert cli_problem(["run", "--trails", "3", "--", "bash", "x.sh"]) is not None
    assert cli_problem(["export", "--fromat", "env"]) is not None
    assert cli_problem(["run", "--dry-run", "true", "--", "bash"]) is not None
    assert cli_problem(["spaces", "shw", "x"]) is not None
    assert cli_problem(["spaces", "init", "-o", "x.yaml", "--", "python", "train.py"]) is None
