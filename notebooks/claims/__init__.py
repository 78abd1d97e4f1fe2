"""The claims the reproduction report judges: one module per founding document, named after the document's label
in the catalogue of ``shared/seeds/README.md``, each holding its claims in the catalogue's order.

A catalogue item is added in its document's module (one block: paths, ``@claim`` row, judge; and its name in that
module's ``CLAIMS``). ``notebooks/reproduction.py`` reads :data:`CLAIMS` and judges, compares and renders them; the
modules here import nothing of the report, only :mod:`claims.base` and :mod:`claims.formulas`, so there is no cycle.
"""

from __future__ import annotations

from . import mentored_blog, mjsd, ppd, slides, survey_blog
from .base import Claim

# In the catalogue's order of documents.
DOCUMENTS = (slides, survey_blog, mentored_blog, mjsd, ppd)
CLAIMS: tuple[Claim, ...] = tuple(c for document in DOCUMENTS for c in document.CLAIMS)
