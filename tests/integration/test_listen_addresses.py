"""What the project starts listens on this machine only unless told otherwise: the Spark Connect server
(its gRPC port, the driver's and the block manager's) and the demo's Airflow components."""

import psutil
import pytest

from ingest_core.dev import demo

LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}


def _listening(pid: int) -> set[tuple[str, int]]:
    root = psutil.Process(pid)
    out = set()
    for proc in [root, *root.children(recursive=True)]:
        for conn in proc.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                out.add((conn.laddr.ip, conn.laddr.port))
    return out


def test_the_spark_connect_server_listens_on_loopback_only(spark_connect):
    if getattr(spark_connect, "proc", None) is None:
        pytest.skip("INGEST_TEST_SPARK_CONNECT names a server this session did not start")
    sockets = _listening(spark_connect.proc.pid)
    assert sockets, "the server listens on nothing?"
    assert {ip for ip, _ in sockets} <= LOOPBACK, sockets
    assert spark_connect.port in {port for _, port in sockets}


def test_the_demo_ui_runs_airflows_components_bound_to_the_host_it_is_given():
    from airflow.cli import cli_parser

    commands = demo.ui_commands("127.0.0.1")
    assert set(commands) == {"api-server", "scheduler", "dag-processor", "triggerer"}  # what `standalone` runs
    assert commands["api-server"][commands["api-server"].index("--host") + 1] == "127.0.0.1"
    assert demo.ui_env({}, "127.0.0.1")["AIRFLOW__API__HOST"] == "127.0.0.1"
    # the log servers Airflow binds to every interface are not started
    assert "--skip-serve-logs" in commands["scheduler"] and "--skip-serve-logs" in commands["triggerer"]
    parser = cli_parser.get_parser()
    for args in commands.values():  # each is a command line this Airflow accepts
        parser.parse_args(args)
    assert demo.ui_commands("0.0.0.0")["api-server"][2] == "0.0.0.0"
