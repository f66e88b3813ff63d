"""The package's layers, read from the imports and calls of its source with ``ast``.

- Only ``tuner/`` imports Optuna.
- Only ``launchers/`` starts or signals processes: ``subprocess``/``multiprocessing``, ``os.kill``/``killpg``/``fork``/
  ``exec*``/``spawn*``/``system``/``popen``, ``signal.pthread_kill``, and ``.kill()``/
  ``.terminate()``/``.send_signal()`` on anything. Installing signal handlers is allowed anywhere.
- ``psutil`` is imported only by ``launchers/`` and ``node/``; ``node/`` reads with it
  (processes holding GPU memory, a running Ray), it never signals (the rule above).
- ``diagnose/`` does not probe the node: no ``pynvml``, ``psutil``, ``socket``, ``resource``,
  ``subprocess``, ``multiprocessing``, nor ``nccl_tune.gpu``/``gpu_fake``/``node``/``launchers``/
  ``tuner``/``sim``: text in, verdict out.
- Nothing in the package imports the twin (``twin/``, outside it: a test fixture and demo that
  tests, benchmarks and examples use).
- Inside ``tuner/`` the rooms stand on each other, never back up: ``records/`` (storage, what each
  trial stored) below ``search/`` (the sampler and its models); ``trials/`` (one trial) and
  ``winner/`` (a stored study read back, its winner, the tuned YAML) on those; ``study/`` (the loop)
  on top. ``settings.py`` (the run's options) stands on ``records/`` only. Only ``reporting/`` and
  ``cli.py`` import ``tuner/`` from outside it.
- The modules at the package's top (``trial``, ``failure``, ``presets``, ``wording``, ``gpu``, ...)
  are its foundation: they import none of its folders (``diagnose/``, ``launchers/``, ``tuner/``, ...).
- Only ``reporting/`` draws (``matplotlib``), and nothing below it imports it: ``reporting/`` renders
  what the study stored; only ``cli.py`` calls it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "nccl_tune"

SPAWN_MODULES = ("subprocess", "multiprocessing")
OS_PROCESS_CALLS = {"kill", "killpg", "fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp"}
OS_PROCESS_PREFIXES = ("exec", "spawn")
SIGNALLING_METHODS = {"kill", "terminate", "send_signal"}
NODE_PROBES = ("pynvml", "psutil", "socket", "resource", *SPAWN_MODULES)
NOT_FOR_DIAGNOSE = (
    "nccl_tune.gpu",
    "nccl_tune.gpu_fake",
    "nccl_tune.node",
    "nccl_tune.launchers",
    "nccl_tune.tuner",
    "twin",
)


def _under(path: str, *folders: str) -> bool:
    return any(path.startswith(f"nccl_tune/{folder}/") for folder in folders)


def _module_of(path: str) -> str:
    parts = path[: -len(".py")].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: str, tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in the file, relative ones resolved; ``from a import b``
    yields ``a`` and ``a.b`` (``b`` may be a module)."""
    package = _module_of(path).split(".")
    if not path.endswith("__init__.py"):
        package = package[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([base] if base else [])])
            yield node.lineno, base
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def _is(module: str, *names: str) -> bool:
    return any(module == n or module.startswith(n + ".") for n in names)


def process_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for every call that starts or signals a process."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else None
        if owner_name == "os" and (name in OS_PROCESS_CALLS or name.startswith(OS_PROCESS_PREFIXES)):
            yield node.lineno, f"os.{name}()"
        elif owner_name == "signal" and name == "pthread_kill":
            yield node.lineno, "signal.pthread_kill()"
        elif name in SIGNALLING_METHODS:
            yield node.lineno, f".{name}()"


SPAWNERS = "only nccl_tune/launchers/ starts or signals processes"


TUNER_ROOMS = {
    "records": (),
    "search": ("records",),
    "settings": ("records",),
    "trials": ("records", "search", "settings"),
    "winner": ("records", "search"),
    "study": ("records", "search", "settings", "trials", "winner"),
}
"""Each room of ``tuner/`` and the rooms it may import."""


def _tuner_room(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["nccl_tune", "tuner"] and parts[2] in TUNER_ROOMS else None


def _tuner_breach(path: str, module: str) -> str | None:
    """Why an import of ``module`` in ``path`` breaks the order of ``tuner/``'s rooms, or None."""
    target = _tuner_room(module)
    if target is None:
        return None
    if not path.startswith("nccl_tune/tuner/"):
        ok = path == "nccl_tune/cli.py" or _under(path, "reporting")
        return None if ok else "only nccl_tune/reporting/ and nccl_tune/cli.py import nccl_tune/tuner/ from outside it"
    here = _tuner_room(_module_of(path))
    if here is None or target == here or target in TUNER_ROOMS[here]:
        return None
    return f"nccl_tune/tuner/{here} stands below nccl_tune/tuner/{target}: it may import only {TUNER_ROOMS[here]}"


FOLDERS = tuple(f"nccl_tune.{p.name}" for p in sorted(PACKAGE.iterdir()) if (p / "__init__.py").exists())


def _is_foundation(path: str) -> bool:
    return path.count("/") == 1 and path not in ("nccl_tune/cli.py", "nccl_tune/__init__.py")


def import_breaches(path: str, module: str) -> list[str]:
    """The layering rules an import of ``module`` in ``path`` breaks."""
    out = []
    if _is(module, "optuna") and not _under(path, "tuner"):
        out.append("only nccl_tune/tuner/ may import optuna")
    if _is(module, *SPAWN_MODULES) and not _under(path, "launchers"):
        out.append(SPAWNERS)
    leaf = module.rsplit(".", 1)[-1]
    if module.count(".") == 1 and _is(module, "os", "signal") and not _under(path, "launchers"):
        if leaf in OS_PROCESS_CALLS or leaf.startswith(OS_PROCESS_PREFIXES) or leaf == "pthread_kill":
            out.append(SPAWNERS)
    if _is(module, "psutil") and not _under(path, "launchers", "node"):
        out.append("only nccl_tune/launchers/ and nccl_tune/node/ may use psutil")
    if _under(path, "diagnose") and _is(module, *NODE_PROBES, *NOT_FOR_DIAGNOSE):
        out.append("nccl_tune/diagnose/ is text in, verdict out (node checks go to nccl_tune/node/)")
    room = _tuner_breach(path, module)
    if room is not None:
        out.append(room)
    if _is(module, "matplotlib") and not _under(path, "reporting"):
        out.append("only nccl_tune/reporting/ draws")
    if _is(module, "nccl_tune.reporting") and not (_under(path, "reporting") or path == "nccl_tune/cli.py"):
        out.append("nccl_tune/reporting/ sits on top: only nccl_tune/cli.py imports it")
    if _is_foundation(path) and _is(module, *FOLDERS):
        out.append("a module at the top of nccl_tune/ is its foundation: it imports none of its folders")
    if _is(module, "twin"):
        out.append("the twin is a test fixture outside the package; only tests, benchmarks and examples import it")
    return out


def violations(sources: Mapping[str, str]) -> list[str]:
    """One line per breach of the layering, naming the file, the line and the import or call."""
    found: dict[tuple[str, int, str], str] = {}
    for path, source in sorted(sources.items()):
        tree = ast.parse(source, filename=path)
        for line, module in imported(path, tree):
            for rule in import_breaches(path, module):
                found.setdefault((path, line, rule), f"{path}:{line} imports {module}: {rule}")
        if not _under(path, "launchers"):
            for line, call in process_calls(tree):
                found.setdefault((path, line, SPAWNERS), f"{path}:{line} calls {call}: {SPAWNERS}")
    return list(found.values())


def package_sources() -> dict[str, str]:
    root = PACKAGE.parent
    return {p.relative_to(root).as_posix(): p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_package_keeps_its_layers() -> None:
    sources = package_sources()
    assert "nccl_tune/tuner/trials/trial_builder.py" in sources and "nccl_tune/diagnose/classify.py" in sources
    found = violations(sources)
    assert not found, "layering broken:\n" + "\n".join(found)


def test_the_scanner_sees_the_imports_the_layers_are_built_on() -> None:
    """The rules read real imports: optuna in the tuner, subprocess in the launchers, psutil in node/."""
    sources = package_sources()
    seen = {(path, module) for path, src in sources.items() for _, module in imported(path, ast.parse(src))}
    assert any(p.startswith("nccl_tune/tuner/") and m == "optuna" for p, m in seen)
    assert ("nccl_tune/launchers/process.py", "subprocess") in seen
    assert not any(m == "twin" or m.startswith("twin.") for _, m in seen)  # the twin is outside the package
    assert ("nccl_tune/node/doctor.py", "psutil") in seen


def test_each_breach_is_named_with_its_file_line_and_import() -> None:
    bad = {
        "nccl_tune/launchers/local.py": "import optuna\n",
        "nccl_tune/tuner/study/loop.py": "import subprocess\nfrom twin.launcher import ModelLauncher\n",
        "nccl_tune/tuner/trials/observer.py": "import os\nimport signal\nsignal.signal(2, None)\nos.killpg(1, 9)\n",
        "nccl_tune/node/doctor.py": "import psutil\npsutil.Process(1).terminate()\n",
        "nccl_tune/diagnose/classify.py": "from . import text\nimport socket\nfrom ..gpu import open_probe\n",
        "nccl_tune/cli.py": "from os import kill\nimport twin\n",
        "nccl_tune/gpu.py": "import psutil\n",
        "nccl_tune/presets.py": "from nccl_tune.diagnose.text import TORCHRUN_PREFIX\n",
        "nccl_tune/launchers/teardown.py": "import os, psutil, subprocess\nos.killpg(1, 9)\npsutil.Process(1).kill()\n",
        "nccl_tune/tuner/trials/display.py": "import matplotlib.pyplot as plt\nfrom nccl_tune.reporting.view import StudyView\n",
        "nccl_tune/reporting/plots.py": "import matplotlib\n",
        "nccl_tune/tuner/records/storage.py": "from nccl_tune.tuner.search.memory_model import MemoryModel\n",
        "nccl_tune/tuner/trials/steps.py": "from nccl_tune.tuner.records import study_records\nfrom ..study import loop\n",
        "nccl_tune/tuner/settings.py": "from nccl_tune.tuner.study.night import plan_night\n",
        "nccl_tune/nightly/history.py": "from nccl_tune.tuner.records.series import series_nights\n",
    }
    assert violations(bad) == [
        "nccl_tune/cli.py:1 imports os.kill: only nccl_tune/launchers/ starts or signals processes",
        "nccl_tune/cli.py:2 imports twin: the twin is a test fixture outside the package; only tests, benchmarks and examples import it",
        "nccl_tune/diagnose/classify.py:2 imports socket: nccl_tune/diagnose/ is text in, verdict out (node checks go to nccl_tune/node/)",
        "nccl_tune/diagnose/classify.py:3 imports nccl_tune.gpu: nccl_tune/diagnose/ is text in, verdict out (node checks go to nccl_tune/node/)",
        "nccl_tune/gpu.py:1 imports psutil: only nccl_tune/launchers/ and nccl_tune/node/ may use psutil",
        "nccl_tune/launchers/local.py:1 imports optuna: only nccl_tune/tuner/ may import optuna",
        "nccl_tune/nightly/history.py:1 imports nccl_tune.tuner.records.series: only nccl_tune/reporting/ and nccl_tune/cli.py import nccl_tune/tuner/ from outside it",
        "nccl_tune/node/doctor.py:2 calls .terminate(): only nccl_tune/launchers/ starts or signals processes",
        "nccl_tune/presets.py:1 imports nccl_tune.diagnose.text: a module at the top of nccl_tune/ is its foundation: it imports none of its folders",
        "nccl_tune/tuner/records/storage.py:1 imports nccl_tune.tuner.search.memory_model: nccl_tune/tuner/records stands below nccl_tune/tuner/search: it may import only ()",
        "nccl_tune/tuner/settings.py:1 imports nccl_tune.tuner.study.night: nccl_tune/tuner/settings stands below nccl_tune/tuner/study: it may import only ('records',)",
        "nccl_tune/tuner/study/loop.py:1 imports subprocess: only nccl_tune/launchers/ starts or signals processes",
        "nccl_tune/tuner/study/loop.py:2 imports twin.launcher: the twin is a test fixture outside the package; only tests, benchmarks and examples import it",
        "nccl_tune/tuner/trials/display.py:1 imports matplotlib.pyplot: only nccl_tune/reporting/ draws",
        "nccl_tune/tuner/trials/display.py:2 imports nccl_tune.reporting.view: nccl_tune/reporting/ sits on top: only nccl_tune/cli.py imports it",
        "nccl_tune/tuner/trials/observer.py:4 calls os.killpg(): only nccl_tune/launchers/ starts or signals processes",
        "nccl_tune/tuner/trials/steps.py:2 imports nccl_tune.tuner.study: nccl_tune/tuner/trials stands below nccl_tune/tuner/study: it may import only ('records', 'search', 'settings')",
    ]
