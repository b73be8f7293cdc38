"""The labs' standard controls, named and ranged the same way everywhere: sizes, path, chunk size,
model profile and GPU-NIC placement (ipywidgets; values in the vocabulary of gdrlab.model)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from ..units import format_size, parse_sizes
from ..vocab import DEFAULT_CHUNK_BYTES, PLACEMENTS

if TYPE_CHECKING:
    import ipywidgets as w

    from .quick import SizeSpec

__all__ = ["size_range", "selected_sizes", "path_dropdown", "chunk_slider", "profile_dropdown",
           "placement_dropdown"]

_STYLE = {"description_width": "initial"}


def size_range(sizes: SizeSpec = "8:64M", description: str = "sizes (bytes)") -> w.SelectionRangeSlider:
    """A range slider over the sizes of ``sizes`` (labels like ``4K``); see :func:`selected_sizes`."""
    import ipywidgets as w

    options = [(format_size(s), s) for s in parse_sizes(sizes)]
    return w.SelectionRangeSlider(options=options, index=(0, len(options) - 1), description=description,
                                  continuous_update=False, style=_STYLE, layout={"width": "420px"})


def selected_sizes(control: w.SelectionRangeSlider) -> list[int]:
    """The sizes from a :func:`size_range` slider's lower to its upper end, inclusive."""
    values = [v for _, v in control.options]
    lo, hi = control.index
    return values[lo:hi + 1]


def path_dropdown(paths: Iterable[str] | None = None, value: str | None = None) -> w.Dropdown:
    """A dropdown of transfer paths (default: every path the model knows)."""
    import ipywidgets as w

    if paths is None:
        from .. import model
        paths = model.PATHS
    paths = list(paths)
    return w.Dropdown(options=paths, value=value or paths[0], description="path", style=_STYLE)


def chunk_slider(value: int = DEFAULT_CHUNK_BYTES, low: int = 4096, high: int = 16 << 20) -> w.SelectionSlider:
    """Pipelined chunk size in bytes, powers of two from ``low`` to ``high`` (default 256K, the
    MVAPICH2-GDR ``MV2_CUDA_BLOCK_SIZE``)."""
    import ipywidgets as w

    options = [(format_size(s), s) for s in parse_sizes(f"{low}:{high}")]
    if value not in [v for _, v in options]:
        raise ValueError(f"chunk {value} is not a power of two between {low} and {high}")
    return w.SelectionSlider(options=options, value=value, description="chunk (bytes)",
                             continuous_update=False, style=_STYLE)


def profile_dropdown(value: str | None = None) -> w.Dropdown:
    """A dropdown of the model's hardware profiles."""
    import ipywidgets as w

    from .explorer import profile_names

    names = profile_names()
    if value is not None and value not in names:
        raise ValueError(f"unknown profile {value!r}; known: {', '.join(names)}")
    return w.Dropdown(options=names, value=value or names[0], description="profile", style=_STYLE)


def placement_dropdown(value: str = PLACEMENTS[0]) -> w.Dropdown:
    """GPU-NIC placement: same-switch, same-host-bridge or cross-socket (nvidia-smi PIX/PXB, PHB/NODE, SYS)."""
    import ipywidgets as w

    return w.Dropdown(options=list(PLACEMENTS), value=value, description="placement", style=_STYLE)
