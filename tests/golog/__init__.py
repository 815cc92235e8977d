"""Log lines compared with Go NSQ 1.3's: the same script of actions against Go's daemons
(recorded once into ``golden/``) and against trionsq's (each test run)."""
