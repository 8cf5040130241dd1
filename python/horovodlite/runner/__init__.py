"""The pieces of horovodlite-run (horovodlite.run): host lists, the start-time
reachability check, the simulated-hosts testbed and --check-build."""
