"""nsqlookupd rewritten on Trio (docs/protocol.md §6): the registration DB, the TCP protocol V1, the
HTTP API, options, and the daemon that runs them."""
