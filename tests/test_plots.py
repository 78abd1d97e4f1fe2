"""The figure style (specrepro/run/plots.py) and its check: every figure says what it is and prints no raw markup.

Every notebook saves its figures through ``Artifacts.figure``, which runs ``plots.check``; the smoke profile that CI
runs (``make figures PROFILE=smoke``) therefore renders every notebook's figures and checks their text. Here: the
check itself, on figures that break each rule."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from specrepro.run import plots  # noqa: E402

FOOTER = plots.Footer(plots.MEASURED, model="target t, draft d", device="CPU x", dtype={"AR": "fp32", "SpS": "bf16"},
                      profile="smoke", commit="abc1234567")


def good():
    fig, ax = plots.figure()
    ax.plot([1, 2], [1, 2], label=r"$\alpha^{\gamma+1}$")
    ax.set_xlabel(r"draft length $\gamma$")
    plots.legend(ax)
    plots.title(fig, plots.THEORY, "expected tokens per step")
    plots.draw_footer(fig, FOOTER)
    return fig, ax


def test_a_good_figure_passes_and_its_footer_says_how_it_was_made():
    fig, _ = good()
    plots.check(fig)
    footer = " ".join(t for t in plots.texts(fig) if "commit" in t)
    for fact in ("model: target t, draft d", "device: CPU x", "AR: fp32", "SpS: bf16", "profile: smoke",
                 "commit: abc1234567"):
        assert fact in footer.replace("\n", " ")


@pytest.mark.parametrize("where", ["title", "xlabel", "legend", "tick", "annotation"])
def test_raw_markup_anywhere_is_refused(where):
    fig, ax = good()
    raw = "α^{k+1}"
    if where == "title":
        ax.set_title(f"theory: {raw}")
    elif where == "xlabel":
        ax.set_xlabel(raw)
    elif where == "legend":
        ax.plot([0, 1], [0, 1], label=r"p_{i}")
        plots.legend(ax)
    elif where == "tick":
        ax.set_xticks([1, 2], [r"\gamma", "2"])
    else:
        ax.annotate("x^2", (1, 1))
    with pytest.raises(ValueError, match="raw markup"):
        plots.check(fig)


def test_no_footer_or_no_kind_in_the_title_is_refused():
    fig, ax = plots.figure()
    ax.set_title("speed-up")
    with pytest.raises(ValueError, match="no footer") as error:
        plots.check(fig)
    assert "theory' or 'measured" in str(error.value)


def test_mathtext_and_escaped_dollars_are_not_raw():
    assert plots.raw_markup(r"$\alpha^{k+1}$ and $p_{i}$") == []
    assert plots.raw_markup(r"cost \$5 and a^b") == ["^"]


def test_bad_kind_and_missing_profile_are_refused():
    with pytest.raises(ValueError, match="kind"):
        plots.Footer("guess", profile="quick")
    with pytest.raises(ValueError, match="profile"):
        plots.Footer(plots.THEORY)


def test_the_documents_number_is_detected_only_when_drawn():
    fig, ax = good()
    assert not plots.shows_document_number(fig)
    plots.document_marker(ax, [1.5], [1.5], "PPD paper: Vicuna-7B, A100, batch 1")
    assert plots.shows_document_number(fig)
    fig, ax = good()
    plots.document_line(ax, 2.0, "Chen et al.: Chinchilla 70B")
    assert plots.shows_document_number(fig)
