"""One figure style for every notebook: what a figure must say on its face, and a check that it does.

A figure is made with :func:`figure` (constrained layout, so titles and labels never overlap), titled with
:func:`title` ("measured: …", "theory: …" or "theory and measured: …"), its legends placed off the data with
:func:`legend`, and saved through ``notebooks/artifacts.py``'s ``Artifacts.figure``, which draws the :class:`Footer`
(model pair, device, dtype of each series, profile, commit) under it and runs :func:`check` before writing a file.

Symbols are mathtext: ``r"$\\alpha^{\\gamma+1}$"``, never ``α^{γ+1}`` as plain text. :func:`check` refuses a figure
with ``^``, ``_{`` or a TeX command outside ``$…$``, with no footer, or with no title that says theory or measured.

    fig, ax = plots.figure()
    ax.plot(gammas, speedups, label=r"measured, $\\gamma$ drafts")
    plots.legend(ax)
    plots.title(fig, plots.MEASURED, "speed-up against the draft length")
    art.figure(fig, "speedup", footer=plots.Footer(plots.MEASURED, model="SmolLM2-135M / zoo draft",
               device="CPU (2-core AMD EPYC)", dtype="fp32", profile="quick"), document=…, item=…, description=…)
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field, replace
from typing import Mapping

import matplotlib

matplotlib.rcParams.update({
    "figure.constrained_layout.use": True,  # titles, labels and outside legends get room: nothing overlaps
    "mathtext.fontset": "dejavusans",
    "font.size": 9,
    "axes.titlesize": 9,
    "figure.titlesize": 10,
    "legend.fontsize": 7,
    "legend.framealpha": 0.9,
})

import matplotlib.pyplot as plt  # noqa: E402  (after the style is set)

MEASURED, THEORY, BOTH = "measured", "theory", "theory and measured"
KINDS = (MEASURED, THEORY, BOTH)
FOOTER_GID = "specrepro-footer"
DOCUMENT_GID = "specrepro-document"  # an artist that shows the document's own number
FOOTER_SIZE = 6.5

__all__ = ["BOTH", "KINDS", "MEASURED", "THEORY", "Footer", "check", "draw_footer", "figure", "legend", "texts",
           "title", "document_line", "document_marker", "shows_document_number"]


def figure(nrows: int = 1, ncols: int = 1, *, width: float | None = None, height: float | None = None,
           **subplots):
    """``plt.subplots`` with constrained layout and a size that grows with the grid (3.6 × 3.0 in per panel)."""
    size = (width or 3.6 * ncols + 0.6, height or 3.0 * nrows + 0.4)
    return plt.subplots(nrows, ncols, figsize=size, layout="constrained", **subplots)


def title(target, kind: str, text: str) -> None:
    """"<kind>: <text>" as the figure's suptitle (a Figure) or an axes title (an Axes)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    label = f"{kind}: {text}"
    if isinstance(target, matplotlib.figure.Figure):
        target.suptitle(label)
    else:
        target.set_title(label)


def legend(ax, where: str = "right", **kwargs):
    """A legend beside the axes (``where="right"``) or under them (``"below"``), never over the data."""
    if where == "right":
        place = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}
    elif where == "below":
        place = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.18), "borderaxespad": 0.0,
                 "ncol": kwargs.pop("ncol", 2)}
    else:
        raise ValueError(f"where must be 'right' or 'below', got {where!r}")
    return ax.legend(**place, **kwargs)


def document_marker(ax, x, y, label: str, **kwargs):
    """The document's own number on our axes: an open black star, labelled with the document and its setting
    (e.g. "PPD paper, Vicuna-7B, A100, batch 1")."""
    style = {"marker": "*", "s": 110, "facecolors": "none", "edgecolors": "black", "linewidths": 1.0, "zorder": 5}
    style.update(kwargs)
    return ax.scatter(x, y, label=label, gid=DOCUMENT_GID, **style)


def document_line(ax, y, label: str, **kwargs):
    """The document's own number as a dotted black horizontal line (a value that holds across the x axis)."""
    style = {"color": "black", "ls": ":", "lw": 1.2, "zorder": 4}
    style.update(kwargs)
    return ax.axhline(y, label=label, gid=DOCUMENT_GID, **style)


def shows_document_number(fig) -> bool:
    """Whether ``fig`` draws the document's own number (:func:`document_marker` or :func:`document_line`)."""
    return any(artist.get_gid() == DOCUMENT_GID for artist in fig.findobj())


@dataclass(frozen=True)
class Footer:
    """What a figure's last line says: how it was made. ``dtype`` is one string, or {series: dtype} when the
    series differ; ``commit`` is filled in by ``Artifacts.figure`` from the notebook's provenance."""
    kind: str  # MEASURED, THEORY or BOTH
    model: str = "none (analytic)"  # e.g. "target SmolLM2-135M-Instruct, draft smollm2-135m-draft"
    device: str = "none (analytic)"
    dtype: str | Mapping[str, str] = "n/a"
    profile: str = ""
    commit: str = ""
    note: str = ""  # one short extra fact, e.g. "document's numbers: Vicuna-7B on an A100"
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Footer kind must be one of {KINDS}, got {self.kind!r}")
        if not self.profile:
            raise ValueError("Footer needs the profile (smoke, quick or full)")

    def with_commit(self, commit: str) -> "Footer":
        return replace(self, commit=commit)

    def text(self) -> str:
        dtype = self.dtype if isinstance(self.dtype, str) else "; ".join(f"{k}: {v}" for k, v in self.dtype.items())
        parts = [self.kind, f"model: {self.model}", f"device: {self.device}", f"dtype: {dtype}",
                 f"profile: {self.profile}", f"commit: {self.commit or 'unknown'}",
                 *(f"{k}: {v}" for k, v in self.extra.items())]
        if self.note:
            parts.append(self.note)
        return " · ".join(parts)


def draw_footer(fig, footer: Footer) -> None:
    """The footer under the figure (saved with ``bbox_inches="tight"``, which takes it in), wrapped to the width."""
    for old in [t for t in fig.texts if t.get_gid() == FOOTER_GID]:
        old.remove()
    width_chars = max(40, int(fig.get_figwidth() * 17))
    text = "\n".join(textwrap.wrap(_plain(footer.text()), width_chars))
    fig.text(0.0, 0.0, text, ha="left", va="top", fontsize=FOOTER_SIZE, color="0.3", gid=FOOTER_GID,
             transform=fig.transFigure)


def _plain(text: str) -> str:
    """Footer text is plain: a ``$`` would start mathtext."""
    return text.replace("$", "")


def texts(fig) -> list[str]:
    """Every string drawn on the figure: titles, labels, tick labels, legends, annotations and the footer."""
    out = []
    for artist in fig.findobj(matplotlib.text.Text):
        text = artist.get_text()
        if text and artist.get_visible():
            out.append(text)
    return out


_MATH = re.compile(r"(?<!\\)\$.*?(?<!\\)\$", re.S)
_RAW = re.compile(r"\^|_\{|\\[A-Za-z]+")


def raw_markup(text: str) -> list[str]:
    """The pieces of ``text`` that would print as raw markup: ``^``, ``_{`` or ``\\cmd`` outside ``$…$``."""
    return _RAW.findall(_MATH.sub("", text))


def check(fig) -> None:
    """Refuse a figure that does not say what it is: raw markup in any text, no footer, or no title naming
    theory or measured. One ValueError lists every problem."""
    problems = []
    for text in texts(fig):
        bad = raw_markup(text)
        if bad:
            problems.append(f"raw markup {sorted(set(bad))} outside mathtext in {text!r}")
    if not any(t.get_gid() == FOOTER_GID for t in fig.texts):
        problems.append("no footer (save through Artifacts.figure with footer=plots.Footer(...))")
    titles = [fig._suptitle.get_text() if fig._suptitle is not None else ""]
    titles += [ax.get_title(loc) for ax in fig.axes for loc in ("center", "left", "right")]
    if not any(re.search(r"\b(theory|measured)\b", t, re.I) for t in titles):
        problems.append("no title says 'theory' or 'measured' (use plots.title)")
    if problems:
        raise ValueError("figure check failed: " + "; ".join(problems))
