"""The network layer below the daemons and the client library: Go's ``host:port`` address
syntax (`addresses`) and the snappy / deflate stream wrappers a V2 connection is upgraded to
(`transport`), shared by nsqd, nsqlookupd, nsqadmin and `trionsq.client`."""
