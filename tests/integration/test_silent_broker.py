"""A broker that accepts connections and never answers costs a status read one deadline, however many datasources
wait on it, not one timeout after another per datasource."""

from helpers import SIMPLE, spec_from, sqlite_store
from silent_server import SilentServer

from ingest_core.service.status import collect_statuses


NAMES = ["a", "b", "c", "d"]


def test_datasources_on_the_same_silent_broker_wait_for_it_together(tmp_path):
    server = SilentServer()
    store = sqlite_store(tmp_path)
    specs = {}
    for name in NAMES:
        specs[name] = spec_from(server.address, f"topic-{name}", SIMPLE, datasource=name)
        store.datasources.register_spec(name, specs[name].to_raw(), specs[name].fingerprint())
    try:
        reports = collect_statuses(store, NAMES, specs, kafka_timeout_s=2.0)
    finally:
        server.close()
    assert [r.datasource for r in reports] == NAMES
    for r in reports:  # each says why its lag is unknown, with the broker and the deadline
        [error] = [e for e in r.recent_errors if e.error_class == "BrokerUnavailableError"]
        assert r.latest is None and server.address in error.message and "2s" in error.message, error
        # named as the dependency that did not answer, in --json as in the text
        [down] = r.to_json()["payload"]["unavailableDependencies"]
        assert down == {"dependency": "kafka", "endpoint": server.address, "deadlineSeconds": 2.0,
                        "message": error.message}
    # they waited at once: all their connections were open at the same time (one after another: two at most, the
    # one closing and the next)
    assert server.most_at_once >= len(NAMES)
