"""NSQ's bundled programs rewritten on trionsq: tail, to_file, to_http, to_nsq, stat, bench."""
