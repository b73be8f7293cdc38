"""Hardware profiles: a topology (which socket, host bridge and switch each GPU and NIC sits under)
plus one value and one source for every parameter of :mod:`gdrlab.model.params`."""
from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument
from .params import ALIASES, LEVELS, PARAMS, PLACEMENTS, check_value, resolve_alias

__all__ = ["Profile", "profiles", "get_profile", "placement_between", "borrow_nic", "PROFILE_DIR"]

PROFILE_DIR = Path(__file__).with_name("profiles")  # where fitted profiles' data files live (catalog.FITTED)


def placement_between(topology: dict, a: str, b: str) -> str:
    """How devices ``a`` and ``b`` of ``topology`` are connected: same-switch, same-host-bridge or
    cross-socket (a PCIe switch counts as one bridge, as nvidia-smi's PIX/PXB do)."""
    devs = topology.get("devices", {})
    for d in (a, b):
        if d not in devs:
            raise InvalidArgument(f"no device {d!r} in the topology; devices: {', '.join(devs)}")
    da, db = devs[a], devs[b]
    if da.get("switch") and da.get("switch") == db.get("switch"):
        return "same-switch"
    if da.get("socket") == db.get("socket"):
        return "same-host-bridge"
    return "cross-socket"


class Profile:
    """A named hardware profile. ``params`` maps every parameter name to a float, ``sources`` to
    the text saying where the value came from; ``placement`` is the GPU-NIC placement in effect;
    ``level`` says what its latencies include: ``"verbs"`` (raw transport) or ``"MPI"`` (an MPI
    library's matching and protocol on top), shown beside every modelled number."""

    def __init__(self, name: str, description: str, params: dict, sources: dict, topology: dict,
                 placement: str | None = None, follows: str = "", calibration: dict | None = None,
                 level: str = "verbs") -> None:
        if level not in LEVELS:
            raise InvalidArgument(f"profile {name!r}: unknown level {level!r}; valid: {', '.join(LEVELS)}")
        self.level = level
        missing = [p for p in PARAMS if p not in params]
        if missing:
            raise InvalidArgument(f"profile {name!r} lacks parameters: {', '.join(missing)}")
        self.name = name
        self.description = description
        self.follows = follows
        self.topology = copy.deepcopy(topology)
        self.params = {k: check_value(k, params[k]) for k in PARAMS}
        self.sources = {k: str(sources.get(k, "unspecified")) for k in PARAMS}
        self.calibration = copy.deepcopy(calibration) if calibration else None
        self.overrides: dict[str, float] = {}  # what-if changes applied to the named profile
        if placement is None:
            placement = self.topology.get("placement")
        if placement is None:
            gpus, nics = self.gpu_names(), self.nic_names()
            placement = placement_between(self.topology, gpus[0], nics[0]) if gpus and nics else "same-host-bridge"
        if placement not in PLACEMENTS:
            raise InvalidArgument(f"unknown placement {placement!r}; valid: {', '.join(PLACEMENTS)}")
        self.placement = placement
        if self.params["bar1_reserved_bytes"] >= self.params["bar1_bytes"]:
            raise InvalidArgument("bar1_reserved_bytes must be smaller than bar1_bytes")

    # ------------------------------------------------------------------ topology
    def gpu_names(self) -> list[str]:
        return [n for n, d in self.topology.get("devices", {}).items() if d.get("kind") == "gpu"]

    def nic_names(self) -> list[str]:
        return [n for n, d in self.topology.get("devices", {}).items() if d.get("kind") == "nic"]

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_names())

    @property
    def has_nic(self) -> bool:
        return bool(self.nic_names())

    @property
    def link_layer(self) -> str | None:
        """The wire under the verbs transport: ``InfiniBand``, ``Ethernet`` (RoCE v2) or ``EFA``
        (AWS SRD), from the first NIC of the topology; None without a NIC."""
        nics = self.nic_names()
        if not nics:
            return None
        return str(self.topology["devices"][nics[0]].get("link_layer", "InfiniBand"))

    @property
    def wire(self) -> str:
        """The wire network paths use by default: ``verbs`` with an RDMA NIC, else ``tcp``."""
        return "verbs" if self.has_nic else "tcp"

    @property
    def units(self) -> dict[str, str]:
        return {k: PARAMS[k][0] for k in PARAMS}

    # ------------------------------------------------------------------ what-if
    def with_overrides(self, placement: str | None = None, **overrides: Any) -> "Profile":
        """A copy with some parameters replaced (``p2p_read_gbps=0.8``) and/or another placement.
        ``p2p_read_gbps`` / ``p2p_write_gbps`` set the rate of the placement in effect."""
        if not overrides and (placement is None or placement == self.placement):
            return self
        new = copy.copy(self)
        new.params = dict(self.params)
        new.sources = dict(self.sources)
        new.topology = copy.deepcopy(self.topology)
        new.overrides = dict(self.overrides)
        if placement is not None:
            if placement not in PLACEMENTS:
                raise InvalidArgument(f"unknown placement {placement!r}; valid: {', '.join(PLACEMENTS)}")
            new.placement = placement
        for key, value in overrides.items():
            real = resolve_alias(key, new.placement)
            try:
                new.params[real] = check_value(real, value)
            except InvalidArgument as exc:
                if real == key:
                    raise
                raise InvalidArgument(f"{key} (= {real} at placement {new.placement}): {exc}") from None
            new.overrides[key] = new.params[real]
            new.sources[real] = f"override (profile value {self.params.get(real)!r}: {self.sources.get(real)})"
        if new.params["bar1_reserved_bytes"] >= new.params["bar1_bytes"]:
            raise InvalidArgument("bar1_reserved_bytes must be smaller than bar1_bytes")
        return new

    def param(self, name: str) -> float:
        """One parameter, aliases allowed."""
        real = resolve_alias(name, self.placement)
        if real not in self.params:
            check_value(real, 0)  # raises the error that lists the valid names
        return self.params[real]

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "follows": self.follows,
            "level": self.level,
            "placement": self.placement,
            "topology": self.topology,
            "params": {k: {"value": self.params[k], "unit": PARAMS[k][0], "source": self.sources[k]}
                       for k in PARAMS},
            **({"calibration": self.calibration} if self.calibration else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(self.to_json() + "\n")
        return path

    @classmethod
    def from_dict(cls, doc: dict) -> "Profile":
        try:
            params = {k: v["value"] for k, v in doc["params"].items()}
            sources = {k: v.get("source", "unspecified") for k, v in doc["params"].items()}
            unknown = [k for k in params if k not in PARAMS]
            if unknown:
                raise InvalidArgument(f"unknown parameters in profile: {', '.join(unknown)}")
            return cls(doc["name"], doc.get("description", ""), params, sources, doc.get("topology", {}),
                       doc.get("placement"), doc.get("follows", ""), doc.get("calibration"),
                       doc.get("level", "verbs"))
        except (KeyError, TypeError) as exc:
            raise InvalidArgument(f"not a profile document: missing {exc}") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Profile":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def __repr__(self) -> str:
        return f"Profile({self.name!r}, level={self.level!r}, placement={self.placement!r}, n_gpus={self.n_gpus}, has_nic={self.has_nic})"


def borrow_nic(profile: Profile, donor: str | Profile = "hopper-ndr") -> Profile:
    """What-if: ``profile`` with the NIC (device and every NIC parameter) of ``donor``. The result is
    named ``<profile>+nic:<donor>`` and its description says the NIC is not part of the measurement."""
    base = get_profile(profile) if isinstance(profile, str) else profile
    don = get_profile(donor) if isinstance(donor, str) else donor
    if not don.has_nic:
        raise InvalidArgument(f"profile {don.name!r} has no NIC to lend")
    nic_keys = ["nic_pcie_gbps", "pcie_eff", "nic_wire_gbps", "wire_eff", "nic_lat_us", "doorbell_us", "completion_us",
                "gdr_extra_us", "xsocket_hop_us"] + [k for k in PARAMS if k.startswith(("p2p_read_", "p2p_write_"))]
    params, sources = dict(base.params), dict(base.sources)
    for k in nic_keys:
        params[k] = don.params[k]
        sources[k] = f"borrowed from {don.name} (what-if, not measured with this GPU): {don.sources[k]}"
    topo = copy.deepcopy(base.topology)
    gpu0 = base.gpu_names()[0] if base.gpu_names() else None
    where = topo["devices"][gpu0] if gpu0 else {"socket": 0, "host_bridge": "hb0", "switch": None}
    topo["devices"]["NIC0"] = {"kind": "nic", "name": f"{don.name} NIC (borrowed)", "socket": where.get("socket"),
                               "host_bridge": where.get("host_bridge"), "switch": where.get("switch")}
    desc = (f"WHAT-IF: {base.name} with the NIC of {don.name} added; the NIC figures are not measured "
            f"on this GPU. {base.description}")
    return Profile(f"{base.name}+nic:{don.name}", desc, params, sources, topo, None, base.follows,
                   level=base.level)


# ---------------------------------------------------------------------- registry
_cache: dict[str, Profile] = {}


def profiles() -> list[str]:
    """Names of the builtin profiles, in listing order (the one registry: :mod:`.catalog`)."""
    from .catalog import names
    return list(names())


def _load(name: str) -> Profile:
    if name not in _cache:
        from .catalog import document
        _cache[name] = Profile.from_dict(document(name))
    return _cache[name]


def get_profile(name: str | Profile, placement: str | None = None, **overrides: Any) -> Profile:
    """A profile by name (or a Profile, returned as is), with parameter overrides applied."""
    if isinstance(name, Profile):
        prof = name
    elif isinstance(name, str):
        prof = _fresh(_load(name))  # callers may edit their copy; the cached one stays pristine
    else:
        raise InvalidArgument(f"profile must be a name or a Profile, got {type(name).__name__}")
    return prof.with_overrides(placement=placement, **overrides)


def _fresh(prof: Profile) -> Profile:
    new = copy.copy(prof)
    new.params, new.sources, new.overrides = dict(prof.params), dict(prof.sources), dict(prof.overrides)
    new.topology = copy.deepcopy(prof.topology)
    new.calibration = copy.deepcopy(prof.calibration)
    return new


def _valid_override_names() -> list[str]:
    return list(PARAMS) + list(ALIASES)
