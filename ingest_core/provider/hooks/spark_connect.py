"""The Spark Connect endpoint of an Airflow connection (the Spark provider's `spark_connect` type)."""

from __future__ import annotations


def connection_url(conn_id: str) -> str:
    """`sc://host:port/;token=...;user_id=...` from the connection: host, port, login as user id, password as token."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook

    return SparkConnectHook(conn_id).get_connection_url()
