"""Operators: the tasks of one DAG run (plan, Spark job, publish, report)."""
