"""Who may do what: the admin ACL (``--admin-user`` matched against the ``--acl-http-header``
header) and the ``/config`` CIDR check (``--allow-config-from-cidr``)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from .options import parse_cidr

__all__ = ["config_allowed", "is_admin"]


def is_admin(admin_users: Sequence[str], user: str) -> bool:
    """Go's isAuthorizedAdminRequest: anyone when no admin user is configured, else `user`
    (the request's ``--acl-http-header`` value, ``""`` when missing) must be one of them."""
    if not admin_users:
        return True
    return user in admin_users


def config_allowed(cidr: str, remote_ip: str) -> bool | None:
    """Whether a request from `remote_ip` may use ``/config``: True/False, None when the
    address cannot be parsed (Go: 400 INVALID_REMOTE_ADDR). An empty `cidr` allows all."""
    if not cidr:
        return True
    try:
        ip = ipaddress.ip_address(remote_ip.strip("[]").split("%", 1)[0])
    except ValueError:
        return None
    network = parse_cidr(cidr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.version != network.version:
        return False
    return ip in network
