"""BAR1 as a limited resource: registering GPU memory for a NIC (or mapping it for gdrcopy) takes
BAR1 space in 64 KiB GPU pages, and the K20's 256 MB runs out fast."""
from __future__ import annotations

import errno
from typing import Any

from ..errors import InvalidArgument, VerbsError
from .profile import Profile, get_profile

__all__ = ["register_mr", "bar1_available_bytes"]


def bar1_available_bytes(profile: Profile | str) -> int:
    """BAR1 a peer can use: the aperture less what the driver keeps for itself."""
    p = get_profile(profile).params
    return int(p["bar1_bytes"] - p["bar1_reserved_bytes"])


def register_mr(profile: Profile | str, nbytes: int, *, in_use_bytes: int = 0, **overrides: Any) -> dict:
    """Model ``ibv_reg_mr`` on ``nbytes`` of GPU memory (also what a gdrcopy mapping costs).

    The registration pins whole GPU pages, so it takes ``nbytes`` rounded up to ``gpu_page_bytes``
    of BAR1. With ``in_use_bytes`` already taken, a registration that does not fit raises
    :class:`gdrlab.errors.VerbsError` with errno ENOMEM, like the live engine's failed registration.
    Returns a dict with the bytes asked for, the BAR1 bytes taken, and what is left.
    """
    prof = get_profile(profile, **overrides)
    try:
        n = int(nbytes)
        used = int(in_use_bytes)
    except (TypeError, ValueError):
        raise InvalidArgument(f"nbytes must be a byte count, got {nbytes!r}") from None
    if n <= 0 or n != nbytes:
        raise InvalidArgument(f"nbytes must be a positive whole number of bytes, got {nbytes!r}")
    if used < 0:
        raise InvalidArgument(f"in_use_bytes must be >= 0, got {in_use_bytes!r}")
    page = int(prof.params["gpu_page_bytes"])
    mapped = -(-n // page) * page
    avail = bar1_available_bytes(prof)
    if used + mapped > avail:
        raise VerbsError(
            f"ibv_reg_mr: cannot map {mapped} bytes of GPU memory into BAR1 on profile {prof.name!r}: "
            f"{avail - used} of {int(prof.params['bar1_bytes'])} bytes left "
            f"({int(prof.params['bar1_reserved_bytes'])} kept by the driver, {used} in use)",
            library="model", call="ibv_reg_mr", code=errno.ENOMEM)
    return {"profile": prof.name, "nbytes": n, "mapped_bytes": mapped, "bar1_bytes": int(prof.params["bar1_bytes"]),
            "bar1_available_bytes": avail, "bar1_free_after_bytes": avail - used - mapped}
