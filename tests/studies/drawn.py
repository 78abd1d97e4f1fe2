"""What the figure tests of tests/studies/ share: a figure checked as ``Artifacts.figure`` checks it before saving."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from specrepro.run import plots  # noqa: E402


def checked(fig) -> list[str]:
    """Draw a footer under ``fig``, run ``plots.check`` on it (a title saying theory or measured, no raw markup
    outside mathtext), close it and return every string drawn on it."""
    plots.draw_footer(fig, plots.Footer(plots.MEASURED, model="tiny", device="CPU", dtype="fp32", profile="smoke"))
    plots.check(fig)
    drawn = plots.texts(fig)
    plt.close(fig)
    return drawn
