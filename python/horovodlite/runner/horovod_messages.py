"""Horovod 0.28's texts for the events its users' scripts and tests grep
(horovod/runner/gloo_run.py, horovod/runner/elastic/constants.py), printed
beside horovodlite's own message where the same event happens."""

# A worker exited non-zero and the job ended (Horovod: the first such process,
# by the time it exited; its name is the rank in a static Gloo job,
# <host>[<local_rank>] in an elastic one).
NONZERO_EXIT = ("Horovod detected that one or more processes exited with non-zero status, thus causing the job to "
                "be terminated. The first process to do so was:\nProcess name: {name}\nExit code: {code}")

# An elastic job re-formed its world --reset-limit times and needed another reset.
RESET_LIMIT_EXCEEDED = "Job has been reset {} times, exceeding the limit."


def nonzero_exit(name, code):
    return NONZERO_EXIT.format(name=name, code=code)


def elastic_nonzero_exit(host, local_rank, code):
    return nonzero_exit("%s[%d]" % (host, local_rank), code)


def reset_limit_exceeded(limit):
    return RESET_LIMIT_EXCEEDED.format(limit)
