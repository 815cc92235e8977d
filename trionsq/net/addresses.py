"""Go's ``host:port`` address syntax (net.SplitHostPort), shared by the daemons' listeners
(nsqd, nsqlookupd, nsqadmin), nsqd's statsd, lookupd and replication peers."""

from __future__ import annotations


def split_host_port(address: str) -> tuple[str, int]:
    """Go's net.SplitHostPort plus a port number: "host:port", "[::1]:port", ":port"."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"address {address}: missing port in address")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"address {address}: invalid port") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"address {address}: invalid port")
    return host, number
