"""`lnet-testbed`: bring a topology up on this machine, run commands on its hosts, show and change it, take it
down; or write a docker-compose testbed from it, build its image and bring it up and down on Docker.

Exit codes: 0 done; 1 the testbed failed (set-up, Docker, the image build; a running command's own failure is
its code); 2 bad usage or a bad topology file; 3 the named testbed is not up, or is already up.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .compose import DEPOT_PORT, IMAGE, write_compose
from .composebed import compose_down, compose_up
from .engine import EngineError, ensure_engine
from .image import CACHE_DIR, ImageError, build_image
from .netns import STATE_ROOT, TestbedError, TestbedStateError, namespace_name
from .testbed import control_request, running_testbeds, start_detached, stop
from .topology import Topology, TopologyError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_STATE = 0, 1, 2, 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lnet-testbed", description=__doc__.split("\n\n")[0])
    p.add_argument("--state-dir", type=Path, default=STATE_ROOT, help=argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="bring a topology up and leave it running")
    up.add_argument("topology", type=Path)
    up.add_argument("--name", help="testbed name (default: the topology's name)")
    up.add_argument("--seed", type=int, help="seed the emulator's random losses and jitter")
    up.add_argument("--backend", choices=["auto", "userspace", "netem"], default="auto",
                    help="link emulation: the kernel's netem, or lnet's userspace emulator (auto: netem if present)")

    down = sub.add_parser("down", help="take a testbed down (also one whose emulator crashed)")
    down.add_argument("--name", help="default: the only testbed that is up")

    status = sub.add_parser("status", help="hosts, addresses, links and the emulator's load")
    status.add_argument("--name", help="default: every testbed that is up")
    status.add_argument("--json", action="store_true", help="machine-readable")

    ex = sub.add_parser("exec", help="run a command on a host: exec HOST -- CMD...")
    ex.add_argument("host")
    ex.add_argument("--name", help="default: the only testbed that is up")
    ex.add_argument("cmd", nargs="*", help="the command, after --")

    sl = sub.add_parser("set-link", help="change a link of a running testbed (both directions)")
    sl.add_argument("a")
    sl.add_argument("b")
    sl.add_argument("--name")
    sl.add_argument("--delay-ms", type=float)
    sl.add_argument("--rate-mbit", type=float)
    sl.add_argument("--loss", type=float)
    sl.add_argument("--jitter-ms", type=float)
    sl.add_argument("--queue-ms", type=float)

    co = sub.add_parser("compose", help="write docker-compose.yml for a topology; --up / --down on Docker")
    co.add_argument("topology", type=Path)
    co.add_argument("-o", "--output", type=Path,
                    help="directory (default: deploy/compose/NAME, or NAME-directory with --directory)")
    co.add_argument("--directory", action="store_true",
                    help="add a depot directory: an etcd service where every depot registers (docs/directory.md)")
    updown = co.add_mutually_exclusive_group()
    updown.add_argument("--up", action="store_true",
                        help="also build the image if it is not current, and bring the testbed up (containers)")
    updown.add_argument("--down", action="store_true",
                        help="take it down: no containers, networks or lnet image left (the base image stays)")
    co.add_argument("--keep-image", action="store_true", help="with --down: keep the lnet image as well")
    _image_options(co)

    im = sub.add_parser("image", help=f"build the compose testbed's image {IMAGE} with no registry (cached)")
    _image_options(im)
    im.add_argument("--rebuild", action="store_true", help="build it even if it is current")
    return p


def _image_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--base", metavar="IMAGE",
                   help="start from this image (pulled if need be) instead of a debootstrapped Debian")
    p.add_argument("--suite", help="the Debian suite to debootstrap (default: this machine's)")
    p.add_argument("--mirror", help="the Debian mirror (default: the one apt uses here)")
    p.add_argument("--source", type=Path, help="the lnet checkout to install (default: the one running)")
    p.add_argument("--cache-dir", type=Path, default=CACHE_DIR, help=f"wheels and scratch space ({CACHE_DIR})")


def _build(args: argparse.Namespace, rebuild: bool = False) -> None:
    def log(line: str) -> None:
        print(f"lnet-testbed image: {line}", flush=True)

    ensure_engine(log=log)
    built = build_image(args.source, base=args.base, cache_dir=args.cache_dir, suite=args.suite,
                        mirror=args.mirror, rebuild=rebuild, log=log)
    state = "built" if built.built else "already current"
    print(f"image {built.tag} {state} (base {built.base}) in {built.seconds:.1f} s", flush=True)


def _one_running(name: str | None, state_root: Path) -> str:
    if name:
        return name
    up = running_testbeds(state_root)
    if len(up) == 1:
        return up[0]
    if not up:
        raise _StateError("no testbed is up")
    raise _StateError(f"several testbeds are up ({', '.join(up)}): say which with --name")


class _StateError(Exception):
    pass


def _print_status(status: dict[str, Any]) -> None:
    load = status["load"]
    print(f"testbed {status['name']}: up {status['uptime_s']:.0f} s, {status['backend']} backend, "
          f"emulator pid {status['pid']}")
    print("hosts:")
    for h in status["hosts"]:
        print(f"  {h['name']:<12} {h['address']:<12} window {h['window_bytes']} B, {h['congestion']}, "
              f"netns {h['namespace']}")
    print("links:")
    for link in status["links"]:
        rate = f"{link['rate_mbit']:g} Mbit/s" if link["rate_mbit"] else "no rate limit"
        print(f"  {link['a']} <-> {link['b']}: {link['delay_ms']:g} ms one way, {rate}, loss {link['loss']:g}, "
              f"jitter {link['jitter_ms']:g} ms, queue {link['queue_ms']:g} ms")
        for a, b in ((link["a"], link["b"]), (link["b"], link["a"])):
            s = link[f"{a}->{b}"]
            print(f"    {a} -> {b}: {s['delivered']} packets / {s['bytes']} B delivered, "
                  f"{s['tail_drops']} tail drops, {s['random_drops']} random drops")
    print(f"emulator load: {load['cpu_percent']:.1f}% of a core carrying {load['delivered_mbit_s']:.1f} Mbit/s "
          f"(last {load['window_s']:g} s); one emulator was measured to sustain {load['sustains_mbit_s']:g} Mbit/s "
          f"aggregate at MTU {load['mtu']} on 2 cores (bench/testbed_emulator.py)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after the first "--" is the command for `exec`, whatever options it has
    command: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, command = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    state_root: Path = args.state_dir
    try:
        if args.command == "image":
            _build(args, rebuild=args.rebuild)
            return EXIT_OK
        if args.command == "compose":
            topo = Topology.load(args.topology)
            out = args.output or Path("deploy/compose") / (topo.name + ("-directory" if args.directory else ""))
            if args.down:
                ensure_engine()
                left = compose_down(topo, out, remove_image=not args.keep_image)
                if left["containers"] or left["networks"]:
                    print(f"lnet-testbed: still there after down: {left}", file=sys.stderr)
                    return EXIT_FAILED
                print(f"testbed lnet-{topo.name} is down: no containers or networks left; "
                      + (f"image {IMAGE} kept" if args.keep_image else "the base image kept"))
                return EXIT_OK
            if not args.up:
                for path in write_compose(topo, out, directory=args.directory):
                    print(f"wrote {path}")
                return EXIT_OK
            _build(args)
            bed = compose_up(topo, out, directory=args.directory)
            print(f"testbed {bed.project} is up ({bed.file}); take it down with: lnet-testbed compose "
                  f"{args.topology} -o {out} --down")
            for h in topo.hosts:
                print(f"  {h.name:<12} {h.address:<12} container {bed.container(h.name)}, "
                      f"depot http://{h.address}:{DEPOT_PORT}")
            return EXIT_OK
        if args.command == "up":
            topo = Topology.load(args.topology)
            name = args.name or topo.name
            pid = start_detached(topo, name, state_root, seed=args.seed, backend=args.backend)
            print(f"testbed {name} is up (emulator pid {pid}); take it down with: lnet-testbed down --name {name}")
            for h in topo.hosts:
                print(f"  {h.name:<12} {h.address:<12} netns {namespace_name(name, h.name)}")
            return EXIT_OK
        if args.command == "down":
            name = _one_running(args.name, state_root) if args.name is None else args.name
            if not stop(name, state_root):
                raise _StateError(f"no testbed named {name!r} is up")
            print(f"testbed {name} is down")
            return EXIT_OK
        if args.command == "status":
            names = [args.name] if args.name else running_testbeds(state_root)
            if not names:
                raise _StateError("no testbed is up")
            statuses = [control_request(n, {"op": "status"}, state_root)["status"] for n in names]
            if args.json:
                print(json.dumps(statuses if not args.name else statuses[0], indent=2))
            else:
                for s in statuses:
                    _print_status(s)
            return EXIT_OK
        if args.command == "exec":
            name = _one_running(args.name, state_root)
            cmd = [*args.cmd, *command]
            if not cmd:
                print("lnet-testbed exec: no command (exec HOST -- CMD...)", file=sys.stderr)
                return EXIT_USAGE
            status = control_request(name, {"op": "status"}, state_root)["status"]
            hosts = [h["name"] for h in status["hosts"]]
            if args.host not in hosts:
                raise TopologyError(f"unknown host {args.host!r}; the hosts are {', '.join(hosts)}")
            return subprocess.run(["ip", "netns", "exec", namespace_name(name, args.host), *cmd],
                                  check=False).returncode
        if args.command == "set-link":
            name = _one_running(args.name, state_root)
            control_request(name, {"op": "set_link", "a": args.a, "b": args.b, "delay_ms": args.delay_ms,
                                   "rate_mbit": args.rate_mbit, "loss": args.loss, "jitter_ms": args.jitter_ms,
                                   "queue_ms": args.queue_ms}, state_root)
            print(f"link {args.a} <-> {args.b} changed")
            return EXIT_OK
    except TopologyError as exc:
        print(f"lnet-testbed: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _StateError as exc:
        print(f"lnet-testbed: {exc}", file=sys.stderr)
        return EXIT_STATE
    except TestbedStateError as exc:
        print(f"lnet-testbed: {exc}", file=sys.stderr)
        return EXIT_STATE
    except (TestbedError, EngineError, ImageError) as exc:
        print(f"lnet-testbed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("lnet-testbed: interrupted", file=sys.stderr)
        return 130
    raise AssertionError(args.command)


if __name__ == "__main__":
    sys.exit(main())
