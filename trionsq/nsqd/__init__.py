"""nsqd: the NSQ daemon on Trio (topics, channels, clients, queue scan), as one nursery tree."""
