"""The wrapper that runs a rank on a remote host for horovodlite-run --gloo:

    python3 -m horovodlite.runner.task -- COMMAND...

It starts COMMAND in a session of its own and ends that whole session (SIGTERM,
then SIGKILL after a grace period) when its own stdin reaches end-of-file, i.e.
when the launcher closed the pipe or died, or the ssh connection broke. ssh
without a terminal does not signal remote processes when the client ends; this
is what keeps a remote rank from outliving its job. Its exit status is
COMMAND's (128 + N when COMMAND died of signal N).
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


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("horovodlite.runner.task: usage: python3 -m horovodlite.runner.task -- COMMAND...", file=sys.stderr)
        return 2
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True)
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
