"""Browser tests of nsqadmin's web pages: a real trionsq cluster, `trionsq nsqadmin`, and
Debian's Chromium driven by Playwright."""
