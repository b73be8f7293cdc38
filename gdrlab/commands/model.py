"""``gdrlab model``: modelled latency and bandwidth of every path, crossovers, hybrid policy and
the parameters of a profile with their sources. Every result is labelled "modelled"."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from ..vocab import DEFAULT_CHUNK_BYTES, PLACEMENTS, WIRES
from ._common import Subparsers, add_command, emit_json, table

if TYPE_CHECKING:
    from ..model import Profile

HELP = "predict latency/bandwidth of every path from a hardware profile"
DESCRIPTION = ("Modelled one-way latency (us) and streaming bandwidth (GB/s) of the transfer paths for a "
               "named hardware profile. Actions: predict (default), crossover (smallest size at which "
               "--b beats --a), policy (which path for which sizes), show (parameters with sources), "
               "list (profiles).")

ACTIONS = ("predict", "crossover", "policy", "show", "list")


class _Options(TypedDict, total=False):
    """The model's keywords the command line sets: pipelined chunk and depth, and the wire."""

    chunk: int
    depth: int
    wire: str | None


def add_parser(sub: Subparsers) -> argparse.ArgumentParser:
    p = add_command(sub, "model", HELP, DESCRIPTION)
    p.add_argument("action", nargs="?", default="predict", choices=ACTIONS, help="default: predict")
    p.add_argument("--list", action="store_true", help="list the profiles (same as the list action)")
    p.add_argument("--profile", default="hopper-ndr", help="profile name (see --list); default hopper-ndr")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a parameter, e.g. --set p2p_read_gbps=0.8 (repeatable)")
    p.add_argument("--placement", default=None, choices=PLACEMENTS,
                   help="GPU-NIC placement (default: the profile's topology)")
    p.add_argument("--path", action="append", default=None,
                   help="path(s) to predict (repeatable or comma-separated; default: all the profile can run)")
    p.add_argument("--sizes", default="8:64M", help="e.g. 8,4K,1M or 8:64M (powers of two); default 8:64M")
    p.add_argument("--wire", default=None, choices=WIRES, help="default: verbs with a NIC, else tcp")
    p.add_argument("--chunk", default=None, help=f"pipelined chunk size (default: the profile's, {DEFAULT_CHUNK_BYTES >> 10}K)")
    p.add_argument("--depth", type=int, default=None, help="pipelined buffers per side (default: the profile's)")
    p.add_argument("--borrow-nic", default=None, metavar="PROFILE",
                   help="what-if: add the NIC of another profile (e.g. h200-lab --borrow-nic hopper-ndr)")
    p.add_argument("--a", default=None, help="crossover: the path used below the crossover")
    p.add_argument("--b", default=None, help="crossover: the path that may win above it")
    p.add_argument("--explain", action="store_true",
                   help="predict: list every link on each path's route with its rate, and the bottleneck")
    return p


def _overrides(items: list[str]) -> dict[str, float]:
    from ..errors import InvalidArgument

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"--set wants KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise InvalidArgument(f"--set {key.strip()}: not a number: {value!r}") from None
    return out


def _profile(args: argparse.Namespace) -> tuple[Profile, dict[str, float]]:
    from .. import model
    from ..errors import InvalidArgument

    overrides = _overrides(args.set)
    prof = model.get_profile(args.profile)
    if args.borrow_nic:
        prof = model.borrow_nic(prof, args.borrow_nic)
    prof = prof.with_overrides(placement=args.placement)
    for key, value in overrides.items():
        try:
            one: dict[str, Any] = {key: value}  # a parameter name, as --set gave it
            prof = prof.with_overrides(**one)
        except InvalidArgument as exc:
            raise InvalidArgument(f"--set {key}={value:g}: {exc}") from None
    return prof, overrides


def run(args: argparse.Namespace) -> int:
    from .. import model
    from ..errors import InvalidArgument
    from ..units import parse_size

    action = "list" if args.list else args.action
    if action == "list":
        rows = [{"name": n, "level": model.get_profile(n).level, "description": model.get_profile(n).description}
                for n in model.profiles()]
        if args.json:
            emit_json({"profiles": rows})
        else:
            for r in rows:
                print(f"{r['name']} ({r['level']} level)\n    {r['description']}\n")
        return 0

    prof, overrides = _profile(args)
    kw: _Options = {}
    if args.chunk is not None:
        try:
            kw["chunk"] = parse_size(args.chunk)
        except ValueError as exc:
            raise InvalidArgument(f"--chunk {args.chunk}: {exc}") from None
    if args.depth is not None:
        kw["depth"] = args.depth
    if args.wire is not None:
        kw["wire"] = args.wire
    from .. import provenance
    prov = provenance.modelled(prof.name, prof.level, placement=prof.placement, overrides=overrides,
                               follows=prof.follows)
    label = f"[modelled, {prof.level} level]"

    if action == "show":
        params = [{"name": k, "value": prof.params[k], "unit": prof.units[k], "source": prof.sources[k]}
                  for k in prof.params]
        doc = {"profile": prof.name, "level": prof.level, "description": prof.description, "follows": prof.follows,
               "placement": prof.placement, "n_gpus": prof.n_gpus, "has_nic": prof.has_nic, "wire": prof.wire,
               "topology": prof.topology, "params": params, "calibration": prof.calibration}
        if args.json:
            emit_json(doc)
        else:
            print(f"{prof.name}: {prof.description}\nfollows: {prof.follows}; level {prof.level}; "
                  f"placement {prof.placement}\n")
            print(table([{**r, "value": f"{r['value']:.6g}"} for r in params], ["name", "value", "unit", "source"]))
        return 0

    if action == "crossover":
        return _crossover(model, args, prof, kw, prov, label)

    if action == "policy":
        return _policy(model, args, prof, kw, prov, label)

    return _predict(model, args, prof, kw, label)


def _crossover(model: ModuleType, args: argparse.Namespace, prof: Profile, kw: _Options, prov: dict[str, Any],
               label: str) -> int:
    from ..errors import InvalidArgument

    if not args.a or not args.b:
        raise InvalidArgument("crossover needs --a PATH and --b PATH")
    found = model.crossings(prof, args.a, args.b, **kw)
    size = next((c["size"] for c in found if c["faster"] == args.b), None)
    notes = _chunk_notes(model, (args.a, args.b), found)
    doc = {"profile": prof.name, "a": args.a, "b": args.b, "crossover_bytes": size, "crossings": found,
           "provenance": prov, "notes": notes}
    if args.json:
        emit_json(doc)
        return 0
    if size is None:
        print(f"{args.b} never beats {args.a} on {prof.name} ({prof.placement}, 1 B to 1 GiB)  {label}")
    else:
        print(f"{args.b} beats {args.a} from {_size_text(size)} on {prof.name} ({prof.placement})  {label}")
    later = [c for c in found if c["size"] > size] if size is not None else []
    for c in later:
        print(f"  then {c['faster']} is faster again from {_size_text(c['size'])}")
    for n in notes:
        print(f"note: {n}")
    return 0


def _policy(model: ModuleType, args: argparse.Namespace, prof: Profile, kw: _Options, prov: dict[str, Any],
            label: str) -> int:
    paths = _paths(args)
    pol = model.hybrid_policy(prof, paths, **kw)
    notes = _chunk_notes(model, [r["path"] for r in pol], pol)
    if args.json:
        emit_json({"profile": prof.name, "policy": pol, "provenance": prov, "notes": notes})
    else:
        print(f"hybrid policy on {prof.name} ({prof.placement})  {label}")
        print(table(pol, ["lo", "hi", "path"]))
        for n in notes:
            print(f"note: {n}")
    return 0


def _predict(model: ModuleType, args: argparse.Namespace, prof: Profile, kw: _Options, label: str) -> int:
    paths = _paths(args)
    df = model.predict_all(prof, args.sizes, paths=paths, **kw)
    rows = df.to_dict(orient="records")
    explained = _explain(model, prof, rows, kw) if args.explain else None
    if args.json:
        emit_json({"rows": rows, "provenance": df.attrs["provenance"],
                   **({"explain": explained} if explained is not None else {})})
        return 0
    print(f"profile {prof.name}, placement {prof.placement}  {label}", file=sys.stderr)
    print(table([{"path": r["path"], "size": r["size"], "lat_us": f"{r['lat_us']:.3f}",
                  "bw_gbps": f"{r['bw_gbps']:.3f}", "bottleneck": r["bottleneck"]} for r in rows],
                ["path", "size", "lat_us", "bw_gbps", "bottleneck"]))
    for e in explained or []:
        links = ", ".join(f"{k} {v:.3g}" for k, v in e["links_gbps"].items())
        print(f"{e['path']}: route {links} GB/s; slowest link {e['slowest_link']}; "
              f"at {e['size']} B the bottleneck is {e['bottleneck']}")
    return 0


def _chunk_notes(model: ModuleType, paths: Any, changes: list[dict]) -> list[str]:
    """The note on chunk steps, where a chunked path is involved and the answer changes more than once."""
    return [model.CHUNK_NOTE] if "pipelined" in paths and len(changes) > 1 else []


def _size_text(size: int) -> str:
    from ..units import format_size

    text = format_size(size)
    return f"{size} bytes" if text.rstrip("B").strip() == str(size) else f"{size} bytes ({text})"


def _explain(model: ModuleType, prof: Profile, rows: list[dict[str, Any]], kw: _Options) -> list[dict[str, Any]]:
    """One route explanation per path, at the largest size asked for."""
    out: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for r in rows:
        seen[r["path"]] = max(seen.get(r["path"], 0), int(r["size"]))
    for path, size in seen.items():
        w = kw.get("wire") if path in model.NETWORK_PATHS else None
        out.append(model.explain(prof, path, size, **{**kw, "wire": w}))
    return out


def _paths(args: argparse.Namespace) -> list[str] | None:
    if not args.path:
        return None
    return [p.strip() for item in args.path for p in item.split(",") if p.strip()]
