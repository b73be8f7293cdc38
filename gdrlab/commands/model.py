"""``gdrlab model``: modelled latency and bandwidth of every path, crossovers, hybrid policy and
the parameters of a profile with their sources. Every result is labelled "modelled"."""
from __future__ import annotations

import argparse
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypedDict

from .. import provenance
from ..errors import InvalidArgument
from ..units import format_size, parse_size
from ..vocab import DEFAULT_CHUNK_BYTES, PLACEMENTS, WIRES
from ._common import Subparsers, add_command, emit_json, table

if TYPE_CHECKING:
    from ..model import Profile

HELP = "predict latency/bandwidth of every path from a hardware profile"
DESCRIPTION = ("Modelled one-way latency (us) and streaming bandwidth (GB/s) of the transfer paths for a "
               "named hardware profile. Actions: predict (default), crossover (smallest size at which "
               "--b beats --a), policy (which path for which sizes), show (parameters with sources), "
               "list (profiles), storage (a file read into GPU memory: GDS, cuFile compat mode, read() "
               "into pinned or pageable memory plus a copy), gpu-initiated (small-message latency and "
               "message rate with a CPU proxy thread or with the GPU ringing the NIC's doorbell). "
               "Where a pipelined path's chunk steps make the faster path change back and forth, "
               "crossover and policy print that stretch as one band and say why; --exact prints every change.")

ACTIONS = ("predict", "crossover", "policy", "show", "list", "storage", "gpu-initiated")


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
                   help="predict, storage: list every link on the route with its rate, and the bottleneck")
    p.add_argument("--exact", action="store_true",
                   help="crossover, policy: print every change of the faster path, chunk steps included")
    p.add_argument("--csv", action="store_true", help="rows as CSV on stdout (predict, storage, gpu-initiated)")
    g = p.add_argument_group("storage (action storage; --set also takes the drive's parameters)")
    g.add_argument("--drive", default="nvme-gen4", help="drive: nvme-gen4 (default), nvme-gen5, h200-vda")
    g.add_argument("--method", action="append", default=None,
                   help="gds, cufile-compat, read-pinned, read-pageable (repeatable or comma-separated; default all)")
    g.add_argument("--page-cache", default="miss", choices=("hit", "miss"),
                   help="the file's bytes are in the page cache (hit) or on the drive (miss, default); GDS always "
                        "reads the drive")
    g.add_argument("--drive-placement", default=None, choices=PLACEMENTS,
                   help="where the drive sits relative to the GPU (default same-switch: GDS at full rate)")
    g.add_argument("--bounce", default=None, help="cuFile compat mode's bounce buffer, e.g. 1M (default: the drive's)")
    return p


def _overrides(items: list[str]) -> dict[str, float]:

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


def _profile(args: argparse.Namespace, skip: tuple[str, ...] = ()) -> tuple[Profile, dict[str, float]]:
    from .. import model

    overrides = {k: v for k, v in _overrides(args.set).items() if k not in skip}
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

    if action in ("storage", "gpu-initiated"):
        return _other_route(model, args, action)

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


def _chunk(prof: Profile, kw: _Options, paths: Any) -> int | None:
    """The chunk size whose multiples step a pipelined latency, where pipelined is among ``paths``."""
    if "pipelined" not in paths:
        return None
    return int(kw.get("chunk") or prof.params["chunk_bytes"])


def _bands(model: ModuleType, prof: Profile, kw: _Options, ranges: list[dict], paths: Any) -> list[dict]:
    """Chunk-step bands of ``ranges`` with the largest latency gap between their paths."""
    bands = model.step_bands(ranges, _chunk(prof, kw, paths))
    for b in bands:
        b["margin_us"] = model.band_margin_us(prof, b["paths"], b, **kw)
    return bands


def _band_note(b: dict) -> str:
    names = " and ".join(b["paths"])
    steps = ", ".join(_size_text(m) for m in b["chunk_multiples"][:4]) + (", ..." if len(b["chunk_multiples"]) > 4 else "")
    at = f" (chunk multiples here: {steps})" if steps else f" (just above the chunk multiple {_size_text(b['lo'] - 1)})"
    return (f"{_size_text(b['lo'])} to {_size_text(b['hi'])}: {names} trade the lead {b['changes']} times. Pipelined "
            f"latency steps up at every multiple of its {_size_text(b['chunk_bytes'])} chunk{at}: the extra chunk pays "
            f"its copy launches and post again; between steps its latency grows more slowly, so it wins the lead back as "
            f"that chunk fills. The two stay within "
            f"{b['margin_us']:.3g} us of each other there, so either is as good; a library would pick one threshold.")


def _crossover(model: ModuleType, args: argparse.Namespace, prof: Profile, kw: _Options, prov: dict[str, Any],
               label: str) -> int:

    if not args.a or not args.b:
        raise InvalidArgument("crossover needs --a PATH and --b PATH")
    found = model.crossings(prof, args.a, args.b, **kw)
    size = next((c["size"] for c in found if c["faster"] == args.b), None)
    ranges = model.ranges_of(found, args.a, args.b)
    bands = _bands(model, prof, kw, ranges, (args.a, args.b))
    settled = model.settled_policy(ranges, bands)
    last = settled[-1]
    settled_at = last["lo"] if last.get("path") == args.b else None
    notes = ([model.CHUNK_NOTE] if bands else []) + [_band_note(b) for b in bands]
    doc = {"profile": prof.name, "a": args.a, "b": args.b, "crossover_bytes": size, "crossings": found,
           "settled_bytes": settled_at, "step_bands": bands, "provenance": prov, "notes": notes}
    if args.json:
        emit_json(doc)
        return 0
    where = f"on {prof.name} ({prof.placement})"
    if size is None:
        print(f"{args.b} never beats {args.a} on {prof.name} ({prof.placement}, 1 B to 1 GiB)  {label}")
        return 0
    print(f"{args.b} beats {args.a} from {_size_text(size)} {where}  {label}")
    if args.exact:
        for c in [c for c in found if c["size"] > size]:
            print(f"  then {c['faster']} is faster again from {_size_text(c['size'])}")
    else:
        for r in settled:
            if r["hi"] < size or r["lo"] == settled_at:
                continue
            if r.get("band"):
                print(f"  {_size_text(r['lo'])} to {_size_text(r['hi'])}: chunk steps, the lead changes hands "
                      f"(see the note; --exact lists each change)")
            elif r["lo"] > size:
                print(f"  from {_size_text(r['lo'])}: {r['path']} is faster")
    if settled_at is not None and settled_at != size:
        print(f"{args.b} is faster at every size from {_size_text(settled_at)} on")
    for n in notes:
        print(f"note: {n}")
    return 0


def _policy(model: ModuleType, args: argparse.Namespace, prof: Profile, kw: _Options, prov: dict[str, Any],
            label: str) -> int:
    paths = _paths(args)
    pol = model.hybrid_policy(prof, paths, **kw)
    bands = _bands(model, prof, kw, pol, paths or [r["path"] for r in pol])
    settled = model.settled_policy(pol, bands)
    notes = ([model.CHUNK_NOTE] if bands else []) + [_band_note(b) for b in bands]
    if args.json:
        emit_json({"profile": prof.name, "policy": pol, "settled": settled, "step_bands": bands,
                   "provenance": prov, "notes": notes})
        return 0
    print(f"hybrid policy on {prof.name} ({prof.placement})  {label}")
    shown = pol if args.exact else [{**r, "path": r["path"] or f"{' or '.join(r['paths'])} (chunk steps, see note)"}
                                    for r in settled]
    print(table(shown, ["lo", "hi", "path"]))
    for n in notes:
        print(f"note: {n}")
    return 0


def _other_route(model: ModuleType, args: argparse.Namespace, action: str) -> int:
    """``storage`` and ``gpu-initiated``: routes whose parameters are not a profile's. ``--set``
    takes both kinds: a storage or GPU-initiated parameter goes to that model, others to the profile."""
    initiated, storage = model.initiated, model.storage

    own = storage.STORAGE_PARAMS if action == "storage" else initiated.INITIATED_PARAMS
    given = _overrides(args.set)
    mine = {k: v for k, v in given.items() if k in own}
    known = set(model.param_names()) | set(model.params.ALIASES)
    for key in given:
        if key not in own and key not in known:
            raise InvalidArgument(f"--set {key}: not a parameter of the {action} route ({', '.join(own)}) "
                                  "nor of a profile (gdrlab model show lists those)")
    prof, _ = _profile(args, skip=tuple(mine))
    label = f"[modelled, {prof.level} level]"
    sizes = args.sizes if args.sizes != "8:64M" else ("4K:1G" if action == "storage" else "8:1M")
    if action == "storage":
        if args.bounce is not None:
            try:
                mine["bounce_bytes"] = float(parse_size(args.bounce))
            except ValueError as exc:
                raise InvalidArgument(f"--bounce {args.bounce}: {exc}") from None
        methods = [m.strip() for item in (args.method or []) for m in item.split(",") if m.strip()] or None
        kw: dict[str, Any] = {"page_cache": args.page_cache == "hit", "placement": args.drive_placement,
                              "drive_name": args.drive, **mine}
        df = storage.predict_storage(prof, sizes, methods, **kw)
        cols = ["method", "size", "lat_us", "bw_gbps", "bottleneck"]
        head = (f"file into GPU memory: profile {prof.name}, drive {args.drive} "
                f"({args.drive_placement or 'same-switch'} to the GPU), page cache {args.page_cache}  {label}")
        extra: dict[str, Any] = {}
        notes = [storage.STEP_NOTE] if "cufile-compat" in set(df["method"]) else []
        if args.page_cache == "hit" and "gds" in set(df["method"]):
            notes.append("GDS proper opens the file with O_DIRECT and never reads the page cache: its rows read the drive")
        if args.explain:
            extra["explain"] = [storage.explain_storage(prof, m, float(df["size"].max()), **kw)
                                for m in dict.fromkeys(df["method"])]
    else:
        df = initiated.predict_initiated(prof, sizes, **mine)
        cols = ["initiator", "size", "lat_us", "mops", "bw_gbps", "limit"]
        head = f"GPU-initiated networking vs a CPU proxy thread: profile {prof.name}  {label}"
        notes = [f"published, not fitted: {f['figure']} ({f['what']}; {f['source']})" for f in initiated.PUBLISHED]
        extra = {"params": {k: {"value": initiated.initiated_params(**mine)[k], "unit": v.unit,
                                "level": "override" if k in mine else v.level,
                                "source": "override" if k in mine else v.source}
                            for k, v in initiated.INITIATED_PARAMS.items()}}
    rows = df.to_dict(orient="records")
    if args.json:
        emit_json({"rows": rows, "provenance": provenance.of(df), "notes": notes, **extra})
        return 0
    if args.csv:
        df[cols].to_csv(sys.stdout, index=False)
        return 0
    print(head, file=sys.stderr)
    print(table([{k: (f"{r[k]:.4g}" if isinstance(r[k], float) else r[k]) for k in cols} for r in rows], cols))
    for e in extra.get("explain", []):
        links = ", ".join(f"{k} {v:.3g}" for k, v in e["links_gbps"].items())
        parts = ", ".join(f"{k} {v:.4g}" for k, v in e["parts_us"].items())
        print(f"{e['method']}: route {links} GB/s; slowest link {e['slowest_link']}; at {e['size']} B: {parts} us")
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
    if args.csv:
        df[["path", "size", "lat_us", "bw_gbps", "bottleneck"]].to_csv(sys.stdout, index=False)
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


def _size_text(size: int) -> str:

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
