"""Elastic mode of horovodlite-run (Horovod 0.28's horovod/runner/elastic, our own
code): host discovery with blacklisting and cooldown (discovery.py), and the
driver that keeps the workers' state barrier and re-forms the world (driver.py),
served over the launcher's rendezvous HTTP server (launch.py)."""
