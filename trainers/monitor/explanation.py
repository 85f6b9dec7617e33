"""``Explanation``: what ``MemoryMonitor.explain()`` returns, shown once wherever it is looked at.

Text in a terminal (``print(explanation)`` or the REPL's echo), HTML in a notebook: the text as a
preformatted block (never the escaped repr of a string) followed by the retained graph drawn as
SVG where graphviz and its ``dot`` program are installed.
"""
from __future__ import annotations

import html


class Explanation:
    """The retained chain of the last leak, for display.

    Attributes:
        text: the chain as text (what ``str()`` and ``repr()`` give).
        dot: the retained graph as Graphviz DOT text, or None when there is nothing to draw.

    Example:
        >>> explanation = Explanation("leak (accumulation) at train.py:12: total += loss")
        >>> explanation
        leak (accumulation) at train.py:12: total += loss
        >>> "<pre" in explanation._repr_html_() and "total += loss" in str(explanation)
        True
    """

    def __init__(self, text: str, dot: str | None = None) -> None:
        self.text = text
        self.dot = dot

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        block = f'<pre style="white-space: pre-wrap">{html.escape(self.text)}</pre>'
        picture = self._svg()
        return block + (f"\n<div>{picture}</div>" if picture else "")

    def _svg(self) -> str | None:
        """The graph drawn as SVG, or None where it cannot be drawn (the text stands alone)."""
        if self.dot is None:
            return None
        from needle.viz.dot import GraphvizMissingError, _pipe, missing_for_drawing

        if missing_for_drawing():
            return None
        try:
            return _pipe(self.dot, "svg").decode("utf-8")
        except GraphvizMissingError:
            return None
