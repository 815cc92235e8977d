"""trionsq: the NSQ realtime message queue, rewritten in Python on Trio."""

__version__ = "0.1.0"
#: The NSQ release whose protocols, HTTP API and flags trionsq implements.
NSQ_VERSION = "1.3.0"
