"""Go's words for the errors Python reports as OSError, socket.gaierror, ssl and httpx errors:
``listen tcp ADDR: bind: address already in use``, ``dial tcp ADDR: connect: connection
refused``, ``open PATH: no such file or directory``, ``Get "URL": dial tcp ...``, and
tls.LoadX509KeyPair's texts. The daemons' FATAL lines, the apps' one-line errors and the
client's connection errors read as Go's do for the same failure."""

from __future__ import annotations

import os
import socket
import ssl
import urllib.parse

__all__ = [
    "address_problem",
    "cert_pool_error",
    "dial_error",
    "errno_text",
    "host_port",
    "http_error",
    "key_pair_error",
    "listen_error",
    "open_error",
    "os_error",
    "os_error_text",
    "path_error",
]

_NO_SUCH_HOST = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def host_port(host: str, port: int | str) -> str:
    """``host:port`` as Go writes it (``[v6]:port``)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def os_error(err: BaseException | None) -> OSError | None:
    """The first OSError carrying an errno in `err`, its causes and (trio's "all attempts to
    connect failed") exception groups."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, BaseExceptionGroup):
            for inner in err.exceptions:
                found = os_error(inner)
                if found is not None:
                    return found
        elif isinstance(err, OSError) and isinstance(err.errno, int):
            return err
        err = err.__cause__ or err.__context__
    return None


def errno_text(err: BaseException) -> str:
    """Go's text of an OS error: its errno's C-library message with a lower-case first letter
    (``address already in use``), ``no such host`` for a name that does not resolve."""
    found = os_error(err)
    if isinstance(found, socket.gaierror):
        if found.errno in _NO_SUCH_HOST:
            return "no such host"
        text = found.strerror or str(found)
    elif found is not None and found.errno:
        text = os.strerror(found.errno)
    else:
        text = str(err)
    return text[:1].lower() + text[1:]


def address_problem(address: str) -> str | None:
    """Go's net package error for a ``host:port`` without a usable port (``address
    127.0.0.1: missing port in address``, ``address tcp/abc: unknown port``), or None."""
    _, sep, port = address.rpartition(":")
    if not sep:
        return f"address {address}: missing port in address"
    if not port.isdigit():
        return f"address tcp/{port}: unknown port"
    if int(port) > 65535:
        return f"address {port}: invalid port"
    return None


def listen_error(address: str, err: BaseException, network: str = "tcp") -> str:
    """Go's net.Listen error for `address` (``listen tcp 127.0.0.1:4150: bind: address already
    in use``, ``listen tcp: address tcp/abc: unknown port``, ``listen unix PATH: bind: ...``)."""
    if network == "tcp":
        problem = address_problem(address)
        if problem is not None:
            return f"listen tcp: {problem}"
    if isinstance(os_error(err), socket.gaierror):
        host = address.rpartition(":")[0].strip("[]")
        return f"listen {network}: lookup {host}: {errno_text(err)}"
    if os_error(err) is None:
        return f"listen {network} {address}: {err}"
    return f"listen {network} {address}: bind: {errno_text(err)}"


def dial_error(host: str, port: int, err: BaseException | None) -> str:
    """Go's net.Dial error (``dial tcp 127.0.0.1:4150: connect: connection refused``,
    ``dial tcp: lookup HOST: no such host``; `err` None or a bare TimeoutError: ``dial tcp
    ADDR: i/o timeout``)."""
    address = host_port(host, port)
    if err is None or (isinstance(err, TimeoutError) and os_error(err) is None):
        return f"dial tcp {address}: i/o timeout"
    if isinstance(os_error(err), socket.gaierror):
        return f"dial tcp: lookup {host}: {errno_text(err)}"
    return f"dial tcp {address}: connect: {errno_text(err)}"


def http_error(url: str, err: BaseException) -> str:
    """Go's http.Client error for a GET of `url` that could not connect
    (``Get "URL": dial tcp ADDR: connect: connection refused``); otherwise ``Get "URL": ``
    and the error's own text."""
    if os_error(err) is not None:
        parts = urllib.parse.urlsplit(url)
        default = 443 if parts.scheme == "https" else 80
        try:
            port = parts.port or default
        except ValueError:
            port = default
        return f'Get "{url}": {dial_error(parts.hostname or "", port, err)}'
    return f'Get "{url}": {err}'


def path_error(op: str, path: str, err: BaseException) -> str:
    """Go's os.PathError: ``write PATH: read-only file system``."""
    return f"{op} {path}: {errno_text(err)}"


def open_error(path: str, err: BaseException) -> str:
    """Go's os.Open error: ``open PATH: no such file or directory``."""
    return path_error("open", path, err)


def os_error_text(err: OSError) -> str:
    """An OSError a file operation raised, in Go's words as near as Python tells: the
    operation is not recorded, so a path error reads as the ``open`` it most often is."""
    if err.filename2 is not None:
        return f"rename {err.filename} {err.filename2}: {errno_text(err)}"
    if err.filename is not None:
        return open_error(str(err.filename), err)
    return errno_text(err)


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


def key_pair_error(cert: str, key: str) -> str | None:
    """Why Go's tls.LoadX509KeyPair(cert, key) fails, in its words (``open PATH: ...``,
    ``tls: failed to find any PEM data in certificate input``, ``tls: private key does not
    match public key``); None when Python's ssl loads the pair."""
    data: dict[str, bytes] = {}
    for path in (cert, key):
        try:
            data[path] = _read(path)
        except OSError as err:
            return open_error(path, err)
    if b"-----BEGIN" not in data[cert]:
        return "tls: failed to find any PEM data in certificate input"
    if b"-----BEGIN" not in data[key]:
        return "tls: failed to find any PEM data in key input"
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key)
    except ssl.SSLError as err:
        if "KEY_VALUES_MISMATCH" in str(err):
            return "tls: private key does not match public key"
        return str(err)
    except (OSError, ValueError) as err:
        return str(err)
    return None


def cert_pool_error(ca_file: str) -> str | None:
    """Why Go cannot build a certificate pool from `ca_file`: ``open PATH: ...`` when it cannot
    be read, ``failed to append certificate to pool`` when it holds no usable certificate;
    None when Python's ssl loads it."""
    try:
        _read(ca_file)
    except OSError as err:
        return open_error(ca_file, err)
    try:
        ssl.create_default_context().load_verify_locations(cafile=ca_file)
    except (ssl.SSLError, OSError, ValueError):
        return "failed to append certificate to pool"
    return None
