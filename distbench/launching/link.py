"""A shaped interconnect on one host: runs inside a private network namespace whose loopback is rate-limited.

`compare --link-rate` and `simulate --link-rate` re-run their own command under `unshare -n` (root) or
`unshare -rn` (an unprivileged user namespace, where the kernel allows one): a new network namespace that has
nothing but its own loopback and ends with the command. There, before each run, loopback gets a token bucket
(`tc qdisc replace dev lo root tbf rate RATE ...`), so every byte between ranks (gloo's all-reduces, the
rendezvous, Horovod's negotiation) crosses a link of that rate; `none` removes it. The host's own interfaces
are never touched: every tc call first checks that this process is in a namespace other than the one the
command was started in.

What the shaped loopback is, and is not: one token bucket for all traffic, both directions and every pair of
ranks together, like one shared link of RATE (a full-duplex link of RATE would carry RATE each way). The same
rate applies within a node and between nodes. `netem` (added delay) does not exist on every kernel (not on the
one this was built on), so latency is not simulated; tbf's queue adds at most `latency` when the link is full.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

from distbench.errors import UserError

MODES = ("shared", "per-node")
OUTER_NETNS_ENV = "DISTBENCH_OUTER_NETNS"  # the namespace the command was started in: never shaped
UNSHAPED = "none"
_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}  # tc's units: bits per second ("mbps" would be bytes)
MIN_BITS = 1e6  # below 1 Mbit/s one BERT step would take minutes: refused as a likely typo
LATENCY_MS = 100  # how long a packet may wait in the bucket's queue before tbf drops it
_LO_MTU = 65536  # a bucket smaller than loopback's MTU could never send a full packet


def check_mode(mode: str) -> str:
    """`mode` if it is one of MODES; else one line naming them."""
    if mode not in MODES:
        raise UserError(f"--link-mode {mode!r}: one of {', '.join(MODES)}")
    return mode


def parse_rate(text: str) -> float | None:
    """Bits per second of a rate as tc writes it ("100mbit", "1gbit", "2.5gbit"); None for "none"."""
    text = text.strip().lower()
    if text == UNSHAPED:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(kbit|mbit|gbit)", text)
    if not m:
        raise UserError(
            f"--link-rate {text!r} is not a rate: give bits per second as tc writes them, e.g. 10gbit, "
            f"1gbit or 100mbit (or {UNSHAPED})"
        )
    bits = float(m[1]) * _UNITS[m[2]]
    if bits < MIN_BITS:
        raise UserError(f"--link-rate {text}: below 1mbit a step takes minutes; give at least 1mbit")
    return bits


# at least one whole segment as the stack hands it over (GSO: up to 64 KiB plus headers): a smaller bucket makes tbf
# cut every such segment into MTU packets itself, which cost the sender as much CPU time as the transfer lasted
MIN_BURST = 70_000


def tbf_args(bits: float, mtu: int = _LO_MTU, latency_ms: float = LATENCY_MS, burst_ms: float = 10) -> list[str]:
    """tc's token-bucket arguments for `bits` per second: a bucket of burst_ms of traffic, at least two MTUs
    (loopback's, unless the interface's is given), and a queue that holds a packet at most latency_ms."""
    burst = max(2 * mtu, int(bits / 8 * burst_ms / 1e3), MIN_BURST)
    return ["tbf", "rate", f"{int(bits)}bit", "burst", str(burst), "latency", f"{latency_ms:g}ms"]


def netns() -> str:
    return os.readlink("/proc/self/ns/net")


def inside() -> bool:
    """Whether this process runs in the private namespace a `--link-rate` command made for itself."""
    outer = os.environ.get(OUTER_NETNS_ENV)
    return bool(outer) and outer != netns()


def _tool(name: str) -> str:
    """The path of a system tool: on PATH, or in the sbin folders a user's PATH often leaves out (tc, ip)."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if found is None:
        raise UserError(f"--link-rate needs `{name}` (util-linux, iproute2), which is not installed here")
    return found


def _unshare_flags(needed_by: str) -> list[str]:
    """`unshare` flags that give a private network namespace here: -n as root, -rn through a user namespace."""
    for tool in ("unshare", "tc", "ip"):
        _tool(tool)
    reasons = []
    for flags in (["-n"], ["-rn"]):
        proc = subprocess.run([_tool("unshare"), *flags, "true"], capture_output=True, text=True)
        if proc.returncode == 0:
            return flags
        reasons.append(f"unshare {' '.join(flags)}: {' '.join(proc.stderr.split()) or proc.returncode}")
    raise UserError(
        f"{needed_by} needs a private network namespace, and neither `unshare -n` (root) nor "
        f"`unshare -rn` (user namespaces) works here ({'; '.join(reasons)})"
    )


def _this_command() -> list[str]:
    """The interpreter and arguments of this process as started (`python run.py ...`, `python -m pkg.mod ...`)."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    if spec is not None and spec.name != "__main__":
        return [sys.executable, "-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return [sys.executable, *sys.argv]


def enter_private_namespace(needed_by: str = "--link-rate") -> None:
    """Re-run this process's command in a new network namespace, unless it already runs in one; does not return
    when it re-runs it. `needed_by`: what needs it, as the refusal names it where none can be made."""
    if inside():
        return
    flags = _unshare_flags(needed_by)
    env = {**os.environ, OUTER_NETNS_ENV: netns()}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(_tool("unshare"), ["unshare", *flags, "--", *_this_command()], env)


def _tc(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not inside():  # the one guard in front of every change: never the host's interfaces
        raise RuntimeError("refusing to change a network interface outside distbench's private namespace")
    proc = subprocess.run([_tool(args[0]), *args[1:]], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise UserError(f"{' '.join(args)} failed: {' '.join(proc.stderr.split())}")
    return proc


def shape(rate: str) -> None:
    """Loopback of this private namespace at `rate` ("none": as fast as it goes), up."""
    bits = parse_rate(rate)
    _tc("ip", "link", "set", "lo", "up")
    if bits is None:
        if "tbf" in _tc("tc", "qdisc", "show", "dev", "lo").stdout:
            _tc("tc", "qdisc", "del", "dev", "lo", "root")
        return
    _tc("tc", "qdisc", "replace", "dev", "lo", "root", *tbf_args(bits))


def add_loopback_addresses(addrs: list[str]) -> None:
    """Further addresses on this private namespace's loopback (127.0.0.2, ...): host names beyond localhost and
    127.0.0.1 that horovodrun finds local, and so runs without ssh (topology.horovod_aliases)."""
    for addr in addrs:
        _tc("ip", "addr", "replace", f"{addr}/32", "dev", "lo")


def format_rate(bits: float | None) -> str:
    """A rate as this module writes it: the largest unit it reaches, to 6 significant digits ("100mbit", "2.5gbit"),
    UNSHAPED for None. parse_rate reads it back."""
    if bits is None:
        return UNSHAPED
    unit = next((u for u in ("gbit", "mbit", "kbit") if bits >= _UNITS[u]), "kbit")
    return f"{bits / _UNITS[unit]:.6g}{unit}"


def dilated(rate: str, k: float) -> str:
    """The rate a link of `rate` is shaped at under time dilation K (--dilation): K times slower; unshaped stays."""
    bits = parse_rate(rate)
    return rate if bits is None or k == 1.0 else format_rate(bits / k)


def dilated_view(observed: dict, k: float) -> dict:
    """The link a dilated run or commbench emulates (--dilation K): K times the rate its namespace has, which is kept
    as `link_rate_shaped`."""
    rate = parse_rate(observed["link_rate"])
    if k == 1.0 or rate is None:
        return observed
    return {**observed, "link_rate": format_rate(rate * k), "link_rate_shaped": observed["link_rate"]}


def canonical_rate(text: str) -> str:
    """A rate as given ("1000mbit", " 1Gbit") in the one form records and names use ("1gbit"); checked."""
    return format_rate(parse_rate(text))


def same_rate(a: str, b: str) -> bool:
    """Whether two rates are the same link: tc keeps a rate in whole bytes per second, so a rate read back from the
    kernel may differ from the one given by less than 0.1 %."""
    x, y = parse_rate(a), parse_rate(b)
    return x == y if x is None or y is None else abs(x - y) <= 1e-3 * max(x, y)


def _read(*args: str) -> list[dict]:
    """iproute2's JSON answer to a read-only query of this process's network namespace ([] where it cannot answer)."""
    try:
        proc = subprocess.run([_tool(args[0]), "-j", *args[1:]], capture_output=True, text=True, timeout=10)
        return json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else []
    except (UserError, OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        return []


def observe() -> dict[str, str]:
    """The link this process's traffic to other nodes crosses, as its network namespace has it, for the record:
    per-node where the process is in a node namespace of netns.py (its eth0 on the switch's subnet), else shared
    (loopback); the rate of the token bucket on that interface (UNSHAPED: none there, or nothing to read it with)."""
    from distbench.launching import netns  # netns builds on this module

    on_switch = any(
        a.get("local", "").startswith(netns.SUBNET)
        for dev in _read("ip", "addr", "show", "dev", netns.IFACE)
        for a in dev.get("addr_info", [])
    )
    dev = netns.IFACE if on_switch else "lo"
    buckets = [q for q in _read("tc", "qdisc", "show", "dev", dev) if q.get("kind") == "tbf"]
    bits = 8 * buckets[0]["options"]["rate"] if buckets else None
    return {"link_rate": format_rate(bits), "link_mode": MODES[1] if on_switch else MODES[0]}
