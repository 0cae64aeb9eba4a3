"""Plot conventions for every chapter, in one place.

- One colour-blind-safe colour (Okabe–Ito) and one marker per eviction policy, the same in
  every chapter: `policy_style(name)`, for every name in `paged_kv.cache.eviction.POLICIES` at
  run time; a policy added later gets a stable fallback colour and marker of its own.
- `use_course_style()`: retina output at a readable size (figures sized for a ~950 px notebook
  column), legible fonts, no top/right spines, PNGs kept small.
- `finish(ax, title=..., xlabel=..., ylabel=...)`: titles and axis labels with units, and
  `legend_outside(ax)` puts the legend beside the data, never on it.
- `mark_default(ax, x, label)`: marks the library's default (B = 16, the aging window, …).
- `block_size_ticks(ax, sizes)`: block sizes as plain numbers, not 2⁰…2⁸.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Sequence
from typing import Any

from paged_kv.widgets.theme import OKABE_ITO

# Fixed styles of the policies the course compares; `policy_style` covers any other name.
_FIXED: dict[str, dict[str, Any]] = {
    "lru": {"color": OKABE_ITO["blue"], "marker": "o", "linestyle": "-"},
    "lfu": {"color": OKABE_ITO["vermillion"], "marker": "s", "linestyle": "-"},
    "lfu-aging": {"color": OKABE_ITO["bluish green"], "marker": "^", "linestyle": "-"},
    "fifo": {"color": OKABE_ITO["orange"], "marker": "D", "linestyle": "--"},
    "s3fifo": {"color": OKABE_ITO["reddish purple"], "marker": "v", "linestyle": "-."},
    "w-tinylfu": {"color": OKABE_ITO["sky blue"], "marker": "P", "linestyle": "-."},
    "arc": {"color": "#7a5c00", "marker": "X", "linestyle": ":"},
    "belady": {"color": OKABE_ITO["black"], "marker": "", "linestyle": "--"},
}
# Fallbacks for names not listed above: colours not used by the fixed ones, distinct markers.
_SPARE_COLOURS = ("#555555", "#9e4a00", "#004d70", "#00664a", "#8a3d6b", "#6b6b00")
_SPARE_MARKERS = ("h", "*", "p", "<", ">", "8", "d")

# Schemes of chapter 00 and 06, and the states of a block, for bar charts.
SCHEME_COLOURS = {
    "paged": OKABE_ITO["blue"],
    "contiguous": OKABE_ITO["orange"],
}
PART_COLOURS = {
    "token_states": OKABE_ITO["blue"],
    "reserved": OKABE_ITO["sky blue"],
    "internal_fragmentation": OKABE_ITO["orange"],
    "external_fragmentation": "#b5b5b5",
}

FIGURE_WIDTH = 9.0  # inches: about 900 px at dpi 100, the width of a notebook column
FIGURE_DPI = 100


def policy_names() -> list[str]:
    """Every policy name the library knows now (`POLICIES`), then Belady's bound."""
    from paged_kv.cache.eviction import POLICIES

    return [*POLICIES, "belady"]


def policy_style(name: str) -> dict[str, Any]:
    """Keyword arguments for `ax.plot` that draw `name` the same way in every chapter:
    color, marker, linestyle and label. Unknown names get a stable fallback."""
    style = _FIXED.get(name)
    if style is None:
        slot = zlib.crc32(name.encode())
        style = {
            "color": _SPARE_COLOURS[slot % len(_SPARE_COLOURS)],
            "marker": _SPARE_MARKERS[slot % len(_SPARE_MARKERS)],
            "linestyle": "-",
        }
    return {**style, "label": "Belady (optimal)" if name == "belady" else name}


def policy_styles() -> dict[str, dict[str, Any]]:
    """`policy_style` for every policy in `POLICIES` now, and Belady."""
    return {name: policy_style(name) for name in policy_names()}


def use_course_style(retina: bool = True) -> None:
    """Matplotlib defaults for the course: readable sizes, light grid, no top/right spines,
    and (in a notebook) retina PNGs, crisp on high-density screens."""
    import matplotlib

    matplotlib.rcParams.update(
        {
            "figure.figsize": (FIGURE_WIDTH, 3.4),
            "figure.dpi": FIGURE_DPI,
            "savefig.dpi": FIGURE_DPI,
            "font.size": 10,
            "axes.titlesize": 11,
            "axes.labelsize": 10,
            "legend.fontsize": 9,
            "legend.frameon": False,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "lines.markersize": 5,
        }
    )
    if retina:
        _show_retina_pngs()


def retina_png(fig: Any) -> tuple[bytes, dict[str, int]]:
    """`fig` as a PNG at twice its dpi, shown at its nominal size (crisp on high-density
    screens), reduced to a 256-colour palette so a notebook's stored plots stay small."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    fig.canvas.print_figure(buffer, format="png", dpi=2 * fig.dpi, bbox_inches="tight",
                            facecolor="white")  # fmt: skip
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    small = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(small, "png", optimize=True)
    width, height = image.size
    return small.getvalue(), {"width": width // 2, "height": height // 2}


def _show_retina_pngs() -> None:
    """Make IPython display every figure through `retina_png` (nothing outside IPython)."""
    try:
        from IPython import get_ipython
        from matplotlib.figure import Figure
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    with contextlib.suppress(ImportError):  # importing the inline backend sets its formatters:
        import matplotlib_inline.backend_inline  # noqa: F401 - let it, then replace them

    formatters = shell.display_formatter.formatters
    formatters["image/png"].for_type(Figure, retina_png)
    for other in ("image/svg+xml", "application/pdf", "image/jpeg"):
        formatters[other].pop(Figure, None)


def finish(ax: Any, *, title: str = "", xlabel: str = "", ylabel: str = "") -> Any:
    """Set a title and axis labels (say the unit: "cache capacity (blocks)")."""
    if title:
        ax.set_title(title)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    return ax


def legend_outside(ax: Any, **kwargs: Any) -> Any:
    """A legend to the right of the axes, off the data."""
    return ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kwargs)


def mark_default(ax: Any, x: float, label: str = "default") -> None:
    """A dotted vertical line at the library's default value, labelled at the top."""
    ax.axvline(x, color="#555555", linestyle=":", linewidth=1.2, zorder=0)
    ax.annotate(
        label, xy=(x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -3),
        textcoords="offset points", va="top", fontsize=8, color="#333333", zorder=5,
        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none"},
    )  # fmt: skip


def block_size_ticks(ax: Any, sizes: Sequence[int], axis: str = "x") -> None:
    """Log-2 axis with the block sizes themselves as tick labels (1, 4, 16, …)."""
    from matplotlib.ticker import NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    target.set_ticks(list(sizes), [str(s) for s in sizes])
    target.set_minor_locator(NullLocator())
