"""Replays fuzz/corpus_rendezvous through fuzz/fuzz_rendezvous.py's checks (no
atheris needed): the seeds, and every input a fuzzing run found and fixed,
stay refused from outside and harmless from inside."""

import os
import sys

import pytest

FUZZ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "fuzz")
sys.path.insert(0, FUZZ)
import fuzz_rendezvous  # noqa: E402

CORPUS = os.path.join(FUZZ, "corpus_rendezvous")


@pytest.mark.parametrize("name", sorted(os.listdir(CORPUS)))
def test_corpus_input(name):
    with open(os.path.join(CORPUS, name), "rb") as f:
        fuzz_rendezvous.check(f.read())


def test_the_seeds_reach_the_store_from_inside():
    # The job's side must really serve the signed seeds, or the fuzzer would
    # only ever exercise the refusal.
    job = fuzz_rendezvous._server(fuzz_rendezvous.JOB_KEY, lambda: fuzz_rendezvous.JOB_CLOCK)
    with open(os.path.join(CORPUS, "signed_put"), "rb") as f:
        reply = fuzz_rendezvous._feed(job, f.read())
    assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
    assert job.store.get("global", "new") == b"value"
    with open(os.path.join(CORPUS, "signed_keep_alive"), "rb") as f:
        reply = fuzz_rendezvous._feed(job, f.read())
    assert reply.count(b"HTTP/1.1 200") == 3, reply


def test_the_seeds_are_what_the_generator_writes():
    for name, data in fuzz_rendezvous.seeds().items():
        with open(os.path.join(CORPUS, name), "rb") as f:
            stored = f.read()
        # Signatures carry a random client id: compare all but the auth header.
        strip = [line for line in stored.split(b"\r\n") if not line.startswith(b"X-HVL-Auth")]
        assert strip == [line for line in data.split(b"\r\n") if not line.startswith(b"X-HVL-Auth")], name
