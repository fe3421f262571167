"""Fonts for the PNG plots: DejaVu Sans (matplotlib's own) first, then the CJK fonts installed here, so a
Chinese or Japanese label is drawn, not boxes. matplotlib (3.6+) falls back per glyph along the families
`font.family` names; only fonts it finds are listed, so a machine without them draws as before (and warns of
missing glyphs). Set only when a label needs it: each CJK font is a 20 MB file to load.
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
    """Draw with DejaVu Sans, then the installed CJK fonts (once per process); returns the families."""
    global _families
    with _done:
        if _families is None:
            import matplotlib

            # Named families, not the generic "sans-serif": matplotlib falls back per glyph only along the
            # families font.family names.
            _families = ["DejaVu Sans", *installed_cjk_families()]
            matplotlib.rcParams["font.family"] = _families
        return _families
