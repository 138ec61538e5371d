"""Hooks: endpoints and secrets from Airflow connections, nothing else."""
