"""NSQ's bundled programs rewritten on trionsq: tail, to_nsq, to_file, to_http, nsq_to_nsq,
stat, bench."""
