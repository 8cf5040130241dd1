"""Elastic mode of horovodlite-run (Horovod 0.28's horovod/runner/elastic, our own
code): host discovery with blacklisting and cooldown (discovery.py), the
workers' state barrier (registration.py) and the driver that re-forms the world
(driver.py), served over the launcher's rendezvous HTTP server."""
