"""nsqadmin: NSQ's web UI and admin JSON API over nsqlookupd / nsqd HTTP APIs (Go nsqadmin 1.3
compatible routes, flags and JSON shapes). The frontend lives in ``static/``."""
