"""Triggers: async waits that run in Airflow's triggerer and hold no worker slot."""
