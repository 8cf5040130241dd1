"""The wrapper that runs a rank on a remote host for horovodlite-run --gloo:

    python3 -m horovodlite.runner.task -- COMMAND...

It starts COMMAND in a session of its own and ends that whole session (SIGTERM,
then SIGKILL after a grace period) when its own stdin reaches end-of-file, i.e.
when the launcher closed the pipe or died, or the ssh connection broke. ssh
without a terminal does not signal remote processes when the client ends; this
is what keeps a remote rank from outliving its job. Its exit status is
COMMAND's (128 + N when COMMAND died of signal N).

With --env-from-stdin, the first lines of stdin up to an empty line are
NAME=VALUE variables added to COMMAND's environment: how the launcher hands a
remote rank the job's secret without putting it on a command line.
"""

import os
import signal
import subprocess
import sys
import threading

GRACE_S = 3.0


def _signal_session(pid, sig):
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _end_session(proc, grace_s=GRACE_S):
    """SIGTERM to COMMAND's session now, SIGKILL after the grace period (the
    main thread's wait() returns when the leader exits)."""
    _signal_session(proc.pid, signal.SIGTERM)
    timer = threading.Timer(grace_s, _signal_session, args=(proc.pid, signal.SIGKILL))
    timer.daemon = True
    timer.start()


def _read_env_lines(fd=0, limit=1 << 16):
    """NAME=VALUE lines from `fd` up to an empty line (read a byte at a time:
    what follows is the launcher's end-of-file watch)."""
    data = b""
    while not data.endswith(b"\n\n") and data != b"\n" and len(data) < limit:
        chunk = os.read(fd, 1)
        if not chunk:
            break
        data += chunk
    env = {}
    for line in data.decode(errors="replace").splitlines():
        name, sep, value = line.partition("=")
        if sep and name:
            env[name] = value
    return env


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra_env = None
    if argv and argv[0] == "--env-from-stdin":
        argv = argv[1:]
        extra_env = _read_env_lines()
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("horovodlite.runner.task: usage: python3 -m horovodlite.runner.task -- COMMAND...", file=sys.stderr)
        return 2
    try:
        env = dict(os.environ, **extra_env) if extra_env else None
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    except OSError as e:
        print("horovodlite.runner.task: cannot run %s: %s" % (argv[0], e), file=sys.stderr, flush=True)
        return 127

    def watch_stdin():
        try:
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        if proc.poll() is None:
            _end_session(proc)

    threading.Thread(target=watch_stdin, daemon=True).start()

    def forward(signum, _frame):
        _end_session(proc)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, forward)
    rc = proc.wait()
    # Whatever COMMAND left behind in its session goes with it.
    _signal_session(proc.pid, signal.SIGKILL)
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
