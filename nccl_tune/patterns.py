"""The plain text a regular expression requires: a cheap substring test that can skip lines a
pattern cannot match. The launcher's log reader (``launchers/progress``) and the diagnose
scanner (``diagnose/classify``) both prefilter lines with it."""

from __future__ import annotations

import re

try:  # the regular-expression parser, used only to find a rule's required literal text
    from re import _constants as _sre_const  # type: ignore[attr-defined]
    from re import _parser as _sre_parse  # type: ignore[attr-defined]
except ImportError:  # Python 3.10
    import sre_constants as _sre_const  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

MIN_LITERAL_CHARS = 3

TORCHRUN_PREFIX = r"\[[a-z]*\d+\]:"
"""torchrun's prefix in front of a rank's line under ``--tee`` (``[rank3]:``, ``[default3]:``): the
diagnose reader strips it, the presets' step rules allow it where a line starts."""


def _literal_runs(sub, runs: list[str], branches: list[list[str | None]]) -> None:  # noqa: ANN001 - a SubPattern
    """Collect the runs of plain text ``sub`` must contain, and for each alternation the best
    required text of every arm (None for an arm without one)."""
    run: list[str] = []
    for op, av in sub:
        if op is _sre_const.LITERAL:
            run.append(chr(av))
            continue
        if op is _sre_const.AT:  # zero-width: does not break the run
            continue
        runs.append("".join(run))
        run = []
        if op is _sre_const.SUBPATTERN:
            _literal_runs(av[-1], runs, branches)
        elif op is _sre_const.ASSERT and av[0] == 1:  # a lookahead's text is in the line too
            _literal_runs(av[1], runs, branches)
        elif op in (_sre_const.MAX_REPEAT, _sre_const.MIN_REPEAT) and av[0] >= 1:
            _literal_runs(av[2], runs, branches)
        elif op is _sre_const.BRANCH:
            branches.append([_best_literal(arm) for arm in av[1]])
    runs.append("".join(run))


def _best_literal(sub) -> str | None:  # noqa: ANN001
    runs: list[str] = []
    _literal_runs(sub, runs, [])
    best = max(runs, key=len, default="")
    return best if len(best) >= MIN_LITERAL_CHARS else None


def pattern_literals(pattern: str) -> tuple[str, ...] | None:
    """Texts one of which every match of ``pattern`` contains (so a cheap substring test can skip
    lines that cannot match): its longest required run of plain text, or one per arm of an
    alternation; None when there is none of at least ``MIN_LITERAL_CHARS`` characters."""
    parsed = _sre_parse.parse(pattern)
    if parsed.state.flags & re.IGNORECASE:
        return None
    runs: list[str] = []
    branches: list[list[str | None]] = []
    _literal_runs(parsed, runs, branches)
    best = max(runs, key=len, default="")
    if len(best) >= MIN_LITERAL_CHARS:
        return (best,)
    for arms in branches:
        if all(arms):
            return tuple(dict.fromkeys(a for a in arms if a))
    return None


def required_literal(pattern: str) -> str | None:
    """The one text every match of ``pattern`` contains, or None (see ``pattern_literals``)."""
    found = pattern_literals(pattern)
    return found[0] if found is not None and len(found) == 1 else None
