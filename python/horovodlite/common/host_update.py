"""What changed in an elastic job's hosts (Horovod 0.28's HostUpdateResult): the
driver (runner/elastic/discovery.py, driver.py) publishes it at
/rendezvous/hosts_updated, the workers (common/elastic.py) read it. Here, on the
workers' side, so that a worker need not import the launcher's discovery."""

import enum


class HostUpdateResult(enum.IntFlag):
    no_update = 0
    removed = 1
    added = 2
    mixed = removed | added
