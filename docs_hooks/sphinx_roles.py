"""mkdocs hook: render the Sphinx cross-reference roles of fedsciml's docstrings (``:class:`~a.b.C```,
``:func:``, ``:meth:``, ``:mod:``, ``:attr:``, ``:data:``, ``:exc:``, ``:obj:``) as code, as Sphinx would
(``~`` keeps only the last component), instead of showing the role literally on the API page."""
from __future__ import annotations

import re

_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):<code>(~?)([^<]+)</code>")


def _sub(m: re.Match) -> str:
    target = m.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if m.group(1) else target}</code>"


def render(html: str) -> str:
    return _ROLE.sub(_sub, html)


def on_page_content(html: str, **kwargs) -> str:
    return render(html)
