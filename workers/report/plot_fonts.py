"""Fonts for the PNG plots: DejaVu Sans (matplotlib's own) first, then the CJK fonts installed here, so a
Chinese or Japanese label is drawn, not boxes. matplotlib (3.6+) falls back per glyph along the family list;
only fonts it finds are listed, so a machine without them draws as before (and warns of missing glyphs).
The image and the test tooling install fonts-noto-cjk.
"""

from __future__ import annotations

import threading

CJK_FAMILIES = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK TC", "Noto Serif CJK SC",
                "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback")

_done = threading.Lock()
_families: list[str] | None = None


def installed_cjk_families() -> list[str]:
    from matplotlib import font_manager

    names = {f.name for f in font_manager.fontManager.ttflist}
    return [f for f in CJK_FAMILIES if f in names]


def use_installed_fonts() -> list[str]:
    """Put the installed CJK fonts after DejaVu Sans in matplotlib's sans-serif list (once per process);
    returns the family list in use."""
    global _families
    with _done:
        if _families is None:
            import matplotlib

            found = installed_cjk_families()
            current = [f for f in matplotlib.rcParams["font.sans-serif"] if f not in found]
            _families = ["DejaVu Sans", *found, *(f for f in current if f != "DejaVu Sans")]
            matplotlib.rcParams["font.sans-serif"] = _families
        return _families
