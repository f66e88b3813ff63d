"""Every figure of the report is titled and every axis labelled, as a reader meets it alone."""

from __future__ import annotations

import pytest

from nccl_tune.reporting import plots
from nccl_tune.reporting.view import load_view


@pytest.fixture(scope="module")
def drawn(tiny_study):
    """(name, matplotlib figure) of every figure the report of the tiny study draws."""
    view = load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", "t")
    figures, real = [], plots.to_svg

    def keep(fig):
        figures.append(fig)
        return real(fig)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(plots, "to_svg", keep)
        names = [f.name for f in plots.all_plots(view)]
    return list(zip(names, figures))


def test_every_figure_has_a_title_and_labelled_axes(drawn):
    names = {name for name, _ in drawn}
    assert {"best", "parallel", "throughput", "memory", "timeline", "history"} <= names, names
    for name, fig in drawn:
        title = fig._suptitle.get_text() if fig._suptitle else ""
        for ax in (a for a in fig.axes if a.get_visible()):
            assert title or ax.get_title(), f"{name}: an untitled plot"
            assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: an axis without its label"


def test_the_budget_stopped_and_oom_trials_sit_where_they_were_measured(drawn, tiny_study):
    """A trial stopped for its budget with a measured rate is drawn at it, not at 0; an OOM trial
    above the GPU's limit, at what PyTorch asked for."""
    view = load_view(f"sqlite:///{tiny_study}/results/nccl-tune.db", "t")
    oom = next(r for r in view.launched if r.status is not None and r.status.value == "oom")
    needed = plots.over_the_wall(oom.result).needed_gib
    assert needed > view.gpu_limit_gib and plots._memory_y(oom, view.gpu_limit_gib) == needed
    best = dict(drawn)["best"]
    ys = sorted({round(float(y), 3) for c in best.axes[0].collections for _, y in c.get_offsets()})
    measured = sorted({round(r.throughput, 3) for r in view.launched if r.throughput})
    assert set(measured) <= set(ys), (measured, ys)
