"""The triggerer's shared offset readers (`provider.triggers.new_records.SharedReaders`): gates share a reader only
when their clients would be the same, the last holder closes it, and a refusal makes the next gate a new one.
(Creating a reader connects to nothing; the gates against a real broker are in tests/integration/test_data_gate.py.)"""

from __future__ import annotations

from helpers import make_spec

from ingest_core.provider.triggers.new_records import SharedReaders


def spec(datasource: str, **props):
    return make_spec("localhost:1", datasource, topic=f"t_{datasource}",
                     consumerProperties={"bootstrap.servers": "localhost:1", **props})


def test_gates_with_the_same_client_settings_share_one_reader_and_the_last_holder_closes_it():
    readers = SharedReaders()
    a, b = readers.acquire(spec("a")), readers.acquire(spec("b"))  # two datasources, two topics, one cluster
    assert a is b and a.holders == 2 and readers.open() == 1
    readers.release(a)
    assert readers.open() == 1 and a.reader._clients  # still held by b: open
    readers.release(b)
    assert readers.open() == 0 and not a.reader._clients  # closed: its consumers are gone


def test_other_credentials_or_isolation_get_a_reader_of_their_own():
    readers = SharedReaders()
    plain = readers.acquire(spec("a"))
    other_user = readers.acquire(spec("b", **{"sasl.username": "other", "sasl.password": "x",
                                              "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}))
    uncommitted = readers.acquire(spec("c", **{"isolation.level": "read_uncommitted"}))
    assert len({id(plain), id(other_user), id(uncommitted)}) == 3 and readers.open() == 3
    for held in (plain, other_user, uncommitted):
        readers.release(held)
    assert readers.open() == 0


def test_a_refusal_gives_the_next_gate_a_new_reader_while_the_others_keep_theirs():
    readers = SharedReaders()
    first, second = readers.acquire(spec("a")), readers.acquire(spec("b"))
    readers.release(first, discard=True)  # the broker refused these credentials
    fresh = readers.acquire(spec("c"))
    assert fresh is not second and second.reader._clients  # the other gate still polls with its own
    readers.release(second)
    assert not second.reader._clients and readers.open() == 1
    readers.release(fresh)
    assert readers.open() == 0
