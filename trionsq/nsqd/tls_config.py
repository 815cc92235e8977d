"""nsqd's TLS contexts from its options, as Go's buildTLSConfig and buildClientTLSConfig build
them, with Go's errors: no trio, so that nsqd checks them, in Go's order, before it listens
(opening.py)."""

from __future__ import annotations

import ssl
import warnings
from typing import TYPE_CHECKING

from ..daemon import StartupError, server_tls_error
from ..goerrors import cert_pool_error

if TYPE_CHECKING:
    from .options import NSQDOptions


def build_tls_context(options: NSQDOptions) -> ssl.SSLContext | None:
    """The server's TLS context (None without a certificate and key), and Go's check of the
    client CA file; a file that cannot be used is Go's `StartupError` (``failed to instantiate
    nsqd - failed to build TLS config - open PATH: no such file or directory``)."""
    try:
        context = build_server_context(options)
    except (OSError, ValueError) as err:  # ssl.SSLError is an OSError
        reason = server_tls_error(options.tls_cert, options.tls_key, options.tls_root_ca_file, err)
        raise StartupError(
            f"failed to instantiate nsqd - failed to build TLS config - {reason}"
        ) from err
    # Go's buildClientTLSConfig (the CA nsqd trusts as a client) reads the file whenever it
    # is given, a certificate or not.
    if options.tls_root_ca_file:
        problem = cert_pool_error(options.tls_root_ca_file)
        if problem is not None:
            raise StartupError(
                f"failed to instantiate nsqd - failed to build client TLS config - {problem}"
            )
    return context


_MIN_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def build_server_context(options: NSQDOptions) -> ssl.SSLContext | None:
    """The server's TLS context, as Go nsqd's buildTLSConfig builds its tls.Config; None
    without --tls-cert and --tls-key. Raises OSError/ssl.SSLError when a file cannot be used.

    The same context serves TLS upgrades on the TCP port and the HTTPS listener.

    * --tls-cert/--tls-key: the certificate chain and key (PEM).
    * --tls-min-version: the lowest protocol version accepted. With tls1.0/tls1.1 (tls1.0 is
      the default) the floor is in fact OpenSSL's: OpenSSL 3 at its default security level 2
      refuses TLS 1.0 and 1.1 handshakes, so the effective minimum there is TLS 1.2, where Go
      nsqd accepts TLS 1.0.
    * --tls-client-auth-policy: none (default) requests no client certificate, like Go's
      NoClientCert. ``require-verify`` requires one that verifies against --tls-root-ca-file
      (or, without it, the system's trust store, as Go's nil ClientCAs does), like Go's
      RequireAndVerifyClientCert. ``require`` is Go's RequireAnyClientCert: any certificate,
      not verified. Python's ssl module cannot accept a certificate it does not verify (it has
      no verify callback), so here ``require`` verifies too, exactly as ``require-verify``:
      stricter than Go, never weaker; a self-signed client certificate Go would accept is
      refused unless the CA file trusts it.
    * --tls-root-ca-file: loaded whenever given (an unusable file stops nsqd at startup, as in
      Go), used only to verify client certificates.
    * Cipher suites and curves are OpenSSL's defaults, not Go's list; no ALPN is offered (Go's
      tls.Listen with nsqd's config offers none either, so HTTPS is HTTP/1.1 in both).
    """
    if not options.tls_cert and not options.tls_key:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(options.tls_cert, options.tls_key)
    with warnings.catch_warnings():
        # Python deprecates TLS 1.0/1.1 (a DeprecationWarning); Go nsqd's default allows them.
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = _MIN_VERSIONS[options.tls_min_version]
    if options.tls_root_ca_file:
        context.load_verify_locations(cafile=options.tls_root_ca_file)
    if options.tls_client_auth_policy in ("require", "require-verify"):
        context.verify_mode = ssl.CERT_REQUIRED
        if not options.tls_root_ca_file:
            context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
    else:
        context.verify_mode = ssl.CERT_NONE
    return context
