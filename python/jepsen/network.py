"""The test network: one network namespace per member on a bridge in the
root namespace, and partitions made with nftables inside the namespaces.

Every name this module creates starts with `ssj<lane>-` (the bridge, the
veth ends, the namespaces) so that cleanup removes only what a Jepsen run
of the same lane made. Clients run in the root
namespace: the bridge carries an address of its own, and no rule ever
drops the client's packets, so a partition cuts members off from each
other only, as in Jepsen's MongoDB tests.
"""

from __future__ import annotations

import os
import subprocess

# A lane (JEPSEN_LANE=N, set by `python -m jepsen --lane N`; 0 when unset)
# gives a run names, addresses and a port of its own (`ssjN-`,
# 10.213.N.0/24, 27017+N) so that runs in different lanes share the machine
# side by side (soaks use lanes 1-3, CI lane 0); a lane's cleanup removes
# only its own lane's names. Interface names stay within Linux's 15 bytes.
MAX_LANE = 9
LANE = int(os.environ.get("JEPSEN_LANE", "0"))
assert 0 <= LANE <= MAX_LANE, LANE
PREFIX = f"ssj{LANE}-"
BRIDGE = f"{PREFIX}br0"
SUBNET = f"10.213.{LANE}"
HOST_IP = f"{SUBNET}.1"
PREFIX_LEN = 24
# Member i (from 1) gets SUBNET.(MEMBER_IP_BASE + i).
MEMBER_IP_BASE = 10
# The nftables table every partition rule lives in, inside a member's
# namespace (named per lane too, so a listing says which lane made it).
NFT_TABLE = f"ssj{LANE}"
COMMAND_TIMEOUT_S = 10.0


class NetworkError(RuntimeError):
    pass


def run(*args: str, check: bool = True, input_text: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, input=input_text)
    if check and result.returncode != 0:
        raise NetworkError(f"{' '.join(args)} exited {result.returncode}: {result.stderr.strip()}")
    return result


def namespace(i: int) -> str:
    return f"{PREFIX}n{i}"


def member_ip(i: int) -> str:
    return f"{SUBNET}.{MEMBER_IP_BASE + i}"


def _host_veth(i: int) -> str:
    return f"{PREFIX}h{i}"


def _ns_veth(i: int) -> str:
    return f"{PREFIX}m{i}"


class Network:
    """Namespaces for members 1..n on the bridge; partitions between them."""

    def __init__(self, members: int):
        self.members = members

    def create(self) -> None:
        cleanup()
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{HOST_IP}/{PREFIX_LEN}", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        for i in range(1, self.members + 1):
            self._add_member(i)

    def _add_member(self, i: int) -> None:
        ns = namespace(i)
        run("ip", "netns", "add", ns)
        run("ip", "link", "add", _host_veth(i), "type", "veth", "peer", "name", _ns_veth(i))
        run("ip", "link", "set", _host_veth(i), "master", BRIDGE)
        run("ip", "link", "set", _host_veth(i), "up")
        run("ip", "link", "set", _ns_veth(i), "netns", ns)
        run("ip", "-n", ns, "link", "set", "lo", "up")
        run("ip", "-n", ns, "addr", "add", f"{member_ip(i)}/{PREFIX_LEN}", "dev", _ns_veth(i))
        run("ip", "-n", ns, "link", "set", _ns_veth(i), "up")
        # The table exists from the start; partitions only add and flush rules.
        run("ip", "netns", "exec", ns, "nft", "-f", "-", input_text=(
            f"table inet {NFT_TABLE} {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n }}\n}}\n"))

    # ----- partitions

    def drop(self, blocked: dict[int, set[int]]) -> None:
        """Replaces every rule: member i drops packets from each member in
        blocked[i]. The client's address is never blocked."""
        for i in range(1, self.members + 1):
            ns = namespace(i)
            script = f"flush chain inet {NFT_TABLE} input\n"
            sources = sorted(blocked.get(i, set()) - {i})
            if sources:
                addresses = ", ".join(member_ip(j) for j in sources)
                script += f"add rule inet {NFT_TABLE} input ip saddr {{ {addresses} }} drop\n"
            run("ip", "netns", "exec", ns, "nft", "-f", "-", input_text=script)

    def partition(self, sides: list[list[int]]) -> None:
        """Cuts traffic between members on different sides, both ways."""
        side_of = {m: index for index, side in enumerate(sides) for m in side}
        blocked = {i: {j for j in side_of if side_of[j] != side_of.get(i)} for i in side_of}
        self.drop(blocked)

    def connect_only(self, sees: dict[int, set[int]]) -> None:
        """Each member receives only from the members it `sees` (a ring, a bridge)."""
        everyone = set(range(1, self.members + 1))
        self.drop({i: everyone - sees[i] - {i} for i in everyone})

    def heal(self) -> None:
        self.drop({})

    def rules(self) -> dict[int, str]:
        return {i: run("ip", "netns", "exec", namespace(i), "nft", "list", "table", "inet", NFT_TABLE,
                       check=False).stdout for i in range(1, self.members + 1)}


def namespaces() -> list[str]:
    listed = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in listed.splitlines() if line.startswith(PREFIX)]


def cleanup() -> list[str]:
    """Removes this lane's namespaces, veths and bridge; returns what it removed.
    Processes still inside a namespace must be gone first (members.cleanup)."""
    removed = []
    for ns in namespaces():
        run("ip", "netns", "del", ns, check=False)
        removed.append(ns)
    links = run("ip", "-o", "link", "show", check=False).stdout
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX):
            run("ip", "link", "del", name, check=False)
            removed.append(name)
    return removed
